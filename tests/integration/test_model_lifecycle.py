"""Model lifecycle in one `pier serve`: on-demand loads from a request, unload and reload while
another model streams, memory (governor bytes and process RSS) back after an unload, failed
and unfitting models, admin routes' errors."""

import concurrent.futures
import os
import tempfile
import threading
import time

import openai
import pytest

from conftest import PIER_MODEL, PierServer, call, metrics_text, write_config

PROMPT = [{"role": "user", "content": "Count from one to twenty in words."}]


def states(server):
    return {m["id"]: m["pier"]["state"] for m in call(server, "GET", "/v1/models")[1]["data"]}


def device(server):
    return call(server, "GET", "/admin/models")[1]["device"]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def lifecycle():
    """steady (on_start), lazy (on_demand), spare (on_demand)."""
    folder = tempfile.mkdtemp(prefix="pier-lifecycle-")
    config = write_config(folder, f"""
unload_grace: 1
models:
  - {{name: steady, path: {PIER_MODEL}}}
  - {{name: lazy, path: {PIER_MODEL}, load: on_demand, aliases: [lazy-alias]}}
  - {{name: spare, path: {PIER_MODEL}, load: on_demand}}
""")
    s = PierServer(["--config", config], with_model=False)
    s.folder, s.config = folder, config
    yield s
    s.stop_and_check()


def client_of(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def greedy(c, model, max_tokens=16):
    r = c.chat.completions.create(model=model, messages=PROMPT, max_tokens=max_tokens,
                                  temperature=0, seed=1)
    return r.choices[0].message.content


def test_an_on_demand_model_loads_for_its_first_request(lifecycle):
    assert states(lifecycle) == {"steady": "ready", "lazy": "unloaded", "spare": "unloaded"}
    c = client_of(lifecycle)
    reference = greedy(c, "steady")
    # Two requests at once, by alias and by id: one load, both answered with the same tokens.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        texts = list(pool.map(lambda m: greedy(c, m), ["lazy-alias", "lazy"]))
    assert texts == [reference, reference]
    assert states(lifecycle)["lazy"] == "ready"
    detail = {m["id"]: m["pier"] for m in call(lifecycle, "GET", "/admin/models")[1]["data"]}
    assert detail["lazy"]["lifecycle"]["loads"] == 1
    assert detail["lazy"]["config"]["path"] == PIER_MODEL


def test_unload_while_another_model_streams_leaves_its_streams_untouched(lifecycle):
    c = client_of(lifecycle)
    reference = greedy(c, "steady", max_tokens=48)
    assert call(lifecycle, "POST", "/admin/models/lazy/load")[0] == 200
    results = {}

    def stream(i):
        text = ""
        for chunk in c.chat.completions.create(model="steady", messages=PROMPT, max_tokens=48,
                                               temperature=0, seed=1, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        results[i] = text

    def long_on_lazy():
        # Longer than the 1 s grace: it ends with the unload's reason, not silently.
        try:
            c.completions.create(model="lazy", prompt="Once upon a time", max_tokens=3000,
                                 temperature=0, extra_body={"ignore_eos": True})
            results["lazy"] = "finished"
        except openai.APIStatusError as error:
            results["lazy"] = (error.status_code, error.body.get("message", ""))

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=long_on_lazy))
    for t in threads:
        t.start()
    time.sleep(0.5)
    status, body = call(lifecycle, "POST", "/admin/models/lazy/unload")
    for t in threads:
        t.join(timeout=120)
    assert status == 200 and body["pier"]["state"] == "unloaded", body
    assert [results[i] for i in range(3)] == [reference] * 3
    code, message = results["lazy"]
    assert code == 503 and "model lazy is being unloaded" in message, results["lazy"]
    assert states(lifecycle)["lazy"] == "unloaded"
    # A request for it loads it again.
    assert greedy(c, "lazy")


