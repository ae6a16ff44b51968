"""The web console's server side over HTTP (issue #47), without a browser: /admin/events as a
live SSE stream (actions, unloads, refusals with their reasons, heartbeats), /admin/requests
while a chat streams, POST /admin/models/{name}/drain restarting a real worker process, the
admin guard against cross-origin POSTs and DNS rebinding, and the console refusing other
machines when the server has no admin key (--host 0.0.0.0). The browser tests are in
test_console_ui.py."""

import http.client
import json
import socket
import tempfile
import threading
import time
import urllib.request

import openai
import pytest

from conftest import PIER_MODEL, PierServer, call, wait_for, write_config


def raw(server, method, path, headers=None, body=None, host=None):
    """(status, headers, body text) of one request, with exactly the headers given."""
    conn = http.client.HTTPConnection(host or server.host, server.port, timeout=30)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read().decode("utf-8", "replace")
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


class EventFollower:
    """Follows GET /admin/events in a thread, collecting frames and heartbeats."""

    def __init__(self, server, query="", headers=None):
        self.events, self.heartbeats, self.done = [], 0, False
        self.conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
        self.conn.request("GET", "/admin/events" + query, headers=headers or {})
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        assert self.response.getheader("Content-Type") == "text/event-stream"
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        event = {}
        try:
            for line in self.response:
                line = line.decode().rstrip("\n")
                if line.startswith(": heartbeat"):
                    self.heartbeats += 1
                elif line.startswith("event: "):
                    event["event"] = line[7:]
                elif line.startswith("data: "):
                    event["data"] = json.loads(line[6:])
                elif line == "" and event:
                    self.events.append(event)
                    event = {}
        except Exception:  # noqa: BLE001 - the connection closing ends the reader
            pass
        self.done = True

    def types(self):
        return [e["event"] for e in self.events]

    def close(self):
        self.conn.close()


@pytest.fixture(scope="module")
def smol():
    s = PierServer(["--name", "smol"])
    yield s
    s.stop_and_check()


def test_the_event_stream_shows_actions_and_unloads_as_they_happen(smol):
    follower = EventFollower(smol, "?replay=0")
    try:
        status, body = call(smol, "POST", "/admin/models/smol/unload")
        assert status == 200 and body["pier"]["state"] == "unloaded", body
        wait_for(lambda: "model_unloaded" in follower.types(), timeout=10)
        # Unloaded, it still says what it is (from its latest load), for the page's playground.
        assert call(smol, "GET", "/admin/models/smol")[1]["pier"]["kind"] == "generate"
        status, body = call(smol, "POST", "/admin/models/smol/load")
        assert status == 200, body
        wait_for(lambda: "model_loaded" in follower.types(), timeout=10)
        kinds = follower.types()
        assert kinds.index("model_unloaded") < kinds.index("model_loaded"), kinds
        actions = [e["data"]["message"] for e in follower.events if e["event"] == "admin_action"]
        assert "unload of smol asked" in actions and "load of smol done" in actions, actions
        seqs = [e["data"]["seq"] for e in follower.events]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        # Nothing happens: a heartbeat comes within 5 s (plus a tick).
        wait_for(lambda: follower.heartbeats > 0, timeout=8)
        # A reader that comes back after the last event it saw gets only what followed.
        last = seqs[-1]
        status, later = call(smol, "GET", f"/admin/events?format=json&after={last}")
        assert status == 200 and later["events"] == [] and later["next"] == last
        status, earlier = call(smol, "GET", f"/admin/events?format=json&after={last - 1}")
        assert [e["seq"] for e in earlier["events"]] == [last]
    finally:
        follower.close()


def test_the_live_board_shows_a_streaming_chat_then_forgets_it(smol):
    client = openai.OpenAI(base_url=smol.base_url + "/v1", api_key="unused", max_retries=0)
    seen = []

    def watch():
        for _ in range(200):
            rows = call(smol, "GET", "/admin/requests")[1]["data"]
            if rows and rows[0]["tokens"] > 0:
                seen.append(rows[0])
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    stream = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Count to one hundred."}],
        max_tokens=120, stream=True, extra_body={"ignore_eos": True})
    chunks = sum(1 for _ in stream)
    watcher.join()
    assert chunks > 100
    assert seen, "the chat never showed on /admin/requests"
    row = seen[0]
    assert row["model"] == "smol" and row["route"] == "/v1/chat/completions", row
    assert row["state"] == "running" and row["id"].startswith("chatcmpl-"), row
    assert row["tenant"] == "default" and row["class"] == "normal", row
    assert row["age_seconds"] >= 0
    wait_for(lambda: call(smol, "GET", "/admin/requests")[1]["data"] == [], timeout=5)


