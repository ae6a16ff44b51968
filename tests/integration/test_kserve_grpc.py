"""KServe v2 over gRPC (`--grpc-port`) through NVIDIA's `tritonclient.grpc`: health, metadata,
readiness and infer on the embedding model (equal to the HTTP routes' vectors), the refusals,
and API keys as `authorization` metadata.
"""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
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
