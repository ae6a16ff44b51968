"""What an operator sees of a tensor (ONNX) model on a live server: its batcher's figures in
/metrics (items, batches, requests, the batch size, queue and compute histograms), its tensors,
batching and measured memory in /admin/models and /admin/models/{name}, and its BATCHER line
in `pier top`. Uses models/onnx-tiny/add_mul.onnx (a + b, a * b over [N, 4] FP32; made by
scripts/bootstrap)."""
import os
import re
import subprocess

import pytest

from conftest import PIER_BINARY, PIER_MODEL, PierServer, call, metrics_text

ADD_MUL = os.path.join(os.path.dirname(PIER_MODEL), "onnx-tiny", "add_mul.onnx")


def sample(text, series):
    match = re.search("^" + re.escape(series) + r" (\S+)$", text, re.MULTILINE)
    assert match, f"no {series} in /metrics"
    return float(match.group(1))


@pytest.fixture(scope="module")
def add_mul():
    if not os.path.exists(ADD_MUL):
        pytest.fail(f"{ADD_MUL} is missing: scripts/bootstrap makes it")
    server = PierServer(["-m", ADD_MUL], with_model=False)
    yield server
    assert server.terminate() == 0, server.log()


def infer(server, batch):
    values = [float(i) for i in range(batch * 4)]
    tensor = {"shape": [batch, 4], "datatype": "FP32", "data": values}
    status, body = call(server, "POST", "/v2/models/add_mul/infer",
                        {"inputs": [{"name": "a", **tensor}, {"name": "b", **tensor}]})
    assert status == 200, body


def test_metrics_count_items_batches_and_latency(add_mul):
    before = metrics_text(add_mul)
    items0 = sample(before, 'pier_tensor_items_total{model="add_mul"}')
    requests0 = sample(before, 'pier_tensor_requests_total{model="add_mul"}')
    batched0 = sample(before, 'pier_tensor_batch_items_sum{model="add_mul"}')
    for batch in (1, 2, 3):  # one at a time: each its own batch
        infer(add_mul, batch)
    text = metrics_text(add_mul)
    m = '{model="add_mul"}'
    assert sample(text, "pier_tensor_items_total" + m) == items0 + 6
    assert sample(text, "pier_tensor_requests_total" + m) == requests0 + 3
    assert sample(text, "pier_tensor_batches_total" + m) >= 3
    assert sample(text, "pier_tensor_queue_items" + m) == 0
    assert sample(text, "pier_tensor_batch_items_sum" + m) == batched0 + 6
    assert sample(text, 'pier_tensor_batch_items_bucket{model="add_mul",le="+Inf"}') >= 3
    assert sample(text, "pier_tensor_queue_seconds_count" + m) == requests0 + 3
    assert sample(text, "pier_tensor_compute_seconds_sum" + m) > 0
    assert "# TYPE pier_tensor_items_total counter" in text
    assert "# TYPE pier_tensor_batch_items histogram" in text
    # No engine figures for a model without an engine.
    assert 'pier_kv_cache_usage_ratio{model="add_mul"}' not in text


def test_admin_models_show_tensors_batching_and_memory(add_mul):
    status, body = call(add_mul, "GET", "/admin/models")
    assert status == 200
    entry = next(d for d in body["data"] if d["id"] == "add_mul")
    pier = entry["pier"]
    assert pier["kind"] == "tensor"
    tensor = pier["tensor"]
    assert tensor["inputs"] == [{"name": "a", "datatype": "FP32", "shape": [-1, 4]},
                                {"name": "b", "datatype": "FP32", "shape": [-1, 4]}]
    assert [o["name"] for o in tensor["outputs"]] == ["sum", "product"]
    assert tensor["max_batch_size"] == 8 and tensor["opset"] > 0
    assert set(pier["batcher"]) >= {"queued_items", "items", "batches", "expired", "cancelled"}
    owners = {o["owner"]: o for o in pier["memory"]["owners"]}
    assert set(owners) == {"add_mul/weights", "add_mul/workspace", "add_mul/ort_overhead"}
    measured = pier["memory"]["measured"]
    assert measured["warmed"] is True
    assert owners["add_mul/ort_overhead"]["used_bytes"] == measured["ort_overhead_bytes"]
    assert pier["memory"]["committed_bytes"] == sum(o["committed_bytes"] for o in owners.values())
    status, one = call(add_mul, "GET", "/admin/models/add_mul")
    assert status == 200 and one["pier"]["tensor"] == tensor
    assert call(add_mul, "GET", "/admin/models/nope")[0] == 404


def test_pier_top_shows_the_batcher(add_mul):
    shown = subprocess.run([PIER_BINARY, "top", "--once", "--url", add_mul.base_url,
                            "--width", "80"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    header = lines.index(next(l for l in lines if l.startswith("BATCHER")))
    assert "ITEMS/S" in lines[header] and "PER BATCH" in lines[header]
    assert lines[header + 1].startswith("add_mul "), shown.stdout