def test_refusals_become_events_with_their_reason(tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - {key: sk-one, tenant: one, requests_per_second: 0.01}\n")
    server = PierServer(["--name", "smol", "--api-keys", str(keys)])
    try:
        headers = {"Authorization": "Bearer sk-one", "Content-Type": "application/json"}
        body = json.dumps({"model": "smol", "messages": [{"role": "user", "content": "Hi"}],
                           "max_tokens": 2})
        assert raw(server, "POST", "/v1/chat/completions", headers, body)[0] == 200
        status, _, text = raw(server, "POST", "/v1/chat/completions", headers, body)
        assert status == 429, text
        reason = json.loads(text)["error"]["message"]
        events = call(server, "GET", "/admin/events?format=json")[1]["events"]
        refused = [e for e in events if e["type"] == "request_refused"]
        assert len(refused) == 1, events
        assert refused[0]["status"] == 429 and refused[0]["route"] == "/v1/chat/completions"
        assert reason in refused[0]["message"], (reason, refused[0])
        assert refused[0]["level"] == "warning"
    finally:
        server.stop_and_check()


def test_admin_posts_from_a_foreign_origin_and_rebound_names_are_refused(smol):
    own = f"{smol.host}:{smol.port}"
    status, _, text = raw(smol, "POST", "/admin/models/smol/unload",
                          {"Host": own, "Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in text, text
    assert call(smol, "GET", "/admin/models/smol")[1]["pier"]["state"] == "ready"
    # DNS rebinding: a name that resolves to 127.0.0.1 for the attacker's page.
    status, _, text = raw(smol, "GET", "/admin/models", {"Host": f"evil.example:{smol.port}"})
    assert status == 403 and "DNS-rebinding" in text, text
    status, _, _ = raw(smol, "GET", "/admin/events?format=json", {"Host": "rebind.example"})
    assert status == 403
    # The console's own page posts with its own origin: allowed (404: no such model).
    status, _, text = raw(smol, "POST", "/admin/models/nope/load",
                          {"Host": own, "Origin": f"http://{own}"})
    assert status == 404, text
    assert raw(smol, "GET", "/admin/models", {"Host": f"localhost:{smol.port}"})[0] == 200


def outward_address():
    """An address of this machine that is not loopback (None when it has none)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: it only picks a route
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def test_on_all_interfaces_without_a_key_the_console_refuses_other_machines():
    address = outward_address()
    assert address is not None, "this machine has no non-loopback address to test with"
    server = PierServer(["--name", "smol", "--host", "0.0.0.0"])
    try:
        status, headers, text = raw(server, "GET", "/ui", host=address)
        assert status == 403 and "--admin-key" in text, text
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert raw(server, "GET", "/admin/models", host=address)[0] == 403
        assert raw(server, "GET", "/ui", host="127.0.0.1")[0] == 200
    finally:
        server.stop_and_check()
    keyed = PierServer(["--name", "smol", "--host", "0.0.0.0", "--admin-key", "adm-1"])
    try:
        status, headers, text = raw(keyed, "GET", "/ui", host=address)
        assert status == 200 and "<html" in text
        assert raw(keyed, "GET", "/admin/models", host=address)[0] == 401
        status, _, text = raw(keyed, "GET", "/admin/models", {"Authorization": "Bearer adm-1"},
                              host=address)
        assert status == 200 and json.loads(text)["data"][0]["id"] == "smol"
    finally:
        keyed.stop_and_check()


def test_drain_restarts_a_worker_process_and_says_so():
    folder = tempfile.mkdtemp(prefix="pier-console-")
    config = write_config(folder, f"""
workers: on
models:
  - {{name: alpha, path: {PIER_MODEL}, ctx: 1024}}
""")
    server = PierServer(["--config", config], with_model=False)
    try:
        def worker():
            return call(server, "GET", "/admin/models/alpha")[1]["pier"]["instances"][0]["worker"]

        before = worker()
        assert before["state"] == "ready"
        status, body = call(server, "POST", "/admin/models/alpha/drain")
        assert status == 200 and body == {"model": "alpha", "draining": [1], "not_ready": []}, body
        wait_for(lambda: worker()["state"] == "ready" and worker()["pid"] != before["pid"],
                 timeout=60)
        after = worker()
        assert after["restarts"] == before["restarts"] + 1
        assert "drained by an operator" in after["last_failure"], after

        def kinds():
            return [e["type"] for e in call(server, "GET", "/admin/events?format=json")[1]["events"]]

        wait_for(lambda: "worker_restarted" in kinds(), timeout=10)
        status, body = call(server, "POST", "/admin/models/alpha/drain?instance=2")
        assert status == 400 and "instance must be 1..1" in body["error"]["message"], body
        # It serves again.
        status, body = call(server, "POST", "/v1/chat/completions",
                            {"model": "alpha", "messages": [{"role": "user", "content": "Hi"}],
                             "max_tokens": 4})
        assert status == 200, body
    finally:
        server.stop_and_check()


def test_drain_of_a_model_without_workers_is_a_conflict(smol):
    status, body = call(smol, "POST", "/admin/models/smol/drain")
    assert status == 409 and "no worker processes" in body["error"]["message"], body
