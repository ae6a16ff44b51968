"""Several models in one `pier serve` (a models: list): routing by name and alias, outputs equal
to a single-model server's, /v1/models and /admin/models, per-model metrics, one budget."""

import concurrent.futures
import json
import os
import re
import subprocess
import tempfile
import time
import urllib.request

import openai
import pytest

from conftest import PIER_BINARY, PIER_MODEL, PierServer, wait_for

MODELS = ("alpha", "beta", "gamma")
PROMPT = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def multi():
    """alpha (aliases gpt-4o-mini, chat), beta, gamma (its own smaller context): the default
    GGUF three times under different names."""
    folder = tempfile.mkdtemp(prefix="pier-multi-")
    config = os.path.join(folder, "models.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"""
models:
  - name: alpha
    path: {PIER_MODEL}
    aliases: [gpt-4o-mini, chat]
  - name: beta
    path: {PIER_MODEL}
    fallback: alpha
  - name: gamma
    path: {PIER_MODEL}
    ctx: 1024
""")
    s = PierServer(["--config", config], with_model=False)
    yield s
    s.stop_and_check()


def get_json(server, path):
    with urllib.request.urlopen(server.base_url + path, timeout=60) as response:
        return json.load(response)


def greedy(client, model):
    r = client.chat.completions.create(model=model, messages=PROMPT, max_tokens=16,
                                       temperature=0, seed=1)
    assert r.model == model or r.model in MODELS
    return r.choices[0].message.content


def test_every_model_and_alias_answers_with_the_single_model_servers_tokens(multi, client):
    multi_client = openai.OpenAI(base_url=multi.base_url + "/v1", api_key="unused",
                                 max_retries=0, timeout=120)
    single = greedy(client, client.models.list().data[0].id)
    assert single
    for name in MODELS + ("gpt-4o-mini", "chat"):
        assert greedy(multi_client, name) == single, name


def test_unknown_model_is_404_model_not_found(multi):
    c = openai.OpenAI(base_url=multi.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as error:
        c.chat.completions.create(model="gpt-5", messages=PROMPT, max_tokens=4)
    assert error.value.body["code"] == "model_not_found"


def test_models_list_and_admin_detail(multi):
    listed = get_json(multi, "/v1/models")["data"]
    assert [m["id"] for m in listed] == list(MODELS)
    assert listed[0]["pier"] == {"aliases": ["gpt-4o-mini", "chat"], "state": "ready",
                                 "load": "on_start", "kind": "generate"}
    assert listed[2]["max_model_len"] == 1024
    detail = get_json(multi, "/admin/models")
    assert [m["id"] for m in detail["data"]] == list(MODELS)
    for m in detail["data"]:
        owners = [o["owner"] for o in m["pier"]["memory"]["owners"]]
        assert sorted(owners) == sorted(f"{m['id']}/{part}" for part in
                                        ("weights", "workspace", "kv")), owners
        assert m["pier"]["memory"]["committed_bytes"] > 0
    # One budget: every byte the device's governor has promised belongs to one of the models.
    device = detail["device"]
    assert device["committed_bytes"] == device["models_committed_bytes"]
    assert device["committed_bytes"] <= device["budget_bytes"]
    # Elastic KV: idle, each model holds its minimum (one chunk), and may grow up to its own
    # context (gamma's is smaller).
    kv = {m["id"]: next(o["used_bytes"] for o in m["pier"]["memory"]["owners"]
                        if o["owner"].endswith("/kv")) for m in detail["data"]}
    assert kv["alpha"] == kv["beta"] == kv["gamma"] > 0
    most = {m["id"]: m["pier"]["engine"]["kv_blocks_max"] for m in detail["data"]}
    assert most["gamma"] * 4 == most["alpha"] == most["beta"] == 256


def test_concurrent_streams_to_different_models_all_complete(multi):
    c = openai.OpenAI(base_url=multi.base_url + "/v1", api_key="unused", max_retries=0,
                      timeout=120)

    def stream(model):
        text = ""
        for chunk in c.chat.completions.create(model=model, messages=PROMPT, max_tokens=12,
                                               temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text

    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        texts = list(pool.map(stream, MODELS * 2))
    assert all(texts) and len(set(texts)) == 1, texts


def test_metrics_label_each_model_and_show_the_device_once(multi):
    with urllib.request.urlopen(multi.base_url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    for name in MODELS:
        assert f'vllm:num_requests_running{{model_name="{name}"}}' in text
        assert re.search(rf'pier_memory_owner_used_bytes{{model="{name}",device="[^"]+",'
                         rf'owner="{name}/kv"}}', text)
        assert f'pier_model_load_seconds_count{{model="{name}"}} 1' in text
        assert f'pier_model_state{{model="{name}",state="ready"}} 1' in text
        # Streamed to every model above: its token gaps are its own.
        assert re.search(rf'pier_inter_token_latency_seconds_count{{model="{name}"}} [1-9]', text)
    assert len(re.findall(r"^pier_memory_used_bytes\{", text, re.M)) == 1
    # Requests are counted under the model that served them (the alias resolves to alpha).
    assert re.search(r'pier_requests_total\{model="alpha"[^}]*\} [1-9]', text)


@pytest.mark.parametrize("policy,budget", [("elastic", "250MiB"), ("static", "350MiB")])
def test_a_budget_too_small_for_every_model_exits_1_naming_the_model_that_does_not_fit(policy,
                                                                                       budget):
    folder = tempfile.mkdtemp(prefix="pier-multi-")
    config = os.path.join(folder, "models.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write("models:\n" + "".join(f"  - {{name: {n}, path: {PIER_MODEL}}}\n" for n in MODELS))
    # A model needs about 126 MiB of weights and workspace (attention scratch for 8-token tasks
    # included), plus its KV: one 5.6 MiB chunk when elastic, 90 MiB for 4096 tokens when
    # static. Either budget holds one model, not two.
    done = subprocess.run([PIER_BINARY, "serve", "--config", config, "--port", "0",
                           "--threads", "1", "--memory-budget", budget, "--kv-policy", policy],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "listening" not in done.stdout
    # Checked before anything loads: every model's guarantee, the sum and the excess.
    match = re.search(r"the on_start models need ([0-9.]+) MiB together \(alpha ([0-9.]+) MiB, "
                      r"beta ([0-9.]+) MiB, gamma ([0-9.]+) MiB\) but the memory budget has "
                      r"([0-9.]+) MiB free \(of ([0-9.]+) MiB\): ([0-9.]+) MiB too much",
                      done.stderr)
    assert match, done.stderr
    total, a, b, c, free, of, excess = (float(x) for x in match.groups())
    assert a == b == c and abs(total - 3 * a) < 0.2 and of == float(budget[:-3])
    assert abs(total - free - excess) < 0.2
    # Elastic: each model is guaranteed only its KV minimum; static: its whole KV cache.
    assert (a < 170) == (policy == "elastic"), a
    assert "loading" not in done.stderr, "nothing loads when the sum does not fit"


# A burst's prompts: 8 of about 440 tokens each, about 14 KV chunks (79 MiB) at once.
BURST_PROMPTS = [f"{i}: " + "the quick brown fox jumps over the lazy dog. " * 40 for i in range(8)]


def greedy_completer(server, max_tokens):
    """(an openai client of `server`, complete(model, prompt) -> its greedy text)."""
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                      timeout=300)

    def complete(model, prompt):
        r = c.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0)
        return r.choices[0].text

    return c, complete


@pytest.mark.parametrize("workers", ["off", "on"])
def test_elastic_kv_is_lent_to_the_busy_model_and_reclaimed_for_the_next(workers):
    """a's burst grows its KV cache past what both could hold at once; b's burst then gets the
    memory back from idle a through the governor's reclaim. Every request of both completes
    with the tokens it has alone. With workers on, a and b run in their own processes: the
    lending goes through the supervisor's ledger (a mirror lease per worker)."""
    folder = tempfile.mkdtemp(prefix="pier-elastic-")
    config = os.path.join(folder, "models.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"workers: {workers}\nmodels:\n  - {{name: a, path: {PIER_MODEL}}}\n"
                f"  - {{name: b, path: {PIER_MODEL}}}\n")

    def kv_held(detail, index, name):
        """What model `name` holds for KV above what it is guaranteed, in the device's ledger."""
        model = detail["data"][index]["pier"]
        if workers == "on":
            return model["instances"][0]["worker"]["kv_lent_bytes"]
        return next(o["used_bytes"] for o in model["memory"]["owners"]
                    if o["owner"] == name + "/kv")

    # Each model: about 122 MiB of weights and workspace. A burst of 8 requests of ~440 tokens
    # needs about 14 KV chunks (79 MiB); the budget leaves room for one burst, not two.
    s = PierServer(["--config", config, "--memory-budget", "335MiB"], with_model=False)
    try:
        _, complete = greedy_completer(s, max_tokens=32)

        alone = complete("a", BURST_PROMPTS[0])

        def burst(model):
            with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
                return list(pool.map(lambda p: complete(model, p), BURST_PROMPTS))

        a_out = burst("a")
        after_a = get_json(s, "/admin/models")
        device = after_a["device"]
        free = device["budget_bytes"] - device["committed_bytes"]
        a_kv = kv_held(after_a, 0, "a")
        assert a_kv > free, "a's burst must hold more KV than is left for b"
        b_out = burst("b")
        after_b = get_json(s, "/admin/models")
        engines = {m["id"]: m["pier"]["engine"] for m in after_b["data"]}
        b_kv = kv_held(after_b, 1, "b")

        assert a_out[0] == alone
        assert b_out == a_out, "the same prompts give the same tokens on either model"
        assert b_kv > free, "b's burst needed memory a held"
        assert engines["a"]["kv_shrinks"] >= 1 and engines["b"]["kv_grows"] >= 1, engines
        assert after_b["device"]["committed_bytes"] <= after_b["device"]["budget_bytes"]
        assert after_b["device"]["committed_bytes"] == after_b["device"]["models_committed_bytes"]
        for name, e in engines.items():
            assert e["running"] == 0 and e["waiting"] == 0, (name, e)
        if workers == "on":
            # The ledger and the workers agree: what a gave back is no longer lent to it.
            assert kv_held(after_b, 0, "a") < a_kv, (kv_held(after_b, 0, "a"), a_kv)
            for m in after_b["data"]:
                w = m["pier"]["instances"][0]["worker"]
                assert w["restarts"] == 0 and w["committed_bytes"] <= w["granted_bytes"], w
    finally:
        s.stop_and_check()


# b: the default LLM (about 136 MiB: weights, workspace, its KV minimum) beside a under a
# 335 MiB budget, or all-MiniLM-L6-v2 F16 (about 124 MiB) under 290 MiB. Either budget holds a
# at its KV minimum and b, but not a after its burst and b.
@pytest.mark.parametrize("b_kind,workers,budget", [("llm", "off", "335MiB"),
                                                    ("llm", "on", "335MiB"),
                                                    ("embedding", "off", "290MiB")])
def test_a_load_takes_back_the_kv_an_idle_model_was_lent_instead_of_refusing(b_kind, workers,
                                                                               budget):
    """a's burst leaves it holding more KV than the budget has free; loading b (on demand)
    asks idle a to give back what it was lent (a is on_start: nothing may evict it) rather
    than refusing b with "lower --ctx or raise --memory-budget". Both then answer.
    With workers on, a's KV is its worker's, mirrored in the supervisor's ledger."""
    folder = tempfile.mkdtemp(prefix="pier-reclaim-load-")
    config = os.path.join(folder, "models.yaml")
    b_path = PIER_MODEL if b_kind == "llm" else os.path.join(os.path.dirname(PIER_MODEL),
                                                             "all-MiniLM-L6-v2.F16.gguf")

    def a_kv(detail):
        model = next(m for m in detail["data"] if m["id"] == "a")["pier"]
        if workers == "on":
            return model["instances"][0]["worker"]["kv_lent_bytes"]
        return next(o["used_bytes"] for o in model["memory"]["owners"] if o["owner"] == "a/kv")

    with open(config, "w", encoding="utf-8") as f:
        f.write(f"workers: {workers}\nmodels:\n  - {{name: a, path: {PIER_MODEL}}}\n"
                f"  - {{name: b, path: {b_path}, load: on_demand}}\n")
    s = PierServer(["--config", config, "--memory-budget", budget], with_model=False)
    try:
        c, complete = greedy_completer(s, max_tokens=16)

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            a_out = list(pool.map(lambda p: complete("a", p), BURST_PROMPTS))

        def a_idle():
            engine = next(m for m in get_json(s, "/admin/models")["data"]
                          if m["id"] == "a")["pier"]["engine"]
            return engine["running"] == 0 and engine["waiting"] == 0

        # An earlier model's busy KV is not taken for a later one of equal priority. A worker's
        # lease turns idle in the supervisor's ledger with the worker's next heartbeat (every
        # 100 ms), a moment after its last request is answered: wait a few.
        assert wait_for(a_idle, timeout=10)
        if workers == "on":
            time.sleep(0.5)
        before = get_json(s, "/admin/models")
        device = before["device"]
        free = device["budget_bytes"] - device["committed_bytes"]
        a_kv_before = a_kv(before)
        assert free < 120 << 20, f"b must not fit in what is free ({free} bytes)"

        request = urllib.request.Request(s.base_url + "/admin/models/b/load", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                assert response.status == 200
        except urllib.error.HTTPError as e:
            pytest.fail(f"loading b was refused: {e.code} {e.read().decode()}")
        after = get_json(s, "/admin/models")
        states = {m["id"]: m["pier"]["state"] for m in after["data"]}
        assert states == {"a": "ready", "b": "ready"}, states
        a_model = next(m for m in after["data"] if m["id"] == "a")
        assert a_model["pier"]["engine"]["kv_shrinks"] >= 1
        assert a_kv(after) < a_kv_before, (a_kv(after), a_kv_before)
        assert after["device"]["committed_bytes"] <= after["device"]["budget_bytes"]
        if b_kind == "llm":
            assert complete("b", BURST_PROMPTS[0]) == a_out[0]
        else:
            vectors = c.embeddings.create(model="b", input=BURST_PROMPTS[:2]).data
            assert len(vectors) == 2 and len(vectors[0].embedding) == 384
        assert complete("a", BURST_PROMPTS[1]) == a_out[1]
    finally:
        s.stop_and_check()


def test_instances_share_the_requests_of_one_model():
    """`instances: 2`: two engines under one name; concurrent requests are spread over both
    (least outstanding work first) and give the same tokens."""
    folder = tempfile.mkdtemp(prefix="pier-instances-")
    config = os.path.join(folder, "models.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"models:\n  - {{name: pool, path: {PIER_MODEL}, instances: 2, ctx: 1024}}\n")
    s = PierServer(["--config", config], with_model=False)
    try:
        c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0,
                          timeout=120)

        def complete(_):
            r = c.completions.create(model="pool", prompt="Once upon a time", max_tokens=24,
                                     temperature=0)
            return r.choices[0].text

        with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
            texts = list(pool.map(complete, range(6)))
        assert len(set(texts)) == 1 and texts[0], texts
        detail = get_json(s, "/admin/models")["data"][0]
        finished = [i["requests_finished"] for i in detail["pier"]["instances"]]
        assert len(finished) == 2 and sum(finished) == 6 and min(finished) >= 1, finished
        assert detail["pier"]["engine"]["requests_finished"] == 6
        owners = sorted(o["owner"] for o in detail["pier"]["memory"]["owners"])
        assert "pool/kv" in owners and "pool#2/kv" in owners, owners
        assert len(get_json(s, "/v1/models")["data"]) == 1
    finally:
        s.stop_and_check()
