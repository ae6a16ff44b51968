"""The OpenAI-compatible API through the official `openai` client: chat and completions,
streaming and not, n > 1, stop strings, seeds, logprobs, /v1/models; greedy output over HTTP
against `pier run`, and /tokenize + /detokenize against the completions' token counts."""

import subprocess

import openai
import pytest

from conftest import PIER_BINARY, PIER_MODEL
from rawhttp import json_request

CHAT = [{"role": "user", "content": "Name three colors."}]
PROMPT = "The capital of France is"


def test_models_list_and_retrieve(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [server.model_id]
    assert server.model_id == "SmolLM2-135M-Instruct.Q4_1"
    model = client.models.retrieve(server.model_id)
    assert model.id == server.model_id
    assert model.owned_by == "pier"
    assert model.created > 0
    assert model.model_extra["max_model_len"] == 4096
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_chat_completion(client, server):
    r = client.chat.completions.create(model=server.model_id, messages=CHAT, max_tokens=12,
                                       temperature=0)
    assert r.object == "chat.completion"
    assert r.model == server.model_id
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert 0 < r.usage.completion_tokens <= 12
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_streaming_equals_non_streaming(client, server):
    whole = client.chat.completions.create(model=server.model_id, messages=CHAT, max_tokens=12,
                                           temperature=0)
    chunks = list(client.chat.completions.create(
        model=server.model_id, messages=CHAT, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1, "one id across chunks"
    choice_chunks = [c for c in chunks if c.choices]
    assert choice_chunks[0].choices[0].delta.role == "assistant"
    assert all(c.choices[0].delta.role is None for c in choice_chunks[1:])
    finishes = [c.choices[0].finish_reason for c in choice_chunks]
    assert all(f is None for f in finishes[:-1]) and finishes[-1] == whole.choices[0].finish_reason
    text = "".join(c.choices[0].delta.content or "" for c in choice_chunks)
    assert text == whole.choices[0].message.content
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and chunks[-1] is usage_chunks[0] and not chunks[-1].choices
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_streaming_equals_non_streaming(client, server):
    whole = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=10,
                                      temperature=0)
    assert whole.object == "text_completion"
    assert whole.choices[0].text
    chunks = list(client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=10,
                                            temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_n_2_gives_two_indexed_choices(client, server):
    r = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=8,
                                  temperature=0.8, seed=7, n=2)
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert all(c.text for c in r.choices)
    chat = client.chat.completions.create(model=server.model_id, messages=CHAT, max_tokens=8,
                                          temperature=0.8, seed=7, n=2)
    assert sorted(c.index for c in chat.choices) == [0, 1]
    assert 2 <= chat.usage.completion_tokens <= 16  # both choices, 8 tokens at most each


def test_stop_string_cuts_the_text_and_is_never_streamed(client, server):
    greedy = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=16,
                                       temperature=0).choices[0].text
    # A stop string taken from the middle of the greedy text: the output must end just before
    # its first occurrence.
    start = next(i for i in range(3, len(greedy)) if not greedy[i].isspace())
    stop = greedy[start:start + 3]
    expected = greedy[:greedy.find(stop)]
    r = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=16,
                                  temperature=0, stop=[stop, "never-in-the-output-zzz"])
    assert r.choices[0].text == expected
    assert r.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=16,
                                            temperature=0, stop=stop, stream=True))
    pieces = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(pieces) == expected
    assert all(stop not in p for p in pieces)


def test_same_seed_same_text_and_seeds_vary(client, server):
    def sample(seed):
        return client.completions.create(model=server.model_id, prompt="Once upon a time",
                                         max_tokens=12, temperature=0.8, seed=seed).choices[0].text

    first = sample(1234)
    assert sample(1234) == first
    others = {sample(seed) for seed in (1, 2, 3)}
    assert len(others | {first}) >= 2, "four seeds gave one text"


def test_chat_logprobs(client, server):
    r = client.chat.completions.create(model=server.model_id, messages=CHAT, max_tokens=6,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-4)


def test_completion_logprobs(client, server):
    r = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=5,
                                  temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(len(top) == 2 for top in lp.top_logprobs)


def test_greedy_over_http_equals_pier_run(client, server):
    run = subprocess.run([PIER_BINARY, "run", "-m", PIER_MODEL, "-p", PROMPT, "-n", "12",
                          "--temperature", "0", "--threads", "2", "--ctx", "4096"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.endswith("\n")
    expected = run.stdout[:-1]
    r = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=12,
                                  temperature=0)
    assert r.choices[0].text == expected
    assert expected


def test_tokenize_detokenize_round_trip_and_prompt_tokens(client, server):
    text = "Hello, wörld! ✓ 123"
    status, _, plain = json_request(server, "POST", "/tokenize",
                                    {"content": text, "add_special": False})
    assert status == 200
    assert all(isinstance(t, int) for t in plain["tokens"]) and plain["tokens"]
    status, _, back = json_request(server, "POST", "/detokenize", {"tokens": plain["tokens"]})
    assert status == 200
    assert back["content"] == text
    # The completions route counts the prompt as /tokenize (with special tokens) does.
    status, _, special = json_request(server, "POST", "/tokenize", {"content": PROMPT})
    assert status == 200
    r = client.completions.create(model=server.model_id, prompt=PROMPT, max_tokens=1,
                                  temperature=0)
    assert r.usage.prompt_tokens == len(special["tokens"])
