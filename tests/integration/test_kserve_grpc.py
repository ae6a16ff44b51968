"""KServe v2 over gRPC (`--grpc-port`) through NVIDIA's `tritonclient.grpc`: health, metadata,
readiness and infer on the embedding model (equal to the HTTP routes' vectors), the refusals,
and API keys as `authorization` metadata.
"""

import struct
import threading
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import call, hf_wordpiece_ids, start_llm_and_embedder

@pytest.fixture(scope="module")
def grpc_server(tmp_path_factory):
    s = start_llm_and_embedder(tmp_path_factory.mktemp("grpc"), "--grpc-port", "0")
    assert s.grpc_port, f"no gRPC listening line\n{s.log()}"
    yield s
    s.stop_and_check()


@pytest.fixture
def triton(grpc_server):
    c = grpcclient.InferenceServerClient(url=f"127.0.0.1:{grpc_server.grpc_port}")
    yield c
    c.close()


def texts_input(texts):
    t = grpcclient.InferInput("text", [len(texts)], "BYTES")
    t.set_data_from_numpy(np.array([s.encode() for s in texts], dtype=np.object_))
    return t


def test_health_and_metadata(triton):
    assert triton.is_server_live()
    assert triton.is_server_ready()
    assert triton.get_server_metadata().name == "pier"
    assert triton.is_model_ready("minilm")
    meta = triton.get_model_metadata("minilm")
    assert meta.outputs[0].name == "embedding"
    assert list(meta.outputs[0].shape) == [-1, 384]
    with pytest.raises(InferenceServerException, match="nope"):
        triton.get_model_metadata("nope")


def test_infer_equals_the_http_routes(grpc_server, triton):
    texts = ["Hello world", "A man is eating food."]
    result = triton.infer("minilm", [texts_input(texts)],
                          outputs=[grpcclient.InferRequestedOutput("embedding")])
    vectors = result.as_numpy("embedding")
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    status, body = call(grpc_server, "POST", "/v1/embeddings",
                        {"model": "minilm", "input": texts, "encoding_format": "float"})
    assert status == 200
    assert np.array_equal(vectors, np.array([d["embedding"] for d in body["data"]],
                                            dtype=np.float32))


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_infer_is_on_the_live_request_board_while_it_runs(grpc_server, triton, transport):
    """GET /admin/requests (the console's live view) shows an embedding model's infer while it
    waits and runs, over gRPC under the method's name and over HTTP under the route, with its
    id, model, tenant and class; and takes it off once answered."""
    texts = [f"{i}: " + "a long sentence about the weather and the sea, " * 12 for i in range(48)]
    seen = []

    def watch():
        for _ in range(500):
            rows = call(grpc_server, "GET", "/admin/requests")[1]["data"]
            if rows:
                seen.extend(rows)
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    if transport == "grpc":
        result = triton.infer("minilm", [texts_input(texts)], request_id="board-1")
        assert result.as_numpy("embedding").shape == (48, 384)
    else:
        status, body = call(grpc_server, "POST", "/v2/models/minilm/infer", {
            "id": "board-1",
            "inputs": [{"name": "text", "datatype": "BYTES", "shape": [48], "data": texts}]})
        assert status == 200 and body["outputs"][0]["shape"] == [48, 384], body
    watcher.join()
    assert seen, "the infer never showed on /admin/requests"
    row = seen[0]
    route = {"grpc": "/inference.GRPCInferenceService/ModelInfer",
             "http": "/v2/models/{model}/infer"}[transport]
    assert row["route"] == route, row
    assert row["model"] == "minilm" and row["id"] == "board-1", row
    assert row["tenant"] == "default" and row["class"] == "normal", row
    assert call(grpc_server, "GET", "/admin/requests")[1]["data"] == []


def test_infer_refusals(triton):
    with pytest.raises(InferenceServerException, match="generate"):
        triton.infer("smol", [texts_input(["hi"])])
    wrong = grpcclient.InferInput("text", [1], "FP32")  # INT32/INT64 would be token ids
    wrong.set_data_from_numpy(np.array([7], dtype=np.float32))
    with pytest.raises(InferenceServerException, match="BYTES"):
        triton.infer("minilm", [wrong])
    with pytest.raises(InferenceServerException, match="empty"):
        triton.infer("minilm", [texts_input([""])])
    with pytest.raises(InferenceServerException, match="version"):
        triton.infer("minilm", [texts_input(["x"])], model_version="3")


def test_api_keys_travel_as_metadata(tmp_path):
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - key: sk-grpc\n    tenant: t\n")
    s = start_llm_and_embedder(tmp_path, "--grpc-port", "0", "--api-keys", str(keys),
                               embedder_only=True)
    try:
        c = grpcclient.InferenceServerClient(url=f"127.0.0.1:{s.grpc_port}")
        with pytest.raises(InferenceServerException, match="(?i)api key"):
            c.infer("minilm", [texts_input(["x"])])
        ok = c.infer("minilm", [texts_input(["x"])], headers={"authorization": "Bearer sk-grpc"})
        assert ok.as_numpy("embedding").shape == (1, 384)
        c.close()
    finally:
        s.stop_and_check()


