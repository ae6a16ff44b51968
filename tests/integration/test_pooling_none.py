"""An embedding model that pools none (a vector per token), served next to the usual one: the
OpenAI embeddings API refuses it by name (it answers one vector per input), KServe v2 answers
a [texts, tokens, dim] tensor over HTTP (tritonclient, JSON and binary) and gRPC, padded with
zero vectors; each real row is unit length and a text's rows do not depend on its batch.

The model is all-MiniLM-L6-v2 (Q8_0) with its `bert.pooling_type` set to 0 in a copy of the
file (the value's 4 bytes after the key's name and type).
"""


import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import MINILM, PierServer, call, write_config


def pooling_none_copy(folder):
    data = bytearray(open(MINILM, "rb").read())
    key = b"bert.pooling_type"
    at = data.find(key)
    assert at > 0
    value_type = int.from_bytes(data[at + len(key):at + len(key) + 4], "little")
    assert value_type in (4, 5)  # GGUF uint32 / int32
    data[at + len(key) + 4:at + len(key) + 8] = (0).to_bytes(4, "little")
    path = folder / "minilm-tokens.gguf"
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def tokens_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pooling-none")
    copy = pooling_none_copy(folder)
    config = write_config(str(folder), f"""
models:
  - name: minilm
    path: {MINILM}
  - name: tokens
    path: {copy}
""")
    s = PierServer(["--config", config, "--grpc-port", "0"], with_model=False)
    yield s
    s.stop_and_check()


TEXTS = ["Hello world", "A man is eating food in the kitchen.", "ok"]


def check_tensor(vectors, lengths):
    assert vectors.dtype == np.float32
    assert vectors.shape == (len(lengths), max(lengths), 384)
    for i, n in enumerate(lengths):
        norms = np.linalg.norm(vectors[i, :n], axis=1)
        assert np.allclose(norms, 1.0, atol=1e-5)
        assert not vectors[i, n:].any()  # padding


def test_openai_api_refuses_a_per_token_model(tokens_server):
    status, body = call(tokens_server, "POST", "/v1/embeddings",
                        {"model": "tokens", "input": "Hello world"})
    assert status == 400
    assert body["error"]["code"] == "pooling_none"
    assert "/v2/models/tokens/infer" in body["error"]["message"]
    # The usual model beside it still answers.
    status, body = call(tokens_server, "POST", "/v1/embeddings",
                        {"model": "minilm", "input": "Hello world"})
    assert status == 200 and len(body["data"][0]["embedding"]) == 384


@pytest.mark.parametrize("binary", [True, False])
def test_kserve_http_gives_a_vector_per_token(tokens_server, binary):
    c = httpclient.InferenceServerClient(url=f"{tokens_server.host}:{tokens_server.port}")
    try:
        meta = c.get_model_metadata("tokens")
        assert meta["outputs"][0]["shape"] == [-1, -1, 384]
        t = httpclient.InferInput("text", [len(TEXTS)], "BYTES")
        t.set_data_from_numpy(np.array([s.encode() for s in TEXTS], dtype=np.object_),
                              binary_data=binary)
        out = [httpclient.InferRequestedOutput("embedding", binary_data=binary)]
        batch = c.infer("tokens", [t], outputs=out).as_numpy("embedding")
        # [CLS] hello world [SEP]: 4 tokens; "ok": 3.
        lengths = [int(np.count_nonzero(np.abs(batch[i]).sum(axis=1))) for i in range(len(TEXTS))]
        assert lengths[0] == 4 and lengths[2] == 3
        check_tensor(batch, lengths)
        # The second text alone: the same rows, bit for bit.
        one = httpclient.InferInput("text", [1], "BYTES")
        one.set_data_from_numpy(np.array([TEXTS[1].encode()], dtype=np.object_),
                                binary_data=binary)
        alone = c.infer("tokens", [one], outputs=out).as_numpy("embedding")
        assert alone.shape == (1, lengths[1], 384)
        assert np.array_equal(alone[0], batch[1, :lengths[1]])
    finally:
        c.close()


def test_kserve_grpc_gives_the_same_tensor(tokens_server):
    assert tokens_server.grpc_port
    h = httpclient.InferenceServerClient(url=f"{tokens_server.host}:{tokens_server.port}")
    g = grpcclient.InferenceServerClient(url=f"127.0.0.1:{tokens_server.grpc_port}")
    try:
        assert list(g.get_model_metadata("tokens").outputs[0].shape) == [-1, -1, 384]
        data = np.array([s.encode() for s in TEXTS], dtype=np.object_)
        gi = grpcclient.InferInput("text", [len(TEXTS)], "BYTES")
        gi.set_data_from_numpy(data)
        via_grpc = g.infer("tokens", [gi]).as_numpy("embedding")
        hi = httpclient.InferInput("text", [len(TEXTS)], "BYTES")
        hi.set_data_from_numpy(data)
        via_http = h.infer("tokens", [hi]).as_numpy("embedding")
        assert np.array_equal(via_grpc, via_http)
    finally:
        g.close()
        h.close()
