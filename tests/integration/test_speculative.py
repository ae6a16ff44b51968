"""Speculative decoding through the server (issue #48): with prompt lookup, with the model
itself as its draft (every greedy proposal right) and with a tiny random-weight draft sharing
its tokenizer (almost every proposal wrong), a request's answer -- text, logprobs, finish
reason, usage, streamed or not, greedy, seeded sampling with n = 2, under a JSON schema --
is the answer of the same model without speculation; in a worker process too. The counters
reach /metrics (Pier's and vLLM's names) and /admin/models; bad settings are refused at
start with the reason."""

import concurrent.futures
import json
import os
import re

import openai
import pytest

from conftest import PIER_MODEL, PierServer, call, metrics_text, write_config

MODELS_DIR = os.path.dirname(PIER_MODEL)
TINY_DRAFT = os.path.join(MODELS_DIR, "draft", "smollm2-draft-tiny.gguf")
MINILM = os.path.join(MODELS_DIR, "all-MiniLM-L6-v2.Q8_0.gguf")
GEMMA = os.path.join(MODELS_DIR, "gemma-3-270m-q4_k_m.gguf")

SPECULATIVE = ["lookup", "self-draft", "tiny-draft"]

PROMPTS = [
    "Copy this JSON exactly, changing the city to Rome: {\"id\": 7, \"name\": \"Ada Lovelace\", "
    "\"city\": \"London\", \"born\": 1815, \"fields\": [\"math\", \"computing\"]}",
    "Fix the typo and repeat the sentence: The harbour was quiet, the boats rockd and the old "
    "pier creaked under the crates.",
    "Write a short poem about the sea.",
    "List the days of the week.",
]


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory):
    assert os.path.exists(TINY_DRAFT), f"{TINY_DRAFT} is missing: run scripts/bootstrap"
    folder = tmp_path_factory.mktemp("speculative")
    config = write_config(str(folder), f"""
models:
  - name: plain
    path: {PIER_MODEL}
  - name: lookup
    path: {PIER_MODEL}
    speculative: {{method: ngram}}
  - name: drafter
    path: {PIER_MODEL}
  - name: self-draft
    path: {PIER_MODEL}
    speculative: {{method: draft, model: drafter, max_tokens: 6}}
  - name: tiny
    path: {TINY_DRAFT}
  - name: tiny-draft
    path: {PIER_MODEL}
    speculative: {{method: draft, model: tiny, max_tokens: 4}}
""")
    server = PierServer(["--config", config], with_model=False)
    yield server
    server.stop_and_check()


def client_of(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def answer(client, model, prompt, **kw):
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}],
                                       **kw)
    out = []
    for c in r.choices:
        logprobs = None
        if c.logprobs is not None and c.logprobs.content is not None:
            logprobs = [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs])
                        for t in c.logprobs.content]
        out.append((c.index, c.message.content, c.finish_reason, logprobs))
    return out, (r.usage.prompt_tokens, r.usage.completion_tokens)


def test_greedy_answers_equal_the_plain_models(spec_server):
    client = client_of(spec_server)
    for prompt in PROMPTS:
        plain = answer(client, "plain", prompt, max_tokens=64, temperature=0, logprobs=True,
                       top_logprobs=2)
        for model in SPECULATIVE:
            assert answer(client, model, prompt, max_tokens=64, temperature=0, logprobs=True,
                          top_logprobs=2) == plain, (model, prompt)


def test_streamed_and_concurrent_answers_equal_the_plain_models(spec_server):
    client = client_of(spec_server)

    def streamed(model, prompt):
        text = ""
        for chunk in client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], max_tokens=48,
                temperature=0, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        return text

    plain = [streamed("plain", p) for p in PROMPTS]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for model in SPECULATIVE:
            got = list(pool.map(lambda p, m=model: streamed(m, p), PROMPTS + PROMPTS))
            assert got == plain + plain, model


def test_seeded_sampling_with_n_and_a_schema_equal_the_plain_models(spec_server):
    client = client_of(spec_server)
    kw = dict(max_tokens=48, temperature=0.9, top_p=0.95, seed=1234, n=2, frequency_penalty=0.2)
    for prompt in PROMPTS[:2]:
        plain = answer(client, "plain", prompt, **kw)
        for model in SPECULATIVE:
            assert answer(client, model, prompt, **kw) == plain, (model, prompt)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "city": {"type": "string", "maxLength": 20}},
              "required": ["name", "city"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}}
    plain = answer(client, "plain", PROMPTS[0], max_tokens=64, temperature=0, response_format=fmt)
    json.loads(plain[0][0][1])
    for model in SPECULATIVE:
        assert answer(client, model, PROMPTS[0], max_tokens=64, temperature=0,
                      response_format=fmt) == plain, model


