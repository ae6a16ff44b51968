"""QoS end to end on the default model (issue #16), through the official `openai` client:
tenants share the engine by weighted fair share (and do not with --qos off), a request still
waiting at its queue deadline gets 429 naming it, a request whose predicted wait is already past
its deadline is refused at once with Retry-After, the critical class's reserve lets it start
while low requests hold every other slot (no preemption), and GET /admin/qos and /metrics show
the state, a model loaded past its threshold sends requests to its fallback model and takes
them back once the load falls, and critical requests stop the steps of a long prompt they land
in without changing any answer. The fake-runner unit tests (tests/engine/scheduler/qos_scheduler_test.cpp,
engine_qos_test.cpp) measure shares and start steps exactly; these check the whole path."""

import re
import threading
import time

import openai
import pytest

from conftest import PIER_MODEL, PierServer, call, metrics_text, start_llm_and_embedder, write_config
from rawhttp import request

KEYS = """
keys:
  - key: sk-a
    tenant: a
  - key: sk-b
    tenant: b
"""


def client(server, key="unused"):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0, timeout=120)


def complete(c, server, max_tokens, **extra):
    """One greedy completion that generates exactly max_tokens tokens."""
    body = {"ignore_eos": True}
    body.update(extra.pop("extra_body", {}))
    return c.completions.create(model=server.model_id, prompt="Count slowly:", max_tokens=max_tokens,
                                temperature=0, extra_body=body, **extra)


def finish_order(server, qos):
    """Tenant a queues 6 requests, then b queues 6, on an engine of 2 slots: the tenants in the
    order their requests finished."""
    order, lock = [], threading.Lock()

    def run(key):
        complete(client(server, key), server, 64)
        with lock:
            order.append(key[-1])

    threads = []
    for key in ["sk-a"] * 6:
        threads.append(threading.Thread(target=run, args=(key,)))
        threads[-1].start()
    # b's requests come once all of a's are in the engine (2 running, 4 waiting).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        tenants = qos_state(server)["models"][0]["tenants"]
        if sum(t["live_sequences"] for t in tenants if t["tenant"] == "a") == 6:
            break
        time.sleep(0.005)
    for key in ["sk-b"] * 6:
        threads.append(threading.Thread(target=run, args=(key,)))
        threads[-1].start()
    for t in threads:
        t.join()
    assert len(order) == 12
    return order


@pytest.mark.parametrize("qos", ["on", "off"])
def test_tenants_share_the_engine_unless_qos_is_off(tmp_path, qos):
    keys = tmp_path / "keys.yaml"
    keys.write_text(KEYS)
    server = PierServer(["--api-keys", str(keys), "--max-seqs", "2", "--qos-reserve", "0",
                         "--qos", qos])
    try:
        first = finish_order(server, qos)
    finally:
        server.stop_and_check()
    last_a = len(first) - 1 - first[::-1].index("a")
    if qos == "on":
        # From b's arrival on, freed slots alternate between the tenants: b's requests finish
        # among a's, before a's last one.
        assert first.index("b") < last_a, first
    else:
        # First come, first served: every a before any b.
        assert first.index("b") > last_a, first


@pytest.fixture(scope="module")
def reserved():
    """2 slots, one kept for critical; low may wait 1.5 s; critical's TTFT target is 60 s."""
    s = PierServer(["--max-seqs", "2", "--qos-reserve", "0.5", "--class-max-queue-ms",
                    "low=1500", "--class-ttft-ms", "critical=60000"])
    yield s
    s.stop_and_check()


def qos_state(server):
    status, body = call(server, "GET", "/admin/qos")
    assert status == 200, body
    return body


def test_a_waiting_request_expires_at_its_deadline_and_critical_uses_the_reserve(reserved):
    c = client(reserved)
    long_done = {}

    def long_low():
        long_done["r"] = complete(c, reserved, 1500, extra_body={"priority": "low"})
        long_done["at"] = time.monotonic()

    holder = threading.Thread(target=long_low)
    holder.start()
    time.sleep(0.5)  # the long low request holds the only slot low may use
    state = qos_state(reserved)
    model = state["models"][0]
    assert model["reserve"]["slots"] == 1 and model["max_seqs"] == 2
    assert state["classes"]["low"]["max_queue_ms"] == 1500

    # A second low request waits behind it and is refused once its 1.5 s have passed.
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as raised:
        complete(c, reserved, 4, extra_body={"priority": "low"})
    waited = time.monotonic() - started
    message = raised.value.body["message"]
    assert "queue deadline passed" in message and "class low" in message, message
    assert 1.4 < waited < 30, waited

    # Critical starts in the reserved slot while the long request still runs: no preemption.
    critical = complete(c, reserved, 8, extra_body={"priority": "critical"})
    critical_done = time.monotonic()
    assert critical.choices[0].finish_reason == "length"
    holder.join()
    assert critical_done < long_done["at"], "critical waited for the low request to finish"

    text = metrics_text(reserved)
    assert re.search(r'^pier_preemptions_total\{model="[^"]+"\} 0$', text, re.M), text
    assert re.search(r'^pier_qos_requests_total\{[^}]*class="low"[^}]*outcome="expired"\} 1$',
                     text, re.M)
    assert re.search(r'^pier_qos_queue_expired_total\{[^}]*\} 1$', text, re.M)
    assert re.search(r'^pier_qos_slo_attainment_ratio\{model="[^"]+",class="critical"\} 1$',
                     text, re.M), [l for l in text.splitlines() if "attainment" in l]


