"""Per-key abuse limits (the keys file's requests_per_second, max_concurrent,
max_prompt_tokens and max_output_tokens, and the same per priority class under class_limits)
through the official `openai` client: a request over a size limit gets 400 naming the limit,
over the rate or the concurrency 429 (the rate's with Retry-After); another key's requests,
and another class's, are untouched; a slot comes back when its response ends."""

import time

import openai
import pytest

from conftest import PierServer

KEYS = """
keys:
  - key: sk-sized
    tenant: sized
    max_prompt_tokens: 40
    max_output_tokens: 20
  - key: sk-rate
    tenant: rate
    requests_per_second: 1
  - key: sk-one
    tenant: one
    max_concurrent: 1
  - key: sk-tokens
    tenant: tokens
    tokens_per_minute: 300
  - key: sk-classes
    tenant: classes
    max_prompt_tokens: 200
    class_limits:
      critical: {max_concurrent: 1}
      low: {max_prompt_tokens: 30}
  - key: sk-free
    tenant: free
"""


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    keys.write_text(KEYS)
    s = PierServer(["--api-keys", str(keys)])
    yield s
    s.stop_and_check()


def client(server, key):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0, timeout=60)


def ask(c, server, **kwargs):
    args = dict(model=server.model_id, messages=[{"role": "user", "content": "Hi"}],
                max_tokens=4, temperature=0)
    args.update(kwargs)
    return c.chat.completions.create(**args)


def test_size_limits_are_400s_naming_the_limit(keyed):
    c = client(keyed, "sk-sized")
    assert ask(c, keyed).choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError) as raised:
        ask(c, keyed, messages=[{"role": "user", "content": "word " * 60}])
    assert "max_prompt_tokens" in raised.value.body["message"] and "40" in raised.value.body["message"]
    with pytest.raises(openai.BadRequestError) as raised:
        ask(c, keyed, n=2, max_tokens=15)
    assert raised.value.body["param"] == "max_tokens"
    assert "max_output_tokens" in raised.value.body["message"]
    # No max_tokens: the default shrinks to what the key allows instead of failing.
    r = ask(c, keyed, max_tokens=None, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 20
    # Another key is untouched.
    assert ask(client(keyed, "sk-free"), keyed, messages=[{"role": "user", "content": "word " * 60}])


def test_the_rate_limit_is_a_429_with_retry_after(keyed):
    c = client(keyed, "sk-rate")
    ask(c, keyed)
    with pytest.raises(openai.RateLimitError) as raised:
        ask(c, keyed)
    assert "requests_per_second" in raised.value.body["message"]
    assert int(raised.value.response.headers["retry-after"]) >= 1
    time.sleep(1.1)
    ask(c, keyed)  # refilled
    ask(client(keyed, "sk-free"), keyed)


def test_tokens_per_minute_counts_prompt_and_max_tokens_at_admission(keyed):
    c = client(keyed, "sk-tokens")
    with pytest.raises(openai.BadRequestError) as raised:  # more than a minute's worth
        ask(c, keyed, max_tokens=400)
    assert "tokens_per_minute" in raised.value.body["message"]
    ask(c, keyed, max_tokens=200)  # about 230 of the 300
    with pytest.raises(openai.RateLimitError) as raised:
        ask(c, keyed, max_tokens=200)
    assert "tokens_per_minute" in raised.value.body["message"]
    assert int(raised.value.response.headers["retry-after"]) >= 1
    ask(client(keyed, "sk-free"), keyed, max_tokens=200)


def test_max_concurrent_holds_a_slot_until_the_response_ends(keyed):
    c = client(keyed, "sk-one")
    stream = ask(c, keyed, max_tokens=400, stream=True, extra_body={"ignore_eos": True})
    next(iter(stream))  # the stream has started: its slot is taken
    with pytest.raises(openai.RateLimitError) as raised:
        ask(c, keyed)
    assert "max_concurrent" in raised.value.body["message"]
    ask(client(keyed, "sk-free"), keyed)
    stream.close()
    deadline = time.monotonic() + 10
    while True:  # the server notices the closed stream and gives the slot back
        try:
            ask(c, keyed)
            break
        except openai.RateLimitError:
            assert time.monotonic() < deadline, "the slot was never given back"
            time.sleep(0.1)


def test_class_limits_hold_only_their_class(keyed):
    c = client(keyed, "sk-classes")
    long_prompt = [{"role": "user", "content": "word " * 40}]
    # low: at most 30 prompt tokens; normal: the key's 200.
    with pytest.raises(openai.BadRequestError) as raised:
        ask(c, keyed, messages=long_prompt, extra_body={"priority": "low"})
    assert "class_limits.low.max_prompt_tokens" in raised.value.body["message"]
    assert "30" in raised.value.body["message"]
    ask(c, keyed, messages=long_prompt, extra_body={"priority": "normal"})
    # critical: one in flight; a second critical waits for it, a normal one does not.
    stream = ask(c, keyed, max_tokens=400, stream=True,
                 extra_body={"ignore_eos": True, "priority": "critical"})
    next(iter(stream))
    with pytest.raises(openai.RateLimitError) as raised:
        ask(c, keyed, extra_body={"priority": "critical"})
    assert "class_limits.critical.max_concurrent" in raised.value.body["message"]
    ask(c, keyed, extra_body={"priority": "normal"})
    stream.close()