def test_token_ids_with_an_attention_mask_embed_as_their_texts(triton):
    # Ids from Hugging Face's tokenizer (the committed fixture), padded and masked; tritonclient
    # sends them as raw contents: the same vectors as the texts.
    wanted = ["Hello world", "The quick brown fox jumps over the lazy dog."]
    rows = hf_wordpiece_ids(wanted)
    width = max(len(r) for r in rows)
    padded = np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int32)
    mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=np.int32)
    ids_in = grpcclient.InferInput("input_ids", list(padded.shape), "INT32")
    ids_in.set_data_from_numpy(padded)
    mask_in = grpcclient.InferInput("attention_mask", list(mask.shape), "INT32")
    mask_in.set_data_from_numpy(mask)
    from_ids = triton.infer("minilm", [ids_in, mask_in]).as_numpy("embedding")
    from_texts = triton.infer("minilm", [texts_input(wanted)]).as_numpy("embedding")
    assert from_ids.shape == (2, 384)
    assert np.array_equal(from_ids, from_texts)
    bad = grpcclient.InferInput("input_ids", [2], "INT32")
    bad.set_data_from_numpy(np.array([101, -5], dtype=np.int32))
    with pytest.raises(InferenceServerException) as raised:
        triton.infer("minilm", [bad])
    assert "token id -5" in str(raised.value)


# Issue #41: the refusals the HTTP route makes (test_kserve_v2.py), over gRPC, with the protobuf
# stubs where tritonclient would not send the request (raw contents it did not make, reserved
# parameters).

@pytest.fixture
def stub(grpc_server):
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_server.grpc_port}",
                                    options=[("grpc.max_send_message_length", -1)])
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def raw_texts_request(*texts):
    request = service_pb2.ModelInferRequest(model_name="minilm")
    request.inputs.add(name="text", datatype="BYTES", shape=[len(texts)])
    request.raw_input_contents.append(b"".join(struct.pack("<I", len(t)) + t for t in texts))
    return request


def refusal(stub, request):
    with pytest.raises(grpc.RpcError) as raised:
        stub.ModelInfer(request, timeout=60)
    return raised.value.code(), raised.value.details()


def test_raw_input_contents_beyond_the_inputs_are_refused(stub):
    for extra in (struct.pack("<I", 3) + b"abc", b""):
        request = raw_texts_request(b"hello")
        request.raw_input_contents.append(extra)
        code, details = refusal(stub, request)
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert "raw_input_contents holds 2 entries for 1 inputs" in details
    assert stub.ModelInfer(raw_texts_request(b"hello"), timeout=60).outputs[0].shape == [1, 384]


def test_raw_and_contents_for_one_input_are_refused(stub):
    request = raw_texts_request(b"hello")
    request.inputs[0].contents.bytes_contents.append(b"hello")
    code, details = refusal(stub, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "'text' has both `data` and binary data" in details and "raw_input_contents" in details


def test_a_lone_attention_mask_is_refused(triton):
    mask = grpcclient.InferInput("attention_mask", [1, 3], "INT32")
    mask.set_data_from_numpy(np.array([[1, 1, 1]], dtype=np.int32))
    with pytest.raises(InferenceServerException, match="'attention_mask' came alone"):
        triton.infer("minilm", [mask])


@pytest.mark.parametrize("field,value", [("string_param", "abc"), ("int64_param", -5),
                                         ("double_param", 1.5), ("bool_param", True)])
def test_a_priority_that_is_not_a_level_is_refused_as_over_http(stub, field, value):
    request = raw_texts_request(b"x")
    setattr(request.parameters["priority"], field, value)
    code, details = refusal(stub, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "parameter priority must be an integer, 0 or more" in details


def test_a_priority_level_is_taken_as_int64_or_uint64(stub):
    for field in ("int64_param", "uint64_param"):
        request = raw_texts_request(b"x")
        setattr(request.parameters["priority"], field, 2)
        assert stub.ModelInfer(request, timeout=60).outputs[0].shape == [1, 384]


def test_a_message_past_the_http_body_cap_is_refused_and_the_next_is_served(stub):
    # --max-body-bytes (4 MiB by default) caps gRPC messages too. The text's shape is wrong as
    # well, so a server without the cap answers at once (INVALID_ARGUMENT) instead of embedding.
    request = raw_texts_request(b"x " * (5 << 19))
    request.inputs[0].shape[:] = [2]
    code, details = refusal(stub, request)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
    assert "larger than max" in details and str(4 << 20) in details, details
    assert stub.ModelInfer(raw_texts_request(b"hello"), timeout=60).outputs[0].shape == [1, 384]


def test_the_message_cap_follows_max_body_bytes(tmp_path):
    s = start_llm_and_embedder(tmp_path, "--grpc-port", "0", "--max-body-bytes", "1MiB",
                               embedder_only=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = raw_texts_request(b"x " * (3 << 18))  # 1.5 MiB
            request.inputs[0].shape[:] = [2]
            code, details = refusal(stub, request)
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
            assert str(1 << 20) in details, details
    finally:
        s.stop_and_check()
