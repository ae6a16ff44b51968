"""Every request finishes or is refused, at any budget (issue #41).

Two copies of the default model share a memory budget just above what their minimums need.
A request that needs more KV than its model could ever hold under that budget is refused at
once with 400 naming the tokens and bytes, and nothing behind it waits. A request that fits
the ceiling but not the memory free now (the other model's burst holds it) waits without
spinning (the governor's refused-grow count stays flat), shows in /ready/NAME and
pier_kv_waiting_for_memory, and completes once the other model is idle. With workers on and
off."""

import concurrent.futures
import re
import tempfile
import time
import urllib.error
import urllib.request

import openai
import pytest

from conftest import PIER_MODEL, PierServer, metrics_text, wait_for, write_config

# Each copy needs about 122 MiB of weights and workspace and one 256-token KV chunk (5.6 MiB)
# at least (136 MiB together): 290 MiB leaves about 18 MiB, three chunks, to lend between them.
BUDGET = "290MiB"


def gauge(text, name, model):
    match = re.search(rf'^{name}{{[^}}]*model="{model}"[^}}]*}} ([0-9.e+-]+)$', text, re.M)
    return float(match.group(1)) if match else None


def device_failures(text):
    match = re.search(r'^pier_memory_alloc_failures_total{[^}]*} ([0-9.e+-]+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


def ready_of(server, model):
    try:
        with urllib.request.urlopen(f"{server.base_url}/ready/{model}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.mark.parametrize("workers", ["off", "on"])
def test_the_budget_refuses_what_it_can_never_hold_and_wakes_what_it_can(workers):
    folder = tempfile.mkdtemp(prefix="pier-tight-")
    config = write_config(folder, f"""
workers: {workers}
kv_idle_release: 600
models:
  - {{name: a, path: {PIER_MODEL}}}
  - {{name: b, path: {PIER_MODEL}}}
""")
    s = PierServer(["--config", config, "--memory-budget", BUDGET], with_model=False)
    try:
        c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0,
                          timeout=120)
        ceiling = gauge(metrics_text(s), "pier_kv_ceiling_tokens", "a")
        assert ceiling is not None and 256 <= ceiling < 1400, metrics_text(s)

        # Never: refused at once, naming tokens and bytes, however long it would wait.
        started = time.monotonic()
        with pytest.raises(openai.BadRequestError) as refused:
            c.completions.create(model="a", prompt="word " * 1400, max_tokens=16)
        assert time.monotonic() - started < 10
        message = str(refused.value)
        assert "under the memory budget" in message and "MiB" in message, message
        assert f"at most {int(ceiling)} tokens" in message, message
        # Without max_tokens the default completion stops at the ceiling instead.
        short = c.completions.create(model="a", prompt="Hello", temperature=0)
        assert short.usage.prompt_tokens + short.usage.completion_tokens <= ceiling
        # Nothing waits behind the refusal.
        hi = c.chat.completions.create(model="a", messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=4)
        assert hi.choices[0].finish_reason in ("length", "stop")

        # Later: b's burst holds the memory a would grow into; a's long request waits for it
        # without spinning and completes once b is idle (its KV reclaimed).
        long_prompt = "the quick brown fox jumps over the lazy dog. " * int(ceiling * 0.07)

        def b_request(i):
            return c.completions.create(model="b", prompt=f"{i}: " + long_prompt, max_tokens=32,
                                        temperature=0).choices[0].finish_reason

        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
            t0 = time.monotonic()
            b_done = [pool.submit(b_request, i) for i in range(2)]
            assert wait_for(lambda: (gauge(metrics_text(s), "pier_kv_blocks_total", "b") or 0) >
                            (gauge(metrics_text(s), "pier_kv_blocks_total", "a") or 0),
                            timeout=60)
            a_done = pool.submit(lambda: c.completions.create(
                model="a", prompt=long_prompt, max_tokens=16, temperature=0))
            waited = wait_for(lambda: (gauge(metrics_text(s), "pier_kv_waiting_for_memory", "a")
                                       or 0) >= 1, timeout=30)
            assert waited, "a's request never waited for memory: the budget is not tight enough"
            before = device_failures(metrics_text(s))
            status, body = ready_of(s, "a")
            time.sleep(1.0)
            after = device_failures(metrics_text(s))
            # One refused grow per release at most, not tens of thousands a second.
            assert after - before < 50, (before, after)
            # Not ready while nothing of a's runs; ready again once it does.
            assert status in (200, 503), body
            if status == 503:
                assert "cannot start" in body, body
            assert [f.result(timeout=240) for f in b_done] == ["length"] * 2
            print(f"b done after {time.monotonic() - t0:.1f} s")
            a = a_done.result(timeout=240)
            print(f"a done after {time.monotonic() - t0:.1f} s (waited for memory: {waited})")
            assert a.choices[0].finish_reason == "length"
            assert a.usage.completion_tokens == 16
        assert wait_for(lambda: gauge(metrics_text(s), "pier_kv_waiting_for_memory", "a") == 0)
        assert ready_of(s, "a")[0] == 200
    finally:
        s.stop_and_check()