def test_a_request_predicted_to_miss_its_deadline_is_refused_at_once(reserved):
    c = client(reserved)
    # normal has no max queue time: these wait as long as it takes.
    threads = [threading.Thread(target=complete, args=(c, reserved, 96),
                                kwargs={"extra_body": {"priority": "normal"}}) for _ in range(6)]
    for t in threads:
        t.start()
    # Wait until the queue's drain rate is measured and normal requests still wait.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        model = qos_state(reserved)["models"][0]
        if model["admissions_per_s"] > 0 and model["queue"]["normal"]["waiting"] >= 2:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the drain rate was never measured with a queue: {model}")
    predicted = model["queue"]["normal"]["predicted_wait_ms"]
    assert predicted is not None and predicted > 50, model
    with pytest.raises(openai.RateLimitError) as raised:
        complete(c, reserved, 4, extra_body={"priority": "normal", "deadline_ms": 50})
    # Refused on arrival (a request refused after waiting would say its deadline passed).
    assert "predicted wait for class normal" in raised.value.body["message"], raised.value.body
    assert "deadline_ms of 50 ms" in raised.value.body["message"]
    retry_after = int(raised.value.response.headers["retry-after"])
    assert retry_after >= 1
    for t in threads:
        t.join()
    assert re.search(r'^pier_qos_requests_total\{[^}]*outcome="refused_predicted_wait"\} 1$',
                     metrics_text(reserved), re.M)


def test_a_loaded_model_sends_requests_to_its_fallback_and_takes_them_back(tmp_path):
    # No critical reserve: with 2 slots it would keep one (at least one when non-zero), and the
    # test loads the primary with two normal requests.
    config = write_config(str(tmp_path), f"""
qos_reserve: 0
models:
  - name: smol
    path: {PIER_MODEL}
    max_seqs: 2
    fallback: lite
    fallback_load: 0.9
    fallback_release: 0.5
  - name: lite
    path: {PIER_MODEL}
""")
    server = PierServer(["--config", config], with_model=False)
    try:
        c = client(server)

        def ask(model="smol", **kwargs):
            raw = c.completions.with_raw_response.create(
                model=model, prompt="Hi", max_tokens=2, temperature=0, **kwargs)
            return raw.parse().model, raw.headers.get("x-pier-fallback")

        assert ask() == ("smol", None)  # idle: the primary answers
        flood = [threading.Thread(target=c.completions.create,
                                  kwargs=dict(model="smol", prompt="Count slowly:", max_tokens=300,
                                              temperature=0, extra_body={"ignore_eos": True}))
                 for _ in range(3)]
        for t in flood:
            t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            smol = [m for m in qos_state(server)["models"] if m["model"] == "smol"][0]
            if smol["running"] == 2:
                break
            time.sleep(0.02)
        # Loaded past 0.9: new requests go to lite, which names itself and the primary.
        assert ask() == ("lite", "smol")
        assert ask(extra_body={"priority": "critical"}) == ("lite", "smol")
        # A client that forbids it waits for the primary.
        assert ask(extra_headers={"X-Pier-No-Fallback": "1"}) == ("smol", None)
        assert ask(extra_body={"fallback": False}) == ("smol", None)
        for t in flood:
            t.join()
        # Below the release threshold the primary answers again.
        assert ask() == ("smol", None)
        text = metrics_text(server)
        diverted = re.findall(r'^pier_qos_requests_total\{model="smol",[^}]*'
                              r'class="(\w+)",outcome="fallback_load"\} (\d+)$', text, re.M)
        # normal: the one above, and a flood request that came in third, if it did.
        diverted = dict(diverted)
        assert diverted["critical"] == "1" and diverted["normal"] in ("1", "2"), diverted
    finally:
        server.stop_and_check()


