"""KServe v2 / Open Inference Protocol over HTTP through NVIDIA's `tritonclient` (http), on the
embedding model and the default LLM served together: health, metadata, readiness, infer with
JSON and with Triton's binary tensor extension, and the refusals.
"""

import json
import math
import struct

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import call, hf_wordpiece_ids, start_llm_and_embedder

@pytest.fixture(scope="module")
def kserve_server(tmp_path_factory):
    s = start_llm_and_embedder(tmp_path_factory.mktemp("kserve"))
    yield s
    s.stop_and_check()


@pytest.fixture
def triton(kserve_server):
    c = httpclient.InferenceServerClient(url=f"{kserve_server.host}:{kserve_server.port}")
    yield c
    c.close()


def texts_input(texts, binary):
    t = httpclient.InferInput("text", [len(texts)], "BYTES")
    t.set_data_from_numpy(np.array([s.encode() for s in texts], dtype=np.object_),
                          binary_data=binary)
    return t


def test_health_metadata_and_readiness(triton):
    assert triton.is_server_live()
    assert triton.is_server_ready()
    assert triton.get_server_metadata()["name"] == "pier"
    assert triton.is_model_ready("minilm")
    assert triton.is_model_ready("smol")
    meta = triton.get_model_metadata("minilm")
    assert meta["inputs"][0]["datatype"] == "BYTES"
    assert meta["outputs"][0] == {"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}
    assert triton.get_model_metadata("smol")["parameters"]["kind"] == "generate"
    with pytest.raises(InferenceServerException):
        triton.get_model_metadata("nope")


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_infer_matches_v1_embeddings(kserve_server, triton, binary_in, binary_out):
    texts = ["Hello world", "A man is eating food.", "café naïve résumé"]
    outputs = [httpclient.InferRequestedOutput("embedding", binary_data=binary_out)]
    result = triton.infer("minilm", [texts_input(texts, binary_in)], outputs=outputs)
    vectors = result.as_numpy("embedding")
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    status, body = call(kserve_server, "POST", "/v1/embeddings",
                        {"model": "minilm", "input": texts, "encoding_format": "float"})
    assert status == 200
    expected = np.array([d["embedding"] for d in body["data"]], dtype=np.float32)
    assert np.array_equal(vectors, expected), "KServe and OpenAI routes disagree"
    for v in vectors:
        assert math.isclose(float(np.linalg.norm(v)), 1.0, rel_tol=1e-5)


def test_infer_without_requested_outputs_is_binary_and_decodes(triton):
    result = triton.infer("minilm", [texts_input(["one", "two"], True)])
    assert result.as_numpy("embedding").shape == (2, 384)


def test_infer_errors(kserve_server, triton):
    with pytest.raises(InferenceServerException, match="generate"):
        triton.infer("smol", [texts_input(["hi"], False)])
    wrong = httpclient.InferInput("text", [2], "FP32")
    wrong.set_data_from_numpy(np.array([1, 2], dtype=np.float32), binary_data=False)
    with pytest.raises(InferenceServerException, match="BYTES"):
        triton.infer("minilm", [wrong])
    status, body = call(kserve_server, "POST", "/v2/models/minilm/infer",
                        {"inputs": [{"name": "text", "shape": [3], "datatype": "BYTES",
                                     "data": ["only", "two"]}]})
    assert status == 400 and "3" in body["error"]
    status, body = call(kserve_server, "POST", "/v2/models/minilm/infer",
                        {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                     "data": [""]}]})
    assert status == 400 and "empty" in body["error"]
    status, body = call(kserve_server, "POST", "/v2/models/minilm/infer",
                        {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                     "data": ["x"]}], "outputs": [{"name": "logits"}]})
    assert status == 400 and "logits" in body["error"]
    status, body = call(kserve_server, "POST", "/v2/models/nope/infer", {"inputs": []})
    assert status == 404 and "nope" in body["error"]
    status, body = call(kserve_server, "POST", "/v2/models/minilm/versions/7/infer", {})
    assert status == 404


def test_binary_header_length_beyond_the_body_is_refused(kserve_server):
    import urllib.request
    header = b'{"inputs":[{"name":"text","shape":[1],"datatype":"BYTES",' \
             b'"parameters":{"binary_data_size":100}}]}'
    body = header + struct.pack("<I", 3) + b"abc"
    request = urllib.request.Request(
        kserve_server.base_url + "/v2/models/minilm/infer", data=body, method="POST",
        headers={"Inference-Header-Content-Length": str(len(header))})
    try:
        urllib.request.urlopen(request, timeout=60)
        raise AssertionError("accepted a binary_data_size past the body")
    except urllib.error.HTTPError as error:
        assert error.code == 400


