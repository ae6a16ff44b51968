"""A bounded chaos run (issue #41): two models in worker processes under mixed streaming and
non-streaming load while a worker is killed twice. Every request ends with a status or a
terminal event (never a stream cut without one), the killed model serves again, the idle KV
goes back to its floor (kv_idle_release), and no worker process outlives the server."""

import concurrent.futures
import os
import random
import signal
import tempfile
import threading
import time

import openai

from conftest import PIER_MODEL, PierServer, call, wait_for, write_config

LOAD_SECONDS = 20


def instances(server):
    """{model id: [instance detail]} from /admin/models."""
    detail = call(server, "GET", "/admin/models")[1]["data"]
    return {m["id"]: m["pier"]["instances"] for m in detail}


def one_request(c, rng):
    """What became of one request: ("done", finish_reason), ("refused", status) or
    ("ended", error text) for a stream ended by an error event; ("cut", ...) is the failure."""
    model = rng.choice(["alpha", "beta"])
    messages = [{"role": "user", "content": f"Count to {rng.randint(5, 30)} in words."}]
    max_tokens = rng.randint(8, 40)
    try:
        if rng.random() < 0.5:
            r = c.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                          temperature=0)
            return ("done", r.choices[0].finish_reason)
        finish = None
        for chunk in c.chat.completions.create(model=model, messages=messages,
                                               max_tokens=max_tokens, temperature=0,
                                               stream=True):
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return ("done", finish) if finish else ("cut", "stream ended without a finish reason")
    except openai.APIStatusError as error:
        return ("refused", error.status_code)
    except openai.APIError as error:  # an error event inside a started stream
        text = str(error)
        return ("ended", text) if text else ("cut", "empty error")


def test_every_request_ends_cleanly_while_workers_are_killed():
    folder = tempfile.mkdtemp(prefix="pier-chaos-")
    config = write_config(folder, f"""
workers: on
worker_heartbeat_timeout: 1
kv_idle_release: 2
max_queued: 8
models:
  - {{name: alpha, path: {PIER_MODEL}, ctx: 1024}}
  - {{name: beta, path: {PIER_MODEL}, ctx: 1024}}
""")
    s = PierServer(["--config", config], with_model=False)
    pids = set()
    try:
        c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0,
                          timeout=120)
        floor = {m: [i["worker"]["kv_lent_bytes"] for i in ins]
                 for m, ins in instances(s).items()}
        stop = threading.Event()
        outcomes = []
        lock = threading.Lock()

        def client_loop(seed):
            rng = random.Random(seed)
            while not stop.is_set():
                outcome = one_request(c, rng)
                with lock:
                    outcomes.append(outcome)

        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            loops = [pool.submit(client_loop, seed) for seed in range(6)]
            started = time.monotonic()
            for victim, at in (("alpha", 5), ("beta", 11)):
                time.sleep(max(0.0, started + at - time.monotonic()))
                pid = instances(s)[victim][0]["worker"]["pid"]
                pids.add(pid)
                os.kill(pid, signal.SIGKILL)
            time.sleep(max(0.0, started + LOAD_SECONDS - time.monotonic()))
            stop.set()
            for loop in loops:
                loop.result(timeout=180)

        kinds = [o[0] for o in outcomes]
        assert "cut" not in kinds, [o for o in outcomes if o[0] == "cut"]
        assert kinds.count("done") >= 20, outcomes
        # Refusals are the documented ones: a full queue (429) or a lost instance (503).
        assert all(o[1] in (429, 503) for o in outcomes if o[0] == "refused"), outcomes
        # Both models serve again, in restarted workers.
        assert wait_for(lambda: all(i["worker"]["state"] == "ready"
                                    for ins in instances(s).values() for i in ins), timeout=60)
        for model in ("alpha", "beta"):
            pids.update(i["worker"]["pid"] for i in instances(s)[model])
            r = c.chat.completions.create(model=model, messages=[{"role": "user",
                                                                  "content": "hi"}],
                                          max_tokens=4)
            assert r.choices[0].finish_reason in ("length", "stop")
        # Idle: every engine empty and its KV back to the floor it had at the start.
        assert wait_for(lambda: {m: [i["worker"]["kv_lent_bytes"] for i in ins]
                                 for m, ins in instances(s).items()} == floor, timeout=30), \
            (instances(s), floor)
        detail = call(s, "GET", "/admin/models")[1]["data"]
        for m in detail:
            engine = m["pier"]["engine"]
            assert engine["running"] == 0 and engine["waiting"] == 0, (m["id"], engine)
        print(f"chaos: {len(outcomes)} requests, {kinds.count('done')} done, "
              f"{kinds.count('refused')} refused, {kinds.count('ended')} ended by an error event")
    finally:
        s.stop_and_check()
    # No worker outlives the server.
    for pid in pids:
        assert wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                        open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=10), pid