def test_the_models_of_one_device_share_one_fair_share_ledger(tmp_path):
    # Tenant "gpu-hog" streams on model one only; model two's QoS state counts it live, with
    # the tokens it has taken: tenants share the device across its models.
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - key: sk-hog\n    tenant: gpu-hog\n")
    config = write_config(str(tmp_path), f"""
models:
  - {{name: one, path: {PIER_MODEL}}}
  - {{name: two, path: {PIER_MODEL}}}
""")
    server = PierServer(["--config", config, "--api-keys", str(keys)], with_model=False)
    try:
        c = client(server, "sk-hog")
        stream = c.completions.create(model="one", prompt="Count slowly:", max_tokens=400,
                                      temperature=0, stream=True, extra_body={"ignore_eos": True})
        chunks = iter(stream)
        for _ in range(5):
            next(chunks)
        models = {m["model"]: m for m in qos_state(server)["models"]}
        hog_on_two = [t for t in models["two"]["tenants"] if t["tenant"] == "gpu-hog"]
        assert hog_on_two and hog_on_two[0]["live_sequences"] == 1, models["two"]
        assert hog_on_two[0]["tokens"] > 0, hog_on_two
        assert models["two"]["running"] == 0  # its own engine runs nothing
        stream.close()
    finally:
        server.stop_and_check()


# A prompt long enough that its prefill takes several steps of the whole budget on 2 cores.
LONG_PROMPT = "Summarize these notes: " + " ".join(f"note {i} says the pier is open;" for i in range(150))


def stopped_steps(server):
    found = re.search(r'^pier_qos_steps_stopped_early_total\{model="[^"]+"\} (\d+)$',
                      metrics_text(server), re.M)
    assert found, "no pier_qos_steps_stopped_early_total"
    return int(found.group(1))


def test_a_critical_request_stops_a_long_prefill_and_every_answer_is_unchanged():
    """Critical requests arrive while a long normal prompt is being read: the steps they land
    in stop between layers and the critical prompts go first; the long request's answer and
    each critical answer are the same text as on a server that never stops a step."""
    criticals = [f"Critical question {i}: what is {i} plus {i}?" for i in range(4)]

    def greedy(c, server, prompt, priority, max_tokens):
        return c.completions.create(model=server.model_id, prompt=prompt, max_tokens=max_tokens,
                                    temperature=0, extra_body={"priority": priority,
                                                               "ignore_eos": True})

    server = PierServer(["--max-seqs", "4", "--qos-reserve", "0.25"])
    try:
        c = client(server)
        answers = {}

        def long_normal():
            answers["long"] = greedy(c, server, LONG_PROMPT, "normal", 8).choices[0].text

        holder = threading.Thread(target=long_normal)
        holder.start()
        # One critical request every 150 ms while the long prompt is read (its steps are the
        # ones that may stop), each waiting for its answer.
        sent = 0
        while holder.is_alive() and sent < len(criticals):
            time.sleep(0.15)
            answers[sent] = greedy(c, server, criticals[sent], "critical", 4).choices[0].text
            sent += 1
        holder.join()
        assert sent >= 1, "the long prompt was read before any critical request was sent"
        stopped = stopped_steps(server)
        assert stopped >= 1, f"no step stopped for {sent} critical requests"
        state = qos_state(server)
        assert state["stop_steps"] == "on"
        assert state["models"][0]["steps_stopped_early"] == stopped
    finally:
        server.stop_and_check()

    reference = PierServer(["--max-seqs", "4", "--qos-stop-steps", "off"])
    try:
        c = client(reference)
        assert greedy(c, reference, LONG_PROMPT, "normal", 8).choices[0].text == answers["long"]
        for i in range(sent):
            assert greedy(c, reference, criticals[i], "critical", 4).choices[0].text == answers[i]
        assert stopped_steps(reference) == 0
        assert qos_state(reference)["stop_steps"] == "off"
    finally:
        reference.stop_and_check()


def test_every_answer_after_the_class_is_decided_names_it(tmp_path):
    """X-Priority-Applied on /v1/embeddings as on the chat route, and on the 429s of a key's
    rate (refused after the class was decided); not on a 400 for a priority that is none."""
    keys = tmp_path / "keys.yaml"
    keys.write_text("""
keys:
  - {key: sk-llm, tenant: llm, max_priority: high, requests_per_second: 0.01}
  - {key: sk-emb, tenant: emb, max_priority: high, requests_per_second: 0.01}
""")
    server = start_llm_and_embedder(tmp_path, "--api-keys", str(keys))
    try:
        routes = [
            ("/v1/embeddings", "sk-emb", {"model": "minilm", "input": "a lighthouse"}),
            ("/v1/chat/completions", "sk-llm",
             {"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
        ]
        for path, key, body in routes:
            # critical asked, clamped to the key's ceiling.
            headers = {"Authorization": f"Bearer {key}", "X-Priority": "critical"}
            status, got, data = request(server, "POST", path, body, headers)
            assert status == 200, (path, data)
            assert got.get("x-priority-applied") == "high", (path, got)
            # The key's one request per 100 s is spent: 429, in the class decided.
            status, got, data = request(server, "POST", path, body, headers)
            assert status == 429, (path, data)
            assert got.get("x-priority-applied") == "high", (path, got)
            assert "retry-after" in got, (path, got)
            # A priority that is none: no class was decided.
            headers["X-Priority"] = "urgent"
            status, got, data = request(server, "POST", path, body, headers)
            assert status == 400, (path, data)
            assert "x-priority-applied" not in got, (path, got)
    finally:
        server.stop_and_check()