def test_generate_equals_completions(kserve_server):
    body = {"text_input": "The capital of France is", "parameters": {"max_tokens": 12,
                                                                    "temperature": 0}}
    status, answer = call(kserve_server, "POST", "/v2/models/smol/generate", body)
    assert status == 200, answer
    assert answer["model_name"] == "smol" and answer["model_version"] == "1"
    status, completion = call(kserve_server, "POST", "/v1/completions",
                              {"model": "smol", "prompt": "The capital of France is",
                               "max_tokens": 12, "temperature": 0})
    assert status == 200
    assert answer["text_output"] == completion["choices"][0]["text"]
    assert answer["text_output"]


def test_generate_stream_pieces_add_up(kserve_server):
    import urllib.request
    body = json.dumps({"text_input": "Count: one, two,", "max_tokens": 10,
                       "temperature": 0}).encode()
    request = urllib.request.Request(kserve_server.base_url + "/v2/models/smol/generate_stream",
                                     data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    pieces = []
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        for line in response.read().decode().splitlines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                assert event["model_name"] == "smol"
                pieces.append(event["text_output"])
    assert len(pieces) >= 2
    status, whole = call(kserve_server, "POST", "/v2/models/smol/generate",
                         {"text_input": "Count: one, two,", "max_tokens": 10, "temperature": 0})
    assert status == 200 and "".join(pieces) == whole["text_output"]


def test_generate_refusals(kserve_server):
    status, body = call(kserve_server, "POST", "/v2/models/smol/generate",
                        {"text_input": "x", "parameters": {"beam_width": 4}})
    assert status == 400 and "beam_width" in body["error"]
    status, body = call(kserve_server, "POST", "/v2/models/smol/generate", {"prompt": "x"})
    assert status == 400 and "text_input" in body["error"]
    status, body = call(kserve_server, "POST", "/v2/models/minilm/generate", {"text_input": "x"})
    assert status == 400 and "embedding" in body["error"]
    status, body = call(kserve_server, "POST", "/v2/models/smol/generate",
                        {"text_input": "x", "max_tokens": -3})
    assert status == 400 and body["error"]


@pytest.mark.parametrize("binary_in", [True, False])
def test_token_ids_with_an_attention_mask_embed_as_their_texts(triton, binary_in):
    # Ids from Hugging Face's tokenizer (the committed fixture), padded to one length and
    # masked: the same vectors as the texts themselves.
    wanted = ["Hello world", "The quick brown fox jumps over the lazy dog.", "café naïve résumé"]
    rows = hf_wordpiece_ids(wanted)
    width = max(len(r) for r in rows)
    padded = np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
    mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=np.int64)
    ids_in = httpclient.InferInput("input_ids", list(padded.shape), "INT64")
    ids_in.set_data_from_numpy(padded, binary_data=binary_in)
    mask_in = httpclient.InferInput("attention_mask", list(mask.shape), "INT64")
    mask_in.set_data_from_numpy(mask, binary_data=binary_in)
    from_ids = triton.infer("minilm", [ids_in, mask_in]).as_numpy("embedding")
    from_texts = triton.infer("minilm", [texts_input(wanted, binary_in)]).as_numpy("embedding")
    assert from_ids.shape == (3, 384)
    assert np.array_equal(from_ids, from_texts), "ids and texts must embed bitwise alike"
    # An id past the vocabulary is a 400 naming it.
    bad = httpclient.InferInput("input_ids", [1, 3], "INT64")
    bad.set_data_from_numpy(np.array([[101, 99999999, 102]], dtype=np.int64),
                            binary_data=binary_in)
    with pytest.raises(InferenceServerException) as raised:
        triton.infer("minilm", [bad])
    assert "99999999" in str(raised.value)


# Issue #41: each leniency a bad-input run found is a 400 naming the field, as over gRPC
# (test_kserve_grpc.py): both protocols read the request through one function.

