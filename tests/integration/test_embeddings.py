"""POST /v1/embeddings through the official `openai` client, on all-MiniLM-L6-v2 (Q8_0, converted
by scripts/bootstrap) served next to the default LLM from one config.

Checks vectors against the committed sentence-transformers fixture
(tests/fixtures/encoder/minilm_embeddings.json), every input form, base64 and `dimensions`,
truncation, concurrent requests batched without changing results, and the bad-input answers.
"""

import concurrent.futures
import json
import math
import os
import urllib.request

import openai
import pytest

from conftest import call, start_llm_and_embedder

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "encoder",
                       "minilm_embeddings.json")


@pytest.fixture(scope="module")
def embed_server(tmp_path_factory):
    s = start_llm_and_embedder(tmp_path_factory.mktemp("embed"))
    yield s
    s.stop_and_check()


@pytest.fixture
def ec(embed_server):
    return openai.OpenAI(base_url=embed_server.base_url + "/v1", api_key="unused",
                         max_retries=0, timeout=120)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def post(server, body):
    return call(server, "POST", "/v1/embeddings", body)


def test_vectors_match_sentence_transformers(ec):
    cases = json.load(open(FIXTURE, encoding="utf-8"))["cases"]
    texts = [c["text"] for c in cases if c["text"]]
    result = ec.embeddings.create(model="minilm", input=texts)
    assert [d.index for d in result.data] == list(range(len(texts)))
    by_text = {c["text"]: c for c in cases}
    for text, item in zip(texts, result.data):
        assert len(item.embedding) == 384
        assert abs(math.sqrt(sum(x * x for x in item.embedding)) - 1) < 1e-5
        assert cosine(item.embedding, by_text[text]["sentence_transformers"]) >= 0.999, text
    assert result.usage.prompt_tokens == sum(len(by_text[t]["ids"]) for t in texts)
    assert result.usage.total_tokens == result.usage.prompt_tokens
    assert result.model == "minilm"


def test_similar_meanings_land_closer(ec):
    a, b, c = (d.embedding for d in ec.embeddings.create(
        model="text-embedding-minilm",
        input=["A man is eating food.", "A man is eating a piece of bread.",
               "The stock market fell sharply today."]).data)
    assert cosine(a, b) > cosine(a, c) + 0.3


def test_float_and_base64_agree_and_dimensions_renormalize(embed_server, ec):
    status, floats = post(embed_server, {"model": "minilm", "input": "Hello world",
                                         "encoding_format": "float"})
    assert status == 200
    full = floats["data"][0]["embedding"]
    # The openai client asks for base64 and decodes it itself.
    decoded = ec.embeddings.create(model="minilm", input="Hello world").data[0].embedding
    assert decoded == pytest.approx(full, abs=1e-7)
    short = ec.embeddings.create(model="minilm", input="Hello world", dimensions=64)
    v = short.data[0].embedding
    assert len(v) == 64
    norm = math.sqrt(sum(x * x for x in full[:64]))
    assert v == pytest.approx([x / norm for x in full[:64]], abs=1e-6)


def test_token_id_inputs_equal_text_inputs(ec):
    cases = json.load(open(FIXTURE, encoding="utf-8"))["cases"]
    case = next(c for c in cases if c["text"] == "Hello world")
    by_text = ec.embeddings.create(model="minilm", input="Hello world").data[0].embedding
    with_specials = ec.embeddings.create(model="minilm", input=case["ids"]).data[0].embedding
    without = ec.embeddings.create(model="minilm", input=[case["ids"][1:-1]]).data[0].embedding
    assert with_specials == by_text
    assert without == by_text


def test_long_input_is_truncated_unless_refused(embed_server):
    long_text = " ".join(["word"] * 600)
    status, body = post(embed_server, {"model": "minilm", "input": long_text})
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] == 256
    status, body = post(embed_server, {"model": "minilm", "input": long_text, "truncate": False})
    assert status == 400
    assert body["error"]["code"] == "context_length_exceeded"
    assert "256" in body["error"]["message"]


