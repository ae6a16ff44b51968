"""ONNX tensor models through the model lifecycle and worker processes, with tritonclient:
an on_demand model loads for its first infer and is unloaded when idle, then loads again; with
`workers: on` an ONNX model runs in its own `pier worker` process beside an LLM, answers the
same as in process, and a killed worker is restarted while the LLM serves on."""
import os
import signal
import tempfile

import numpy as np
import pytest
import tritonclient.http as httpclient

from conftest import PIER_MODEL, PierServer, call, wait_for, write_config

MODELS = os.environ.get("PIER_MODELS", os.path.join(os.path.dirname(PIER_MODEL)))


def tiny(name):
    path = os.path.join(MODELS, "onnx-tiny", name)
    assert os.path.exists(path), f"{path} is missing: run scripts/bootstrap"
    return path


def add_mul(client, model, x):
    a = np.full((1, 4), x, np.float32)
    b = np.arange(4, dtype=np.float32).reshape(1, 4)
    inputs = [httpclient.InferInput("a", [1, 4], "FP32"), httpclient.InferInput("b", [1, 4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return client.infer(model, inputs).as_numpy("sum")


def entry(server, model):
    return next(m for m in call(server, "GET", "/admin/models")[1]["data"] if m["id"] == model)


def test_an_on_demand_model_loads_for_infer_and_unloads_when_idle():
    folder = tempfile.mkdtemp(prefix="pier-onnx-life-")
    config = write_config(folder, f"""
models:
  - {{name: always, path: {tiny("add_mul.onnx")}}}
  - {{name: lazy, path: {tiny("add_mul.onnx")}, load: on_demand, idle_unload_after: 1}}
""")
    server = PierServer(["--config", config], with_model=False)
    try:
        client = httpclient.InferenceServerClient(url=f"{server.host}:{server.port}")
        assert entry(server, "lazy")["pier"]["state"] == "unloaded"
        np.testing.assert_array_equal(add_mul(client, "lazy", 2), [[2, 3, 4, 5]])
        assert entry(server, "lazy")["pier"]["lifecycle"]["loads"] == 1
        assert wait_for(lambda: entry(server, "lazy")["pier"]["state"] == "unloaded", 15), \
            entry(server, "lazy")
        assert entry(server, "lazy")["pier"]["lifecycle"]["idle_unloads"] == 1
        # Its owners went with it: the device holds what the other model holds.
        np.testing.assert_array_equal(add_mul(client, "lazy", 3), [[3, 4, 5, 6]])
        assert entry(server, "lazy")["pier"]["lifecycle"]["loads"] == 2
        np.testing.assert_array_equal(add_mul(client, "always", 1), [[1, 2, 3, 4]])
        client.close()
    finally:
        server.stop_and_check()


@pytest.fixture(scope="module")
def with_workers():
    folder = tempfile.mkdtemp(prefix="pier-onnx-workers-")
    config = write_config(folder, f"""
workers: on
worker_heartbeat_timeout: 2
models:
  - {{name: addmul, path: {tiny("add_mul.onnx")}, threads: 1}}
  - {{name: llm, path: {PIER_MODEL}, ctx: 512, threads: 1}}
""")
    server = PierServer(["--config", config], with_model=False)
    yield server
    server.stop_and_check()


def test_a_worker_process_serves_it_and_a_killed_worker_is_restarted(with_workers):
    client = httpclient.InferenceServerClient(url=f"{with_workers.host}:{with_workers.port}")
    np.testing.assert_array_equal(add_mul(client, "addmul", 5), [[5, 6, 7, 8]])
    model = entry(with_workers, "addmul")
    assert model["pier"]["kind"] == "tensor"
    worker = model["pier"]["instances"][0]["worker"]
    assert worker["state"] == "ready" and worker["pid"] > 0, worker
    # Its grant covers what the worker measured when it loaded (ONNX Runtime's own memory).
    assert worker["granted_bytes"] >= worker["committed_bytes"] > 0, worker
    measured = model["pier"]["memory"]["measured"]
    assert measured["ort_overhead_bytes"] > 0, measured
    os.kill(worker["pid"], signal.SIGKILL)
    # The next request waits for the restart, and is answered by the new worker.
    np.testing.assert_array_equal(add_mul(client, "addmul", 7), [[7, 8, 9, 10]])
    assert wait_for(lambda: entry(with_workers, "addmul")["pier"]["instances"][0]["worker"]
                    ["restarts"] == 1, 10)
    # The LLM beside it never noticed.
    status, body = call(with_workers, "POST", "/v1/completions",
                        {"model": "llm", "prompt": "Hello", "max_tokens": 4})
    assert status == 200, body
    client.close()
