"""The HTTP layer ends every request cleanly and fills the gaps OpenAI clients hit, checked
with raw bytes: SIGTERM after the grace period (streams get an error event, [DONE] and the
chunked terminator; non-streaming requests a complete 503; /health stays 200 and /ready turns
503 meanwhile), half-closed clients, aborts in the request counters, strict framing, HEAD,
WWW-Authenticate, logit_bias, max_tokens defaults and limits, requests without `model`, the
routes without /v1, CORS, system_fingerprint and /tokenize's with_pieces."""

import json
import signal
import socket
import time

import pytest

from rawhttp import (body_of, connect, json_request, metric, metrics, read_response, request,
                     status_of)


def raw_post(path, body, extra_headers=""):
    data = json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            f"{extra_headers}Content-Length: {len(data)}\r\n\r\n").encode() + data


def read_all(sock, timeout_s=60):
    sock.settimeout(timeout_s)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def dechunk(body):
    """The data of a chunked body; asserts that it ends with the terminating chunk."""
    out = b""
    while True:
        size_line, sep, rest = body.partition(b"\r\n")
        assert sep, f"chunked body ended without the terminator: {body[-200:]!r}"
        size = int(size_line, 16)
        if size == 0:
            assert rest.startswith(b"\r\n"), rest
            return out
        out += rest[:size]
        assert rest[size:size + 2] == b"\r\n"
        body = rest[size + 2:]


def long_stream(model_id, max_tokens=4000, stream=True):
    return {"model": model_id, "prompt": "Write a long story about a dragon.",
            "max_tokens": max_tokens, "stream": stream, "ignore_eos": True, "temperature": 0}


def test_sigterm_after_the_grace_period_ends_every_request_cleanly(start_server):
    s = start_server("--shutdown-grace", "2")
    streaming = connect(s)
    plain = connect(s)
    probe = connect(s)
    try:
        streaming.sendall(raw_post("/v1/completions", long_stream(s.model_id)))
        plain.sendall(raw_post("/v1/completions", long_stream(s.model_id, stream=False)))
        streaming.settimeout(60)
        first = b""
        while b"data: " not in first:
            first += streaming.recv(65536)
        s.proc.send_signal(signal.SIGTERM)
        # During the grace period: liveness 200, readiness 503, also on new connections (an
        # orchestrator's probes), and new work gets 503.
        time.sleep(0.5)
        probe.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        health = read_response(probe)
        assert status_of(health) == 200, health
        assert request(s, "GET", "/ready", timeout=10)[0] == 503
        assert request(s, "GET", "/health", timeout=10)[0] == 200
        status, _, body = request(s, "POST", "/v1/completions",
                                  {"model": s.model_id, "prompt": "Hi"}, timeout=10)
        assert status == 503 and b"shutting down" in body

        stream_bytes = first + read_all(streaming)
        assert status_of(stream_bytes) == 200
        events = dechunk(body_of(stream_bytes)).decode()
        assert events.endswith("data: [DONE]\n\n"), events[-300:]
        last_data = [e for e in events.split("\n\n") if e.startswith("data: {")][-1]
        error = json.loads(last_data[len("data: "):])["error"]
        assert error["code"] == "server_shutting_down" and "shutting down" in error["message"]

        plain_bytes = read_all(plain)
        assert status_of(plain_bytes) == 503, plain_bytes[:300]
        assert b"content-length:" in plain_bytes.lower()
        body = json.loads(body_of(plain_bytes))
        assert "shutting down" in body["error"]["message"]
    finally:
        for sock in (streaming, plain, probe):
            sock.close()
    assert s.proc.wait(timeout=30) == 0, s.log()


def test_half_closed_client_gets_its_response(server):
    for stream in (False, True):
        with connect(server) as sock:
            sock.sendall(raw_post("/v1/completions",
                                  {"model": server.model_id, "prompt": "Hello", "max_tokens": 8,
                                   "temperature": 0, "stream": stream}))
            sock.shutdown(socket.SHUT_WR)
            raw = read_all(sock)
        assert status_of(raw) == 200, raw[:300]
        if stream:
            assert dechunk(body_of(raw)).endswith(b"data: [DONE]\n\n")
        else:
            assert json.loads(body_of(raw))["usage"]["completion_tokens"] == 8


