"""Serving behaviour: API keys (401, open /health and /ready, keyed /metrics), priority
clamping, the YAML configuration, 429 when the queue is full, a client that disconnects
mid-stream (its request and KV freed, seen in /metrics), a client that stops reading a
stream (aborted as a slow reader, its KV freed), 200 clients at once, a slow sender,
SIGTERM during a stream, and startup errors (exit 1, nothing listening)."""

import json
import signal
import socket
import subprocess
import threading
import time

import openai
import pytest

from conftest import PIER_BINARY, PIER_MODEL
from rawhttp import connect, json_request, metric, metrics, request

GOOD_KEY = "sk-test-critical-0123456789"
NORMAL_KEY = "sk-test-normal-0123456789"


def stream_request(server, max_tokens, path="/v1/completions"):
    body = json.dumps({"model": server.model_id, "prompt": "Write a long story about a dragon.",
                       "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
                       "temperature": 0}).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def read_until(sock, marker, timeout_s=60):
    sock.settimeout(timeout_s)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture
def keyed_server(start_server, tmp_path):
    """A server configured through --config: keys file, metrics key and model name."""
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - key: {GOOD_KEY}\n    tenant: ops\n"
                    f"  - key: {NORMAL_KEY}\n    tenant: batch\n    max_priority: normal\n")
    config = tmp_path / "serve.yaml"
    config.write_text("name: keyed-model\napi_keys: keys.yaml\nmetrics_key: scrape-key\n"
                      "port: 8080\n")
    # --port 0 (in the base flags) wins over the file's port.
    return start_server("--config", str(config))