def test_concurrent_requests_get_the_vectors_they_get_alone(embed_server, ec):
    texts = [f"request number {i} about {'memory ' * (i % 7)}batching" for i in range(32)]
    alone = [ec.embeddings.create(model="minilm", input=t).data[0].embedding for t in texts]
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        together = list(pool.map(
            lambda t: ec.embeddings.create(model="minilm", input=t).data[0].embedding, texts))
    assert together == alone, "a text's vector changed with the batch it ran in"


@pytest.mark.parametrize("body, param", [
    ({"model": "minilm", "input": []}, "input"),
    ({"model": "minilm", "input": ""}, "input"),
    ({"model": "minilm", "input": ["ok", ""]}, "input"),
    ({"model": "minilm", "input": [101, 999999, 102]}, "input"),
    ({"model": "minilm", "input": [[]]}, "input"),
    ({"model": "minilm", "input": [1.5]}, "input"),
    ({"model": "minilm", "input": {"text": "x"}}, "input"),
    ({"model": "minilm"}, "input"),
    ({"model": "minilm", "input": "x", "dimensions": 0}, "dimensions"),
    ({"model": "minilm", "input": "x", "dimensions": 1000}, "dimensions"),
    ({"model": "minilm", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "smol", "input": "x"}, "model"),
])
def test_bad_requests_get_400(embed_server, body, param):
    status, answer = post(embed_server, body)
    assert status == 400, answer
    assert answer["error"]["param"] == param
    assert answer["error"]["message"]


def test_llm_routes_refuse_the_embedding_model_and_vice_versa(embed_server):
    status, answer = call(embed_server, "POST", "/v1/chat/completions",
                          {"model": "minilm", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 400 and answer["error"]["code"] == "model_kind"
    assert "embedding" in answer["error"]["message"]
    status, answer = post(embed_server, {"model": "smol", "input": "hi"})
    assert status == 400 and answer["error"]["code"] == "model_kind"
    status, answer = post(embed_server, {"model": "nope", "input": "hi"})
    assert status == 404


def test_invalid_utf8_is_refused(embed_server):
    request = urllib.request.Request(
        embed_server.base_url + "/v1/embeddings", method="POST",
        data=b'{"model": "minilm", "input": "bad \xff byte"}',
        headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=60)
        raise AssertionError("invalid UTF-8 was accepted")
    except urllib.error.HTTPError as error:
        assert error.code == 400


def test_models_list_says_each_kind(embed_server):
    status, body = call(embed_server, "GET", "/v1/models")
    assert status == 200
    kinds = {m["id"]: m["pier"]["kind"] for m in body["data"]}
    assert kinds == {"smol": "generate", "minilm": "embed"}
    minilm = next(m for m in body["data"] if m["id"] == "minilm")
    assert minilm["pier"]["dimensions"] == 384
    assert minilm["max_model_len"] == 256


def test_metrics_show_the_batcher(embed_server, ec):
    ec.embeddings.create(model="minilm", input=["one", "two", "three"])
    with urllib.request.urlopen(embed_server.base_url + "/metrics", timeout=60) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("pier_embedding") and 'model="minilm"' in line:
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    assert samples['pier_embedding_batches_total{model="minilm"}'] >= 1
    assert samples['pier_embedding_texts_total{model="minilm"}'] >= 3
    assert samples['pier_embedding_batch_texts_count{model="minilm"}'] >= 1
    assert samples['pier_embedding_queue_seconds_bucket{model="minilm",le="+Inf"}'] >= 3
    assert 'pier_embedding_window_seconds{model="minilm"}' in samples
    assert not any('model="smol"' in line and line.startswith("pier_embedding")
                   for line in text.splitlines())


def test_a_class_past_its_max_queue_time_gets_429(tmp_path):
    # A fixed 300 ms window: every request waits it; normal may wait 50 ms, critical has no limit.
    s = start_llm_and_embedder(tmp_path, "--max-queue-delay-ms", "300",
                               "--adaptive-batch-window", "off",
                               "--class-max-queue-ms", "normal=50", embedder_only=True)
    try:
        status, body = post(s, {"model": "minilm", "input": "late"})
        assert status == 429, body
        assert "max queue time" in body["error"]["message"]
        status, body = post(s, {"model": "minilm", "input": "urgent", "priority": "critical"})
        assert status == 200, body
    finally:
        s.stop_and_check()
