"""`pier serve --workers on`: each model instance in its own `pier worker` process. Killing one
worker (SIGKILL, SIGSTOP) is a non-event for the other model; the killed model's streams end
with a clear error, it is restarted and serves the same tokens again; the memory ledger is
what it was; no worker outlives the supervisor; a worker that keeps failing is quarantined;
one that sends garbage is dropped without hurting the supervisor."""

import concurrent.futures
import json
import os
import signal
import tempfile
import time

import openai
import pytest

import rawhttp
from conftest import PIER_MODEL, PierServer, call, metrics_text, wait_for, write_config

PROMPT = [{"role": "user", "content": "Count from one to twenty in words."}]


def workers_of(server):
    """{model id: [worker health of each instance]}"""
    detail = call(server, "GET", "/admin/models")[1]["data"]
    return {m["id"]: [i["worker"] for i in m["pier"]["instances"]] for m in detail}


def guaranteed_committed(server):
    """The device's committed bytes less the elastic KV lent to workers above their minimum."""
    detail = call(server, "GET", "/admin/models")[1]
    lent = sum(i["worker"]["kv_lent_bytes"] for m in detail["data"]
               for i in m["pier"]["instances"])
    return detail["device"]["committed_bytes"] - lent


def client_of(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def stream_tokens(c, model, max_tokens, ignore_eos=False):
    """The streamed text, and the exception that ended the stream (None when it completed)."""
    text = ""
    try:
        stream = c.chat.completions.create(model=model, messages=PROMPT, max_tokens=max_tokens,
                                           temperature=0, seed=1, stream=True,
                                           extra_body={"ignore_eos": ignore_eos})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text, None
    except Exception as error:  # noqa: BLE001 - the test inspects it
        return text, error


TWO_MODELS = f"""
workers: on
worker_heartbeat_timeout: 1
models:
  - {{name: alpha, path: {PIER_MODEL}, ctx: 1024}}
  - {{name: beta, path: {PIER_MODEL}, ctx: 1024}}
"""


@pytest.fixture(scope="module")
def two_models():
    folder = tempfile.mkdtemp(prefix="pier-workers-")
    config = write_config(folder, TWO_MODELS)
    s = PierServer(["--config", config], with_model=False)
    s.folder = folder
    yield s
    s.stop_and_check()


def test_each_instance_runs_in_a_named_worker_process(two_models):
    workers = workers_of(two_models)
    assert set(workers) == {"alpha", "beta"}
    for model, (worker,) in workers.items():
        assert worker["state"] == "ready" and worker["pid"] > 0, worker
        with open(f"/proc/{worker['pid']}/cmdline", "rb") as f:
            cmdline = f.read().split(b"\0")
        assert cmdline[1:6] == [b"worker", b"--model", model.encode(), b"--instance", b"1"]
        assert worker["granted_bytes"] > 0 and worker["rss_bytes"] > 0
    device = call(two_models, "GET", "/admin/models")[1]["device"]
    assert device["committed_bytes"] == device["models_committed_bytes"]
    assert call(two_models, "GET", "/ready/alpha") == (200, {"status": "ready", "model": "alpha"})
    assert call(two_models, "GET", "/ready/nobody")[0] == 404


def test_kill_9_of_one_worker_leaves_the_other_model_untouched(two_models):
    c = client_of(two_models)
    reference_alpha = stream_tokens(c, "alpha", 96)[0]
    reference_beta = stream_tokens(c, "beta", 16)[0]
    committed = guaranteed_committed(two_models)
    victim = workers_of(two_models)["beta"][0]["pid"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        alphas = [pool.submit(stream_tokens, c, "alpha", 96) for _ in range(2)]
        doomed = pool.submit(stream_tokens, c, "beta", 900, True)
        time.sleep(1.0)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        results = [f.result() for f in alphas]
        doomed_text, doomed_error = doomed.result()
    for text, error in results:
        assert error is None and text == reference_alpha
    assert doomed_error is not None, "the killed worker's stream must end with an error"
    assert "instance 1 ended" in str(doomed_error) and "SIGKILL" in str(doomed_error), doomed_error
    assert wait_for(lambda: workers_of(two_models)["beta"][0]["state"] == "ready")
    recovered = time.monotonic() - killed_at
    beta = workers_of(two_models)["beta"][0]
    assert beta["pid"] != victim and beta["restarts"] == 1, beta
    assert "signal 9" in beta["last_failure"], beta
    print(f"kill-to-ready: {recovered:.2f} s")
    assert stream_tokens(c, "beta", 16)[0] == reference_beta
    # The ledger is what it was (elastic KV lent to the models aside: the killed worker's
    # went back with it, and the new one starts at its minimum).
    assert guaranteed_committed(two_models) == committed
    assert workers_of(two_models)["beta"][0]["kv_lent_bytes"] == 0
    text = metrics_text(two_models)
    assert 'pier_worker_restarts_total{model="beta",instance="1"} 1' in text
    assert 'pier_worker_up{model="alpha",instance="1"} 1' in text


def test_a_request_queued_while_the_worker_restarts_completes(two_models):
    c = client_of(two_models)
    reference = stream_tokens(c, "alpha", 16)[0]
    victim = workers_of(two_models)["alpha"][0]["pid"]
    os.kill(victim, signal.SIGKILL)
    # Sent at once: it waits for the restarted worker instead of failing.
    assert stream_tokens(c, "alpha", 16) == (reference, None)
    assert workers_of(two_models)["alpha"][0]["pid"] != victim


def test_a_stopped_worker_is_detected_killed_and_restarted(two_models):
    victim = workers_of(two_models)["alpha"][0]["pid"]
    restarts = workers_of(two_models)["alpha"][0]["restarts"]
    os.kill(victim, signal.SIGSTOP)
    stopped_at = time.monotonic()
    assert wait_for(lambda: workers_of(two_models)["alpha"][0]["restarts"] == restarts + 1,
                    timeout=10)
    assert time.monotonic() - stopped_at < 1 + 1 + 1, "heartbeat timeout (1 s) plus a second"
    alpha = workers_of(two_models)["alpha"][0]
    assert "missed heartbeats" in alpha["last_failure"], alpha
    assert wait_for(lambda: workers_of(two_models)["alpha"][0]["state"] == "ready")
    assert stream_tokens(client_of(two_models), "alpha", 8)[1] is None


def test_reload_starts_a_changed_model_beside_its_old_worker(two_models):
    # The new version's worker charges the device under its own owner (beta#2/worker while
    # beta/worker is the old one's), serves, and the old one drains away.
    write_config(two_models.folder, TWO_MODELS.replace("beta, path: " + PIER_MODEL + ", ctx: 1024",
                                                       "beta, path: " + PIER_MODEL + ", ctx: 512"))
    old_pid = workers_of(two_models)["beta"][0]["pid"]
    status, report = call(two_models, "POST", "/admin/reload")
    assert status == 200, report
    assert report["reloaded"] == ["beta"] and report["failed"] == [], report
    models = {m["id"]: m for m in call(two_models, "GET", "/v1/models")[1]["data"]}
    assert models["beta"]["max_model_len"] == 512
    assert workers_of(two_models)["beta"][0]["pid"] != old_pid
    assert stream_tokens(client_of(two_models), "beta", 8)[1] is None

    def beta_owners():
        detail = call(two_models, "GET", "/admin/models")[1]["data"]
        return [o["owner"] for m in detail if m["id"] == "beta"
                for o in m["pier"]["memory"]["owners"]]
    assert wait_for(lambda: beta_owners() == ["beta#2/worker"], timeout=10), beta_owners()
    device = call(two_models, "GET", "/admin/models")[1]["device"]
    assert device["committed_bytes"] == device["models_committed_bytes"], device
    assert 'owner="beta#2/worker"' in metrics_text(two_models)


def test_requests_resubmitted_into_a_full_queue_are_refused_as_a_full_queue_is():
    # One sequence runs and one may wait. Requests sent while the worker restarts are all
    # submitted to the new worker at once; those its queue cannot take get what a full queue
    # answers (429 with Retry-After; in a stream already started, the 429's error type), not
    # the 503 of a lost instance.
    config = write_config(tempfile.mkdtemp(prefix="pier-workers-"), f"""
workers: on
models:
  - {{name: q, path: {PIER_MODEL}, ctx: 512, threads: 1, max_seqs: 1, max_queued: 1}}
""")
    s = PierServer(["--config", config], with_model=False)
    try:
        os.kill(workers_of(s)["q"][0]["pid"], signal.SIGKILL)
        modes = [False, True] * 3
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(modes)) as pool:
            futures = [pool.submit(rawhttp.request, s, "POST", "/v1/completions",
                                   {"model": "q", "prompt": "hi", "max_tokens": 4,
                                    "stream": stream}) for stream in modes]
            results = [f.result() for f in futures]
        refused = 0
        for stream, (status, headers, data) in zip(modes, results):
            errors = [json.loads(line[len("data: "):])["error"]
                      for line in data.decode().splitlines()
                      if stream and line.startswith('data: {"error"')]
            if status == 429:  # refused at Submit (the worker was back) or at resubmission
                refused += 1
                assert headers.get("retry-after") == "1", headers
                assert "queue full" in json.loads(data)["error"]["message"], data
            elif errors:
                refused += 1
                assert status == 200 and len(errors) == 1, data
                assert errors[0]["type"] == "rate_limit_error", errors
                assert "queue full" in errors[0]["message"], errors
            else:
                assert status == 200, (status, data)
        assert refused >= 1, results
    finally:
        s.stop_and_check()


def test_no_worker_outlives_a_supervisor_killed_with_sigkill():
    s = PierServer(["--workers", "on"])
    pid = call(s, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"][0]["worker"]["pid"]
    assert os.path.exists(f"/proc/{pid}")
    s.kill()  # SIGKILL
    assert wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                    open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=5), pid


def test_a_worker_that_keeps_failing_is_quarantined_with_its_reason():
    s = PierServer(["--workers", "on"], env={"PIER_WORKER_TEST_FAULT": "exit-after-ready"})
    try:
        def worker():
            return call(s, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"][0]["worker"]
        assert wait_for(lambda: worker()["state"] == "failed", timeout=30), worker()
        assert "exited with status 9" in worker()["last_failure"], worker()
        status, body = call(s, "POST", "/v1/completions", {"prompt": "hi", "max_tokens": 4})
        assert status == 503, body
        assert "quarantined" in body["error"]["message"], body
        status, body = call(s, "GET", "/ready")
        assert status == 503 and "no instance is ready (failed" in body["reason"], body
        status, body = call(s, "GET", "/ready/" + s.model_id)
        assert status == 503 and "exited with status 9" in body["reason"], body
        # An admin load takes it out of quarantine: it starts again (and, with the fault still
        # set, fails again).
        restarts = worker()["restarts"]
        assert call(s, "POST", f"/admin/models/{s.model_id}/load")[0] == 200
        assert wait_for(lambda: worker()["restarts"] > restarts, timeout=30), worker()
    finally:
        s.stop_and_check()


def test_a_worker_that_sends_garbage_is_dropped_and_the_supervisor_lives_on():
    s = PierServer(["--workers", "on"], env={"PIER_WORKER_TEST_FAULT": "garbage-after-ready"})
    try:
        def worker():
            return call(s, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"][0]["worker"]
        assert wait_for(lambda: "bad frame" in worker()["last_failure"], timeout=30), worker()
        assert call(s, "GET", "/health")[0] == 200
        assert "does not parse" in worker()["last_failure"], worker()
    finally:
        s.stop_and_check()


def test_a_leaking_worker_is_drained_and_restarted():
    s = PierServer(["--workers", "on", "--worker-leak-margin", "64MiB"],
                   env={"PIER_WORKER_TEST_FAULT": "leak"})
    try:
        def worker():
            return call(s, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"][0]["worker"]
        assert wait_for(lambda: worker()["restarts"] >= 1 or worker()["state"] == "failed",
                        timeout=30), worker()
        assert "leaking: resident memory" in worker()["last_failure"], worker()
        assert "plus the margin of 64.0 MiB" in worker()["last_failure"], worker()
    finally:
        s.stop_and_check()


def test_ready_policy_any_stays_ready_while_one_model_can_serve():
    config = write_config(tempfile.mkdtemp(prefix="pier-workers-"), f"""
workers: on
models:
  - {{name: alpha, path: {PIER_MODEL}, ctx: 512, threads: 1}}
  - {{name: beta, path: {PIER_MODEL}, ctx: 512, threads: 1}}
""")
    fault = {"PIER_WORKER_TEST_FAULT": "exit-after-ready", "PIER_WORKER_TEST_FAULT_MODEL": "beta"}
    servers = {policy: PierServer(["--config", config, "--ready-policy", policy],
                                  with_model=False, env=fault) for policy in ("all", "any")}
    try:
        for policy, s in servers.items():
            assert wait_for(lambda: workers_of(s)["beta"][0]["state"] == "failed", timeout=30), \
                workers_of(s)
            assert workers_of(s)["alpha"][0]["state"] == "ready"
            status, body = call(s, "GET", "/ready")
            if policy == "all":
                assert status == 503 and "model beta: no instance is ready (failed" in \
                    body["reason"], body
            else:
                assert status == 200, body
            assert call(s, "GET", "/ready/alpha")[0] == 200
            assert call(s, "GET", "/ready/beta")[0] == 503
    finally:
        for s in servers.values():
            s.stop_and_check()


def test_requests_that_had_not_started_move_to_another_instance():
    # Two instances that run one sequence at a time: each holds one running request and some
    # waiting. Killing instance 1 ends its running request with the error; its waiting ones
    # (no event yet) go to instance 2 at once instead of waiting for the restart.
    config = write_config(tempfile.mkdtemp(prefix="pier-workers-"), f"""
workers: on
models:
  - {{name: alpha, path: {PIER_MODEL}, ctx: 1024, threads: 1, instances: 2, max_seqs: 1}}
""")
    s = PierServer(["--config", config], with_model=False)
    try:
        c = client_of(s)
        reference = stream_tokens(c, "alpha", 24)[0]
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            long_ones = [pool.submit(stream_tokens, c, "alpha", 400, True) for _ in range(2)]
            time.sleep(0.5)  # both running, one per instance
            short_ones = [pool.submit(stream_tokens, c, "alpha", 24) for _ in range(4)]
            time.sleep(0.5)  # queued behind them
            detail = call(s, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"]
            assert [i["running"] for i in detail] == [1, 1], detail
            victim = max(range(2), key=lambda n: detail[n]["waiting"])
            assert detail[victim]["waiting"] >= 1, detail
            os.kill(detail[victim]["worker"]["pid"], signal.SIGKILL)
            shorts = [f.result() for f in short_ones]
            longs = [f.result() for f in long_ones]
        assert all(r == (reference, None) for r in shorts), shorts
        errors = [error for _, error in longs if error is not None]
        assert len(errors) == 1 and f"instance {victim + 1} ended" in str(errors[0]), longs
        assert wait_for(lambda: workers_of(s)["alpha"][victim]["state"] == "ready")
        detail = call(s, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"]
        # The restarted instance ran none of them: the other one ran the moved ones.
        assert detail[victim]["requests_finished"] == 0, detail
        assert "went to another instance" in s.log()
    finally:
        s.stop_and_check()


def test_a_leaking_worker_lets_its_requests_in_flight_finish_before_it_restarts():
    # The leak (32 MiB per heartbeat) passes the 256 MiB margin about a second after the
    # worker is ready; the stream sent at once is then in flight and must complete.
    s = PierServer(["--workers", "on", "--worker-leak-margin", "256MiB"],
                   env={"PIER_WORKER_TEST_FAULT": "leak"})
    try:
        c = client_of(s)
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            stream = pool.submit(stream_tokens, c, s.model_id, 600, True)
            states = set()
            while not stream.done():
                worker = call(s, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"][0]
                states.add(worker["worker"]["state"])
                time.sleep(0.05)
            text, error = stream.result()
        assert error is None and len(text) > 600, (error, len(text))
        assert "draining" in states, states
        assert wait_for(lambda: call(s, "GET", "/admin/models")[1]["data"][0]["pier"]
                        ["instances"][0]["worker"]["restarts"] >= 1, timeout=30)
    finally:
        s.stop_and_check()
