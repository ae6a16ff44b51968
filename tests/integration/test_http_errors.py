"""Every error status over raw HTTP (http.client and sockets), in OpenAI's error shape:
400 (malformed and truncated JSON, wrong types, out-of-range values, unsupported features,
invalid UTF-8, a malformed request line), 404 (unknown model, unknown route), 405, 413."""

import json

import pytest

from conftest import start_llm_and_embedder
from rawhttp import body_of, connect, json_request, read_response, request, status_of


def assert_error(status, body, expected_status, param=None):
    assert status == expected_status, body
    error = body["error"] if isinstance(body, dict) else json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    # OpenAI's form: the code is a string or null, never a number.
    assert error["code"] is None or isinstance(error["code"], str), error
    if param is not None:
        assert error["param"] == param, error
    return error


def completion(server, body, path="/v1/completions", headers=None):
    return json_request(server, "POST", path, body, headers)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_malformed_and_truncated_json_is_400(server, path):
    for raw in ['{"prompt": "hi",', "not json", '{"prompt": "abc', "", "[1, 2]"]:
        status, _, body = completion(server, raw, path)
        error = assert_error(status, body, 400)
        # What is wrong and where, not the parser's internals.
        assert "json.exception" not in error["message"], error
        if raw and raw != "[1, 2]":
            assert error["message"].startswith("invalid JSON at byte offset "), error


def test_wrong_types_are_400(server):
    m = server.model_id
    cases = [
        ({"model": m, "prompt": "hi", "max_tokens": "ten"}, "max_tokens"),
        ({"model": m, "prompt": "hi", "temperature": "hot"}, "temperature"),
        ({"model": m, "prompt": 5}, "prompt"),
        ({"model": m, "prompt": "hi", "stream": "yes"}, "stream"),
        ({"model": m, "prompt": "hi", "stop": 3}, "stop"),
    ]
    for body, param in cases:
        status, _, response = completion(server, body)
        assert_error(status, response, 400, param)
    status, _, response = completion(server, {"model": m, "messages": "hello"},
                                     "/v1/chat/completions")
    assert_error(status, response, 400, "messages")


def test_out_of_range_values_are_400(server):
    m = server.model_id
    cases = [
        ({"model": m, "prompt": "hi", "temperature": -1}, "temperature"),
        ({"model": m, "prompt": "hi", "top_p": 1.5}, "top_p"),
        ({"model": m, "prompt": "hi", "max_tokens": 0}, "max_tokens"),
        ({"model": m, "prompt": "hi", "n": 0}, "n"),
        ({"model": m, "prompt": "hi", "max_tokens": 1_000_000}, None),
    ]
    for body, param in cases:
        status, _, response = completion(server, body)
        assert_error(status, response, 400, param)
    status, _, response = completion(
        server, {"model": m, "messages": [{"role": "user", "content": "hi"}], "logprobs": True,
                 "top_logprobs": 21}, "/v1/chat/completions")
    assert_error(status, response, 400, "top_logprobs")


def test_unsupported_features_are_400_not_ignored(server):
    # (Chat takes tools with every model since the generic form, issue #50; completions not.)
    status, _, response = completion(
        server, {"model": server.model_id, "prompt": "hi",
                 "tools": [{"type": "function", "function": {"name": "f"}}]})
    assert "tools" in assert_error(status, response, 400)["message"]
    status, _, response = completion(
        server, {"model": server.model_id, "prompt": "hi", "stream_options":
                 {"include_usage": True}})
    assert_error(status, response, 400)


def test_invalid_utf8_is_400(server):
    body = b'{"model": "' + server.model_id.encode() + b'", "prompt": "caf\xe9 \xff"}'
    status, _, data = request(server, "POST", "/v1/completions", body)
    assert_error(status, json.loads(data), 400)
    status, _, data = request(server, "POST", "/tokenize", b'{"content": "\xc3\x28"}')
    assert_error(status, json.loads(data), 400)


def test_detokenize_out_of_range_is_400(server):
    for tokens in ([10**9], [-1], [1.5], "abc"):
        status, _, body = json_request(server, "POST", "/detokenize", {"tokens": tokens})
        assert_error(status, body, 400, "tokens")


def test_unknown_model_is_404(server):
    status, _, body = completion(server, {"model": "gpt-4", "prompt": "hi", "max_tokens": 1})
    assert_error(status, body, 404)
    status, _, body = completion(server, {"model": "gpt-4", "max_tokens": 1,
                                          "messages": [{"role": "user", "content": "hi"}]},
                                 "/v1/chat/completions")
    assert_error(status, body, 404)
    status, _, body = json_request(server, "GET", "/v1/models/gpt-4")
    assert assert_error(status, body, 404)["code"] == "model_not_found"


def test_unknown_route_is_404_and_wrong_method_is_405(server):
    status, _, body = json_request(server, "GET", "/v1/nothing-here")
    assert_error(status, body, 404)
    status, headers, body = json_request(server, "GET", "/v1/completions")
    assert_error(status, body, 405)
    assert "POST" in headers["allow"]
    status, _, body = json_request(server, "DELETE", "/health")
    assert_error(status, body, 405)


def test_body_over_the_limit_is_413_before_it_is_sent(server):
    # The announced length alone exceeds the default 4 MiB: the answer comes without the body.
    with connect(server) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 5000000\r\n\r\n" + b"{" * 1000)
        raw = read_response(sock)
    assert status_of(raw) == 413, raw[:300]
    assert_error(413, json.loads(body_of(raw)), 413)


def test_malformed_request_line_and_truncated_body(server):
    with connect(server) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        raw = read_response(sock)
    assert status_of(raw) == 400, raw[:300]
    # A body cut short by a client that half-closed: 400 saying what was missing (the client
    # still reads), and the server keeps serving.
    with connect(server) as sock:
        sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n"
                     b'{"content": "a')
        sock.shutdown(1)
        raw = read_response(sock, deadline_s=15)
    assert status_of(raw) == 400, raw[:300]
    error = assert_error(400, json.loads(body_of(raw)), 400)
    assert "ended after 14 of its 100 bytes" in error["message"], error
    status, _, body = json_request(server, "GET", "/health")
    assert status == 200 and body == {"status": "ok"}


def test_a_binary_inference_header_that_is_not_json_says_where(tmp_path):
    """KServe's binary tensor extension: the JSON header is the body's first
    Inference-Header-Content-Length bytes; a length that cuts it short is a 400 naming the
    header and the byte, not the parser's internals."""
    header = b'{"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["hi"]}]}'
    server = start_llm_and_embedder(tmp_path, embedder_only=True)
    try:
        status, _, data = request(server, "POST", "/v2/models/minilm/infer", header,
                                  {"Inference-Header-Content-Length": "20"})
        assert status == 400, data
        message = json.loads(data)["error"]
        assert message.startswith("invalid JSON in the inference header (the body's first 20 "
                                  "bytes, by Inference-Header-Content-Length) at byte offset 20: "
                                  ), message
        assert "end of input" in message and "json.exception" not in message, message
    finally:
        server.stop_and_check()