def counter(text, name, model):
    found = re.search(rf'^{re.escape(name)}\{{{"model_name" if name.startswith("vllm") else "model"}'
                      rf'="{re.escape(model)}"\}} (\S+)$', text, re.M)
    assert found, f"no {name} for {model}"
    return float(found.group(1))


def test_counters_reach_metrics_and_admin(spec_server):
    client = client_of(spec_server)
    answer(client, "self-draft", PROMPTS[1], max_tokens=48, temperature=0)
    text = metrics_text(spec_server)
    # The model as its own draft: every greedy proposal is right.
    proposed = counter(text, "pier_spec_decode_draft_tokens_total", "self-draft")
    accepted = counter(text, "pier_spec_decode_accepted_tokens_total", "self-draft")
    assert proposed > 0 and accepted / proposed > 0.8, (proposed, accepted)
    assert counter(text, "vllm:spec_decode_num_accepted_tokens_total", "self-draft") == accepted
    assert counter(text, "pier_spec_decode_accepted_tokens_total", "lookup") > 0
    # Random weights propose what the model would not say: the planner soon stops asking.
    tiny_proposed = counter(text, "pier_spec_decode_draft_tokens_total", "tiny-draft")
    tiny_accepted = counter(text, "pier_spec_decode_accepted_tokens_total", "tiny-draft")
    assert tiny_accepted <= 0.3 * max(tiny_proposed, 1)
    assert counter(text, "pier_spec_decode_skipped_total", "tiny-draft") > 0
    assert 'pier_spec_decode_acceptance_length_bucket{model="self-draft",le="+Inf"}' in text
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="lookup",position="0"}' \
        in text
    assert "pier_spec_decode_drafts_total{model=\"plain\"}" not in text
    status, body = call(spec_server, "GET", "/admin/models")
    assert status == 200
    models = {m["id"]: m for m in body["data"]}
    self_draft = models["self-draft"]["pier"]
    assert self_draft["config"]["speculative"] == {"method": "draft", "model": "drafter",
                                                   "max_tokens": "6"}
    assert self_draft["engine"]["speculative"]["accepted_tokens"] == accepted
    assert models["plain"]["pier"]["config"]["speculative"] == "off"
    assert "speculative" not in models["plain"]["pier"]["engine"]


def test_prompt_lookup_in_worker_processes_equals_the_plain_model(tmp_path):
    config = write_config(str(tmp_path), f"""
models:
  - name: plain
    path: {PIER_MODEL}
  - name: lookup
    path: {PIER_MODEL}
    speculative: {{method: ngram, max_tokens: 10}}
""")
    server = PierServer(["--config", config, "--workers", "on"], with_model=False)
    try:
        client = client_of(server)
        for prompt in PROMPTS[:2]:
            assert answer(client, "lookup", prompt, max_tokens=48, temperature=0) == \
                answer(client, "plain", prompt, max_tokens=48, temperature=0)
        text = metrics_text(server)
        assert counter(text, "pier_spec_decode_accepted_tokens_total", "lookup") > 0
    finally:
        server.stop_and_check()


@pytest.mark.parametrize("entry,expected", [
    ("speculative: {method: ngram, max_tokens: 0}", "speculative.max_tokens"),
    ("speculative: {method: ngram, max_tokens: 33}", "speculative.max_tokens"),
    ("speculative: {method: eagle}", "expected ngram, draft or off"),
    ("speculative: {method: draft}", "method draft needs model"),
    ("speculative: {method: draft, model: nowhere}", "speculative draft model nowhere does not "
                                                     "exist"),
    ("speculative: {method: draft, model: later}", "speculative draft model later is not loaded"),
    ("speculative: {method: draft, model: minilm}", "speculative draft model minilm is not an LLM"),
    ("speculative: {method: draft, model: gemma}", "has a vocabulary of 262144 tokens, target one "
                                                   "of 49152"),
])
def test_bad_settings_are_refused_at_start(tmp_path, entry, expected):
    refused_at_start(tmp_path, entry, expected)


def test_a_draft_is_refused_for_a_model_in_workers(tmp_path):
    refused_at_start(tmp_path, "speculative: {method: draft, model: tiny}", "workers: on",
                     "--workers", "on")


def refused_at_start(tmp_path, entry, expected, *args):
    config = write_config(str(tmp_path), f"""
models:
  - name: tiny
    path: {TINY_DRAFT}
  - name: minilm
    path: {MINILM}
  - name: gemma
    path: {GEMMA}
  - name: target
    path: {PIER_MODEL}
    {entry}
  - name: later
    path: {TINY_DRAFT}
""")
    with pytest.raises(AssertionError) as failed:
        PierServer(["--config", config, *args], with_model=False)
    assert expected in str(failed.value), str(failed.value)[-2000:]