def test_aborted_requests_are_counted_by_finish_reason(server):
    name = f'pier_requests_total{{model="{server.model_id}",finish_reason="abort"}}'
    alias = f'vllm:request_success_total{{model_name="{server.model_id}",finished_reason="abort"}}'
    before = metrics(server)
    with connect(server) as sock:
        sock.sendall(raw_post("/v1/completions", long_stream(server.model_id, 2000)))
        sock.settimeout(60)
        while b"data: " not in sock.recv(65536):
            pass
    deadline = time.monotonic() + 10
    while True:
        after = metrics(server)
        if after[name] == before[name] + 1:
            break
        assert time.monotonic() < deadline, (before[name], after[name])
        time.sleep(0.1)
    assert after[alias] == before[alias] + 1


@pytest.mark.parametrize("raw,status", [
    (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
     b"Content-Length: 5\r\n\r\n0\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\n\r\n", 400),
    (b"GET /v1/models HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer a\r\n"
     b"Authorization: Bearer b\r\n\r\n", 400),
])
def test_ambiguous_framing_is_refused(server, raw, status):
    with connect(server) as sock:
        sock.sendall(raw)
        answer = read_response(sock)
    assert status_of(answer) == status, answer[:300]
    error = json.loads(body_of(answer))["error"]
    assert error["message"]


def test_head_works_on_get_routes(server):
    with connect(server) as sock:
        sock.sendall(b"HEAD /v1/models HTTP/1.1\r\nHost: t\r\n\r\n"
                     b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        sock.settimeout(30)
        data = b""
        while data.count(b"HTTP/1.1 ") < 2 or not data.endswith(b'{"status":"ok"}'):
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]) > 0
    # The HEAD response has no body: the next bytes are the second response.
    assert rest.startswith(b"HTTP/1.1 200"), rest[:100]