def test_api_keys_guard_the_api_but_not_health(keyed_server):
    s = keyed_server
    assert s.model_id == "keyed-model"
    body = {"model": s.model_id, "prompt": "Hi", "max_tokens": 2}
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"X-API-Key": "nope"}):
        status, _, response = json_request(s, "POST", "/v1/completions", body, headers)
        assert status == 401, response
        assert response["error"]["type"] == "authentication_error"
        for path in ("/v1/models", "/v1/models/keyed-model"):
            assert json_request(s, "GET", path, headers=headers)[0] == 401
        assert json_request(s, "POST", "/tokenize", {"content": "a"}, headers)[0] == 401
    assert json_request(s, "GET", "/health")[0] == 200
    assert json_request(s, "GET", "/ready")[0] == 200
    good = {"Authorization": f"Bearer {GOOD_KEY}"}
    assert json_request(s, "POST", "/v1/completions", body, good)[0] == 200
    assert json_request(s, "POST", "/tokenize", {"content": "a"}, {"X-API-Key": GOOD_KEY})[0] == 200
    # The official client sends the key as a bearer token.
    client = openai.OpenAI(base_url=s.base_url + "/v1", api_key=GOOD_KEY, max_retries=0)
    assert [m.id for m in client.models.list().data] == ["keyed-model"]
    bad = openai.OpenAI(base_url=s.base_url + "/v1", api_key="sk-bad", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # /metrics needs the metrics key (not an API key).
    assert request(s, "GET", "/metrics")[0] == 401
    assert request(s, "GET", "/metrics", headers=good)[0] == 401
    values = metrics(s, {"Authorization": "Bearer scrape-key"})
    assert any(k.startswith("pier_") for k in values)


def test_priority_is_clamped_to_the_key_ceiling(keyed_server):
    s = keyed_server
    body = {"model": s.model_id, "prompt": "Hi", "max_tokens": 1}
    normal = {"Authorization": f"Bearer {NORMAL_KEY}"}
    status, headers, _ = json_request(s, "POST", "/v1/completions", body,
                                      {**normal, "X-Priority": "critical"})
    assert status == 200 and headers["x-priority-applied"] == "normal"
    status, headers, _ = json_request(s, "POST", "/v1/completions", {**body, "priority": "low"},
                                      normal)
    assert status == 200 and headers["x-priority-applied"] == "low"
    status, headers, _ = json_request(s, "POST", "/v1/completions", body,
                                      {"Authorization": f"Bearer {GOOD_KEY}", "X-Priority": "0"})
    assert status == 200 and headers["x-priority-applied"] == "critical"


def test_queue_full_is_429_with_retry_after(start_server):
    s = start_server("--max-queued", "1", "--max-seqs", "1")
    body = {"model": s.model_id, "prompt": "Count to ten:", "max_tokens": 8, "ignore_eos": True}
    results = []

    def call(max_tokens):
        status, headers, _ = json_request(s, "POST", "/v1/completions",
                                          {**body, "max_tokens": max_tokens})
        results.append((status, headers))

    def wait_for(name):
        deadline = time.monotonic() + 60
        while metric(metrics(s), name) < 1:
            assert time.monotonic() < deadline, f"{name} never reached 1"
            time.sleep(0.02)

    # One long request runs (--max-seqs 1), a second waits: the queue is at its limit.
    running = threading.Thread(target=call, args=(600,))
    running.start()
    wait_for("pier_num_requests_running")
    waiting = threading.Thread(target=call, args=(8,))
    waiting.start()
    wait_for("pier_num_requests_waiting")
    # A burst now is refused at once, none of it queued.
    burst = [threading.Thread(target=call, args=(8,)) for _ in range(4)]
    for t in burst:
        t.start()
    for t in burst:
        t.join(timeout=60)
    refused = [(status, h) for status, h in results if status == 429]
    assert len(refused) == 4, results
    assert all(int(h["retry-after"]) >= 1 for _, h in refused)
    for t in (running, waiting):
        t.join(timeout=300)
    statuses = sorted(status for status, _ in results)
    assert statuses == [200, 200, 429, 429, 429, 429], statuses


def test_a_client_that_stops_reading_is_aborted_and_its_kv_freed(start_server):
    # Chunks with 20 top logprobs each (~1.5 KB) fill the kernel's socket buffers (up to
    # 4 MiB on the server's side) within a few thousand tokens; then the server's writes
    # stall, the engine keeps producing, and the stream's backlog passes --stream-backlog.
    s = start_server("--stream-backlog", "32", "--write-timeout", "5")
    body = json.dumps({"model": s.model_id, "max_tokens": 3500, "stream": True,
                       "ignore_eos": True, "logprobs": True, "top_logprobs": 20,
                       "messages": [{"role": "user", "content": "Tell a long story."}]}).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # and it never reads
    sock.connect(("127.0.0.1", s.port))
    sock.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  ).encode() + body)
    try:
        deadline = time.monotonic() + 120
        while True:
            values = metrics(s)
            aborts = values.get(f'pier_client_aborts_total{{model="{s.model_id}",'
                                f'reason="slow_reader"}}', 0)
            if aborts >= 1:
                break
            assert metric(values, "pier_generation_tokens_total") == 0, \
                "the stream finished before its client was found slow"
            assert time.monotonic() < deadline, "the slow reader was never aborted"
            time.sleep(0.5)
        deadline = time.monotonic() + 5
        while (metric(metrics(s), "pier_num_requests_running") != 0 or
               metric(metrics(s), "pier_kv_cache_usage_ratio") != 0):
            assert time.monotonic() < deadline, "the aborted stream kept its KV"
            time.sleep(0.05)
        # The server still serves others.
        status, _, _ = json_request(s, "POST", "/v1/completions",
                                    {"model": s.model_id, "prompt": "Hi", "max_tokens": 2})
        assert status == 200
    finally:
        sock.close()