def test_unloading_returns_every_byte_and_the_rss(lifecycle):
    c = client_of(lifecycle)
    greedy(c, "steady")
    before = device(lifecycle)["committed_bytes"]
    rss_before = rss_bytes(lifecycle.proc.pid)
    assert call(lifecycle, "POST", "/admin/models/spare/load")[0] == 200
    greedy(c, "spare", max_tokens=32)
    loaded = device(lifecycle)
    assert loaded["committed_bytes"] > before
    assert loaded["committed_bytes"] == loaded["models_committed_bytes"]
    assert rss_bytes(lifecycle.proc.pid) > rss_before
    assert call(lifecycle, "POST", "/admin/models/spare/unload")[0] == 200
    after = device(lifecycle)
    assert after["committed_bytes"] == before
    assert after["committed_bytes"] == after["models_committed_bytes"]
    slack = max(8 << 20, os.path.getsize(PIER_MODEL) // 50)
    rss_after = rss_bytes(lifecycle.proc.pid)
    assert rss_after - rss_before <= slack, (rss_before, rss_after, slack)


def test_admin_route_errors(lifecycle):
    status, body = call(lifecycle, "POST", "/admin/models/nobody/load")
    assert status == 404 and body["error"]["code"] == "model_not_found"
    assert "'steady'" in body["error"]["message"]
    assert call(lifecycle, "POST", "/admin/models/steady/explode")[0] == 404
    assert call(lifecycle, "GET", "/admin/models/steady/load")[0] == 405
    # An unloaded on_start model is not loaded by requests: 503 says how to load it.
    assert call(lifecycle, "POST", "/admin/models/steady/unload")[0] == 200
    status, body = call(lifecycle, "POST", "/v1/completions", {"model": "steady", "prompt": "hi"})
    assert status == 503, body
    assert "model steady is unloaded" in body["error"]["message"]
    assert "/admin/models/steady/load" in body["error"]["message"]
    status, body = call(lifecycle, "POST", "/tokenize", {"model": "steady", "content": "hi"})
    assert status == 503, body
    assert call(lifecycle, "POST", "/admin/models/steady/load")[0] == 200
    assert call(lifecycle, "POST", "/tokenize", {"model": "steady", "content": "hi"})[0] == 200


def test_metrics_count_loads_and_unloads(lifecycle):
    text = metrics_text(lifecycle)
    assert 'pier_model_state{model="spare",state="unloaded"} 1' in text
    assert 'pier_model_state{model="spare",state="ready"} 0' in text
    assert 'pier_model_loads_total{model="spare"} 1' in text
    assert 'pier_model_unloads_total{model="spare",reason="requested"} 1' in text
    assert 'pier_model_unloads_total{model="lazy",reason="requested"} 1' in text
    assert 'pier_model_loads_total{model="lazy"} 2' in text


def test_tokenize_loads_an_on_demand_model_and_responses_count_under_their_model(lifecycle):
    assert states(lifecycle)["spare"] == "unloaded"
    status, body = call(lifecycle, "POST", "/tokenize", {"model": "spare", "content": "Hello"})
    assert status == 200, body
    assert states(lifecycle)["spare"] == "ready"
    assert body == call(lifecycle, "POST", "/tokenize", {"model": "steady", "content": "Hello"})[1]
    assert call(lifecycle, "POST", "/v1/completions", {"model": "nobody", "prompt": "hi"})[0] == 404
    text = metrics_text(lifecycle)
    assert 'pier_http_responses_total{model="spare",code="200",route="/tokenize"} 1' in text
    assert 'pier_http_responses_total{model="steady",code="200",route="/tokenize"}' in text
    assert 'pier_http_responses_total{model="lazy",code="200",route="/v1/chat/completions"}' in text
    # An unknown model's name is not a label (clients must not grow the series without bound).
    assert 'pier_http_responses_total{model="",code="404",route="/v1/completions"} 1' in text
    assert 'model="nobody"' not in text
    assert call(lifecycle, "POST", "/admin/models/spare/unload")[0] == 200


def test_reload_applies_the_difference_and_a_broken_file_keeps_the_old_version(lifecycle):
    c = client_of(lifecycle)
    broken = os.path.join(lifecycle.folder, "broken.gguf")
    with open(broken, "wb") as f:
        f.write(b"GGUF" + b"\0" * 64)
    write_config(lifecycle.folder, f"""
unload_grace: 1
models:
  - {{name: steady, path: {PIER_MODEL}, ctx: 1024}}
  - {{name: lazy, path: {broken}, load: on_demand}}
  - {{name: fresh, path: {PIER_MODEL}}}
""")
    status, report = call(lifecycle, "POST", "/admin/reload")
    assert status == 200, report
    assert report["reloaded"] == ["steady"] and report["added"] == ["fresh"], report
    assert report["removed"] == ["spare"] and report["unchanged"] == [], report
    # lazy is loaded: its new version (the broken file) loads beside it, fails, and the old
    # version serves on.
    assert [f["id"] for f in report["failed"]] == ["lazy"], report
    assert "GGUF version 0 is not supported" in report["failed"][0]["reason"]
    models = {m["id"]: m for m in call(lifecycle, "GET", "/v1/models")[1]["data"]}
    assert models["steady"]["max_model_len"] == 1024
    assert models["fresh"]["pier"]["state"] == "ready"
    assert models["lazy"]["pier"]["state"] == "ready"
    assert greedy(c, "lazy") and greedy(c, "fresh") and greedy(c, "steady")
    # spare was unloaded already: it is simply forgotten.
    assert "spare" not in models
    status, body = call(lifecycle, "POST", "/v1/completions", {"model": "spare", "prompt": "hi"})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    # A file that no longer validates changes nothing.
    write_config(lifecycle.folder, "models: [{name: steady, path: /nonexistent.gguf}]\n")
    status, body = call(lifecycle, "POST", "/admin/reload")
    assert status == 400 and "nothing changed" in body["error"]["message"], body
    assert "no such file" in body["error"]["message"], body
    assert states(lifecycle)["steady"] == "ready"


def test_reload_refuses_a_file_that_names_no_model(lifecycle):
    # Emptied, caught half-written, or not parseable: refused, and every model stays as it was
    # (applied, it would have unloaded them all for the default model).
    before = states(lifecycle)
    for text, why in (("", "names no model"), ("unload_grace: 1\n", "names no model"),
                      ("unload_grace: 1\nmodels:\n  - {name: steady, pa", "")):
        write_config(lifecycle.folder, text)
        status, body = call(lifecycle, "POST", "/admin/reload")
        message = body["error"]["message"]
        assert status == 400 and "nothing changed" in message and why in message, (text, body)
    assert states(lifecycle) == before


def test_a_model_that_fails_to_load_answers_503_with_the_reason():
    folder = tempfile.mkdtemp(prefix="pier-failed-")
    broken = os.path.join(folder, "broken.gguf")
    with open(broken, "wb") as f:
        f.write(b"GGUF" + b"\0" * 64)
    config = write_config(folder, f"""
models:
  - {{name: good, path: {PIER_MODEL}}}
  - {{name: bad, path: {broken}, load: on_demand}}
  - {{name: big, path: {PIER_MODEL}, load: on_demand}}
""")
    # Room for one model: `big` cannot load beside `good` (an on_start model is never evicted).
    s = PierServer(["--config", config, "--memory-budget", "250MiB"], with_model=False)
    try:
        status, body = call(s, "POST", "/v1/completions", {"model": "bad", "prompt": "hi"})
        assert status == 503, body
        assert body["error"]["message"].startswith("model bad failed to load: "), body
        assert states(s)["bad"] == "failed"
        # Asked again: the same answer at once (a failed model is not retried by requests).
        status, again = call(s, "POST", "/v1/completions", {"model": "bad", "prompt": "hi"})
        assert status == 503 and "failed" in again["error"]["message"]
        status, body = call(s, "POST", "/v1/completions", {"model": "big", "prompt": "hi"})
        assert status == 503, body
        message = body["error"]["message"]
        assert "model big could not be loaded" in message and "needs" in message, message
        assert "memory budget is 250.0 MiB" in message, message
        assert states(s)["big"] == "unloaded"
    finally:
        s.stop_and_check()


def test_a_model_on_a_gpu_that_cannot_be_used_fails_with_the_reason():
    # GPU 7 exists nowhere this runs (no GPU, or one): the model fails to load, naming the
    # device and why, and the CPU model beside it keeps serving.
    folder = tempfile.mkdtemp(prefix="pier-gpu-")
    config = write_config(folder, f"""
models:
  - {{name: here, path: {PIER_MODEL}}}
  - {{name: there, path: {PIER_MODEL}, device: 'cuda:7', load: on_demand}}
""")
    s = PierServer(["--config", config], with_model=False)
    try:
        status, body = call(s, "POST", "/v1/completions", {"model": "there", "prompt": "hi"})
        assert status == 503, body
        message = body["error"]["message"]
        assert message.startswith("model there failed to load: "), message
        assert "cuda:7" in message, message
        assert states(s)["there"] == "failed"
        status, body = call(s, "POST", "/v1/completions",
                            {"model": "here", "prompt": "hi", "max_tokens": 2})
        assert status == 200, body
    finally:
        s.stop_and_check()