def test_401_names_the_bearer_scheme(start_server, tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_text('keys:\n  - key: "sk-test-0123456789abcdef"\n    tenant: "t"\n')
    s = start_server("--api-keys", str(keys))
    status, headers, body = json_request(s, "POST", "/v1/completions",
                                         {"model": s.model_id, "prompt": "hi"})
    assert status == 401, body
    assert headers["www-authenticate"] == "Bearer"
    assert isinstance(body["error"]["code"], str)


def first_token(server, prompt, **extra):
    status, _, body = json_request(server, "POST", "/v1/completions",
                                   {"model": server.model_id, "prompt": prompt, "max_tokens": 1,
                                    "temperature": 0, "logprobs": 0, **extra})
    assert status == 200, body
    return body["choices"][0]["logprobs"]["tokens"][0], body


def token_id(server, text):
    status, _, body = json_request(server, "POST", "/tokenize",
                                   {"content": text, "add_special": False})
    assert status == 200, body
    assert len(body["tokens"]) == 1, body
    return body["tokens"][0]


def test_logit_bias_bans_and_forces_tokens(server):
    prompt = "The capital of France is"
    greedy, _ = first_token(server, prompt)
    greedy_id = token_id(server, greedy)
    banned, _ = first_token(server, prompt, logit_bias={str(greedy_id): -100})
    assert banned != greedy
    forced_id = token_id(server, " banana")
    forced, _ = first_token(server, prompt, logit_bias={str(forced_id): 100})
    assert forced == " banana"
    for bias, fragment in [({"999999999": 5}, "outside the vocabulary"),
                           ({str(forced_id): 101}, "between -100 and 100"),
                           ({"abc": 1}, "token ids")]:
        status, _, body = json_request(server, "POST", "/v1/completions",
                                       {"model": server.model_id, "prompt": prompt,
                                        "max_tokens": 1, "logit_bias": bias})
        assert status == 400, body
        assert body["error"]["param"] == "logit_bias" and fragment in body["error"]["message"]


def test_default_and_maximum_max_tokens(start_server):
    s = start_server("--default-max-tokens", "5", "--max-tokens-limit", "12")
    base = {"model": s.model_id, "prompt": "Once upon a time", "temperature": 0,
            "ignore_eos": True}
    status, _, body = json_request(s, "POST", "/v1/completions", base)
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 5
    status, _, body = json_request(s, "POST", "/v1/completions", {**base, "max_tokens": 12})
    assert status == 200 and body["usage"]["completion_tokens"] == 12
    status, _, body = json_request(s, "POST", "/v1/completions", {**base, "max_tokens": 13})
    assert status == 400 and body["error"]["param"] == "max_tokens", body
    assert "limit of 12" in body["error"]["message"]


def test_default_above_the_maximum_is_refused_at_startup(tmp_path):
    from test_serving import run_serve
    r = run_serve("--default-max-tokens", "50", "--max-tokens-limit", "10")
    assert r.returncode == 1
    assert "default_max_tokens (50) is above max_tokens_limit (10)" in r.stderr
    r = run_serve("--cors-origins", "localhost:3000")
    assert r.returncode == 1 and "is not an origin" in r.stderr


def test_model_may_be_omitted_and_unknown_models_are_404(server):
    status, _, body = json_request(server, "POST", "/v1/chat/completions",
                                   {"messages": [{"role": "user", "content": "Hi"}],
                                    "max_tokens": 2})
    assert status == 200, body
    assert body["model"] == server.model_id
    status, _, body = json_request(server, "POST", "/v1/completions",
                                   {"model": "gpt-4", "prompt": "Hi", "max_tokens": 2})
    assert status == 404 and body["error"]["code"] == "model_not_found"


def test_routes_without_v1(server):
    status, _, body = json_request(server, "POST", "/chat/completions",
                                   {"model": server.model_id, "max_tokens": 2,
                                    "messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and body["object"] == "chat.completion", body
    status, _, body = json_request(server, "POST", "/completions",
                                   {"model": server.model_id, "prompt": "Hi", "max_tokens": 2})
    assert status == 200 and body["object"] == "text_completion", body
    status, _, body = json_request(server, "GET", "/models")
    assert status == 200 and body["data"][0]["id"] == server.model_id
    status, _, body = json_request(server, "GET", "/models/" + server.model_id)
    assert status == 200 and body["id"] == server.model_id


def test_cors(start_server):
    s = start_server("--cors-origins", "http://localhost:3000")
    status, headers, _ = request(s, "OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204
    assert headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == "authorization, content-type"
    status, headers, _ = request(s, "GET", "/v1/models", headers={"Origin": "http://localhost:3000"})
    assert status == 200 and headers["access-control-allow-origin"] == "http://localhost:3000"
    status, headers, _ = request(s, "GET", "/v1/models", headers={"Origin": "http://evil.example"})
    assert status == 200 and "access-control-allow-origin" not in headers
    status, _, body = request(s, "OPTIONS", "/v1/models", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "GET"})
    assert status == 403 and b"evil.example" in body


def test_system_fingerprint_is_the_build(server):
    body = {"model": server.model_id, "prompt": "Hi", "max_tokens": 2}
    status, _, plain = json_request(server, "POST", "/v1/completions", body)
    assert status == 200
    fingerprint = plain["system_fingerprint"]
    assert isinstance(fingerprint, str) and fingerprint.startswith("fp_")
    status, _, raw = request(server, "POST", "/v1/completions", {**body, "stream": True})
    chunks = [json.loads(line[6:]) for line in raw.decode().split("\n")
              if line.startswith("data: {")]
    assert chunks and all(c["system_fingerprint"] == fingerprint for c in chunks)


def test_tokenize_with_pieces(server):
    status, _, body = json_request(server, "POST", "/tokenize",
                                   {"content": "Hello world", "add_special": False,
                                    "with_pieces": True})
    assert status == 200, body
    assert "".join(t["piece"] for t in body["tokens"]) == "Hello world"
    status, _, plain = json_request(server, "POST", "/tokenize",
                                    {"content": "Hello world", "add_special": False})
    assert [t["id"] for t in body["tokens"]] == plain["tokens"]
    status, _, body = json_request(server, "POST", "/tokenize",
                                   {"content": "x", "with_pieces": "yes"})
    assert status == 400 and body["error"]["param"] == "with_pieces"