def test_disconnect_mid_stream_frees_the_request_and_its_kv(server):
    with connect(server) as sock:
        sock.sendall(stream_request(server, max_tokens=2000))
        assert b"data: " in read_until(sock, b"data: ")
        # The engine publishes its figures after the step whose tokens were just sent.
        deadline = time.monotonic() + 5
        while True:
            during = metrics(server)
            if (metric(during, "pier_num_requests_running") >= 1 and
                    metric(during, "pier_kv_cache_usage_ratio") > 0):
                break
            assert time.monotonic() < deadline, "the streaming request never showed as running"
            time.sleep(0.05)
    deadline = time.monotonic() + 5
    while True:
        values = metrics(server)
        if (metric(values, "pier_num_requests_running") == 0 and
                metric(values, "pier_kv_cache_usage_ratio") == 0):
            break
        assert time.monotonic() < deadline, "request still running 5 s after the disconnect"
        time.sleep(0.1)


def test_200_clients_at_once_are_all_answered(server):
    started = time.monotonic()
    sockets = [connect(server) for _ in range(200)]
    try:
        for sock in sockets:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        for sock in sockets:
            data = read_until(sock, b'{"status":"ok"}', timeout_s=20)
            assert data.startswith(b"HTTP/1.1 200"), data[:100]
    finally:
        for sock in sockets:
            sock.close()
    assert time.monotonic() - started < 20


def test_slow_sender_holds_no_thread(server):
    """A client sending its request byte by byte does not delay anyone else."""
    head = b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 17\r\n\r\n"
    with connect(server) as slow:
        for i, byte in enumerate(head[:20]):
            slow.sendall(bytes([byte]))
            if i % 5 == 0:
                t0 = time.monotonic()
                status, _, _ = request(server, "GET", "/health", timeout=5)
                assert status == 200 and time.monotonic() - t0 < 2
            time.sleep(0.02)
        slow.sendall(head[20:] + b'{"content": "hi"}')
        data = read_until(slow, b"]}", timeout_s=10)
    assert data.startswith(b"HTTP/1.1 200"), data[:200]


def test_sigterm_during_a_stream_ends_it_and_exits_0(start_server):
    s = start_server("--shutdown-grace", "2")
    with connect(s) as sock:
        sock.sendall(stream_request(s, max_tokens=4000))
        assert b"data: " in read_until(sock, b"data: ")
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        # The stream ends (the server closes it) within the grace period plus slack.
        sock.settimeout(30)
        while sock.recv(65536):
            pass
        ended = time.monotonic() - t0
        code = s.proc.wait(timeout=30)
    assert code == 0, s.log()
    assert ended < 2 + 10, ended
    assert time.monotonic() - t0 < 2 + 15
    with pytest.raises(OSError):
        socket.create_connection((s.host, s.port), timeout=2).close()


def run_serve(*args, timeout=120):
    return subprocess.run([PIER_BINARY, "serve", "--port", "0", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_bad_configuration_exits_1_before_listening(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("port: 0\nmax_seq: 4\nthreadz: 2\n")
    r = run_serve("-m", PIER_MODEL, "--config", str(config))
    assert r.returncode == 1
    assert "max_seq" in r.stderr and "threadz" in r.stderr, r.stderr
    assert "listening" not in r.stdout
    r = run_serve("-m", str(tmp_path / "missing.gguf"))
    assert r.returncode == 1 and "missing.gguf" in r.stderr, r.stderr
    assert "listening" not in r.stdout
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - key: a\n")
    r = run_serve("-m", PIER_MODEL, "--api-keys", str(keys))
    assert r.returncode == 1 and "tenant" in r.stderr, r.stderr
    r = run_serve("-m", PIER_MODEL, "--memory-budget", "1MiB")
    assert r.returncode == 1 and r.stderr, r.stderr
    assert "listening" not in r.stdout


def test_startup_prints_a_curl_that_works(start_server):
    """After the listening line comes one `try: curl ...` line; run as printed, it answers."""
    import shlex
    s = start_server()
    line = s.lines.get(timeout=10)
    prefix = "pier serve: try: "
    assert line is not None and line.startswith(prefix), line
    argv = shlex.split(line[len(prefix):])
    assert argv[0] == "curl" and f"http://{s.host}:{s.port}/v1/chat/completions" in argv
    out = subprocess.run(argv + ["-sS", "--fail"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["model"] == s.model_id
    assert reply["choices"][0]["message"]["content"]