def post_binary(server, header, binary, header_lengths=None):
    """POSTs an infer request with Triton's binary extension: the JSON `header`, then `binary`;
    Inference-Header-Content-Length once per entry of `header_lengths` (default: the header's
    length). Returns (status, parsed JSON body)."""
    import http.client
    head = json.dumps(header).encode()
    connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        connection.putrequest("POST", "/v2/models/minilm/infer")
        for length in header_lengths or [len(head)]:
            connection.putheader("Inference-Header-Content-Length", str(length))
        connection.putheader("Content-Type", "application/octet-stream")
        connection.putheader("Content-Length", str(len(head) + len(binary)))
        connection.endheaders(head + binary)
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    return response.status, (json.loads(body) if response.status != 200 else None)


def prefixed(*texts):
    return b"".join(struct.pack("<I", len(t)) + t for t in texts)


def text_header(size, **extra):
    return {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                        "parameters": {"binary_data_size": size}, **extra}]}


def test_a_string_as_data_is_refused(kserve_server):
    status, body = call(kserve_server, "POST", "/v2/models/minilm/infer",
                        {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                     "data": "hello"}]})
    assert status == 400 and "`data`: a list of strings" in body["error"], body
    status, body = call(kserve_server, "POST", "/v2/models/minilm/infer",
                        {"inputs": [{"name": "input_ids", "shape": [1], "datatype": "INT64",
                                     "data": 101}]})
    assert status == 400 and "`data`: a list of integers" in body["error"], body


def test_a_lone_attention_mask_is_refused_and_the_mask_may_come_first(triton):
    mask = httpclient.InferInput("attention_mask", [1, 3], "INT64")
    mask.set_data_from_numpy(np.array([[1, 1, 1]], dtype=np.int64), binary_data=False)
    with pytest.raises(InferenceServerException, match="'attention_mask' came alone"):
        triton.infer("minilm", [mask])
    # Beside the ids it may come before them: inputs are named, not placed.
    rows = hf_wordpiece_ids(["Hello world"])
    ids = httpclient.InferInput("input_ids", [1, len(rows[0]) + 2], "INT64")
    ids.set_data_from_numpy(np.array([rows[0] + [0, 0]], dtype=np.int64))
    mask = httpclient.InferInput("attention_mask", [1, len(rows[0]) + 2], "INT64")
    mask.set_data_from_numpy(np.array([[1] * len(rows[0]) + [0, 0]], dtype=np.int64))
    first = triton.infer("minilm", [mask, ids]).as_numpy("embedding")
    second = triton.infer("minilm", [ids, mask]).as_numpy("embedding")
    assert np.array_equal(first, second)


def test_data_and_binary_data_for_one_input_are_refused(kserve_server):
    binary = prefixed(b"abc")
    status, body = post_binary(kserve_server, text_header(len(binary), data=["xyz"]), binary)
    assert status == 400 and "has both `data` and binary data" in body["error"], body
    ids = struct.pack("<2q", 101, 102)
    status, body = post_binary(
        kserve_server, {"inputs": [{"name": "input_ids", "shape": [2], "datatype": "INT64",
                                    "data": [101, 102], "parameters": {"binary_data_size": 16}}]},
        ids)
    assert status == 400 and "'input_ids' has both `data` and binary data" in body["error"], body


def test_binary_bytes_no_input_claims_are_refused(kserve_server):
    binary = prefixed(b"abc")
    status, body = post_binary(kserve_server, text_header(len(binary)), binary + b"extra")
    assert status == 400 and "binary_data_size add up to 7" in body["error"], body
    status, body = post_binary(kserve_server, text_header(len(binary)), binary)
    assert status == 200, body


def test_a_repeated_inference_header_content_length_is_refused(kserve_server):
    binary = prefixed(b"abc")
    length = len(json.dumps(text_header(len(binary))).encode())
    for lengths in ([length, length], [length, length + 1]):
        status, body = post_binary(kserve_server, text_header(len(binary)), binary, lengths)
        assert status == 400, body
        assert "Inference-Header-Content-Length is given 2 times" in body["error"], body


@pytest.mark.parametrize("priority", ["abc", -5, 1.5, True])
def test_a_priority_that_is_not_a_level_is_refused(kserve_server, priority):
    status, body = call(kserve_server, "POST", "/v2/models/minilm/infer",
                        {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES",
                                     "data": ["x"]}], "parameters": {"priority": priority}})
    assert status == 400 and "parameter priority must be an integer" in body["error"], body
