"""GPU models in worker processes, the server's side, tested without a GPU through the
stand-in NVML (tests/metrics/fake_nvml.cpp): the server keeps the GPU's books (a ledger sized
from NVML; no CUDA context of its own), charges each worker's grant there and not to the CPU,
starts the worker seeing only its GPU or MIG instance (CUDA_VISIBLE_DEVICES), and refuses
with the reason what cannot work: a whole GPU in MIG mode, a GPU NVML does not list, a model
larger than the GPU, a gpu: binding naming another GPU. Where a real worker would need a usable GPU, the test hook
PIER_WORKER_TEST_GPU_ON_CPU has it compute on the CPU instead (its supervisor cannot tell);
without the hook, the worker's own refusal comes back as the load's error."""

import json
import os
import subprocess
import tempfile

from conftest import (MINILM, PIER_BINARY, PIER_MODEL, PierServer, call, fake_nvml_env,
                      metrics_text, wait_for, write_config)

GIB = 1 << 30
MIB = 1 << 20

SCRIPT = """driver=550.54.15
devices=2
gpu0.name=NVIDIA H100 80GB HBM3
gpu0.uuid=GPU-e2e
gpu0.mem_total=85899345920
gpu0.mem_used=0
gpu0.processes=1:1048576
gpu1.name=NVIDIA A100-SXM4-40GB
gpu1.uuid=GPU-bbbb
gpu1.mem_total=42949672960
gpu1.mem_used=0
gpu1.mig_devices=2
gpu1.mig0.uuid=MIG-1111
gpu1.mig0.gi=3
gpu1.mig0.mem_total=10737418240
gpu1.mig0.mem_used=0
gpu1.mig1.uuid=MIG-tiny
gpu1.mig1.gi=5
gpu1.mig1.mem_total=67108864
gpu1.mig1.mem_used=0
"""


def environ(pid):
    """The process's environment; a name set twice is an error (getenv takes the first)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        entries = [e.split("=", 1) for e in f.read().decode().split("\0") if "=" in e]
    names = [name for name, _ in entries]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    return dict(entries)


def maps(pid):
    with open(f"/proc/{pid}/maps", encoding="utf-8") as f:
        return f.read()


def detail(server, model):
    body = call(server, "GET", "/admin/models")[1]
    return body, next(m for m in body["data"] if m["id"] == model)


def refusal(server, model):
    status, body = call(server, "POST", "/v1/completions",
                        {"model": model, "prompt": "hi", "max_tokens": 2})
    assert status == 503, body
    return body["error"]["message"]


def test_a_gpu_model_in_workers_is_charged_to_its_gpus_books_and_sees_only_its_gpu(tmp_path):
    config = write_config(str(tmp_path), f"""
workers: on
models:
  - {{name: whole, path: {PIER_MODEL}, device: 'cuda:0', ctx: 1024, threads: 1}}
  - {{name: part, path: {PIER_MODEL}, device: MIG-1111, ctx: 1024, threads: 1}}
""")
    # The server itself started with another CUDA_VISIBLE_DEVICES (as under Slurm): the workers
    # must see their own GPU, not that one.
    env = dict(fake_nvml_env(tmp_path / "nvml.txt", SCRIPT), PIER_WORKER_TEST_GPU_ON_CPU="1",
               CUDA_VISIBLE_DEVICES="7")
    s = PierServer(["--config", config], with_model=False, env=env)
    try:
        # The server process opens no GPU its workers compute on.
        assert "libpier_cuda" not in maps(s.proc.pid) and "libcuda" not in maps(s.proc.pid)
        for model, device, visible in [("whole", "cuda:0 (NVIDIA H100 80GB HBM3)", "GPU-e2e"),
                                       ("part", "MIG-1111 on cuda:1 (NVIDIA A100-SXM4-40GB)",
                                        "MIG-1111")]:
            body, m = detail(s, model)
            pier = m["pier"]
            # Its memory is on the GPU's books, as much as the worker was granted.
            assert pier["device"] == device, pier
            worker = pier["instances"][0]["worker"]
            assert worker["state"] == "ready", worker
            assert worker["granted_bytes"] > 100 << 20, worker
            # Plus what its process holds there outside its governor (the CUDA context).
            assert pier["memory"]["committed_bytes"] == worker["granted_bytes"] + 512 * MIB, pier
            # The worker sees one GPU, in PCI bus order.
            env_of = environ(worker["pid"])
            assert env_of["CUDA_VISIBLE_DEVICES"] == visible, env_of
            assert env_of["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", env_of
            assert worker["binding"]["gpu"] == visible, worker
            status, reply = call(s, "POST", "/v1/completions",
                                 {"model": model, "prompt": "Hello", "max_tokens": 3})
            assert status == 200, reply
        # Nothing of theirs is charged to the CPU's budget; each GPU's books hold its grant.
        assert body["device"]["name"] == "cpu"
        assert body["device"]["committed_bytes"] == 0, body["device"]
        devices = {d["name"]: d for d in body["devices"]}
        assert devices["cpu"]["kind"] == "cpu"
        whole = devices["cuda:0 (NVIDIA H100 80GB HBM3)"]
        assert whole["kind"] == "ledger" and whole["capacity_bytes"] == 80 * GIB, whole
        assert whole["committed_bytes"] == detail(s, "whole")[1]["pier"]["memory"][
            "committed_bytes"], whole
        part = devices["MIG-1111 on cuda:1 (NVIDIA A100-SXM4-40GB)"]
        assert part["capacity_bytes"] == 10 * GIB and part["committed_bytes"] > 0, part
        # NVML's readings beside the books, for the console's device view.
        assert whole["gpu"]["name"] == "NVIDIA H100 80GB HBM3", whole
        assert whole["gpu"]["memory_total_bytes"] == 80 * GIB, whole
        assert part["gpu"]["uuid"] == "MIG-1111", part
        assert part["gpu"]["memory_total_bytes"] == 10 * GIB, part
        assert "gpu" not in devices["cpu"]
        text = metrics_text(s)
        assert 'device="cuda:0 (NVIDIA H100 80GB HBM3)"' in text
    finally:
        s.stop_and_check()


def test_what_cannot_run_on_a_gpu_in_workers_is_refused_with_the_reason(tmp_path):
    config = write_config(str(tmp_path), f"""
workers: on
models:
  - {{name: here, path: {PIER_MODEL}, ctx: 512, threads: 1}}
  - {{name: idle, path: {PIER_MODEL}, ctx: 512, threads: 1, load: on_demand}}
  - {{name: mig-mode, path: {PIER_MODEL}, device: 'cuda:1', load: on_demand}}
  - {{name: nowhere, path: {PIER_MODEL}, device: 'cuda:5', load: on_demand}}
  - {{name: ghost, path: {PIER_MODEL}, device: MIG-nope, load: on_demand}}
  - {{name: too-big, path: {PIER_MODEL}, device: MIG-tiny, load: on_demand}}
  - {{name: clash, path: {PIER_MODEL}, device: 'cuda:0', gpu: 1, load: on_demand}}
  - {{name: real, path: {PIER_MODEL}, device: 'cuda:0', ctx: 512, threads: 1, load: on_demand}}
""")
    env = fake_nvml_env(tmp_path / "nvml.txt", SCRIPT)
    s = PierServer(["--config", config], with_model=False, env=env)
    try:
        message = refusal(s, "mig-mode")
        assert "GPU 1 is in MIG mode: place the model on one of its instances" in message, message
        message = refusal(s, "nowhere")
        assert "device cuda:5: no such GPU or MIG instance" in message, message
        message = refusal(s, "ghost")
        assert "device MIG-nope: no such GPU or MIG instance" in message, message
        # Refused by the GPU's books before any worker starts, with the breakdown; an idle
        # model on the CPU is not unloaded for it (that frees nothing on the GPU).
        status, body = call(s, "POST", "/v1/completions",
                            {"model": "idle", "prompt": "hi", "max_tokens": 2})
        assert status == 200, body
        message = refusal(s, "too-big")
        assert "unloading idle model idle" not in s.log()
        assert detail(s, "idle")[1]["pier"]["state"] == "ready"
        assert "needs" in message and "on MIG-tiny on cuda:1" in message, message
        assert "weights" in message and "on the GPU" in message, message
        assert "budget of 64.0 MiB" in message, message
        assert "its weights alone do not fit" in message, message
        message = refusal(s, "clash")
        assert "its gpu: binding names 1" in message, message
        # Without the test hook the worker opens the GPU itself: with no usable GPU here its
        # refusal is the load's error.
        devices = json.loads(subprocess.run([PIER_BINARY, "devices", "--json"],
                                            capture_output=True, text=True, timeout=60,
                                            env={**os.environ, **env}).stdout)
        if devices["cuda"]["availability"] != "usable":
            message = refusal(s, "real")
            assert "cuda:0" in message and "no usable GPU" in message, message
        else:
            print("a usable GPU is here: the worker loads on it")
            status, body = call(s, "POST", "/v1/completions",
                                {"model": "real", "prompt": "hi", "max_tokens": 2})
            assert status == 200, body
        status, body = call(s, "POST", "/v1/completions",
                            {"model": "here", "prompt": "hi", "max_tokens": 2})
        assert status == 200, body
    finally:
        s.stop_and_check()


def test_the_servers_device_places_models_that_name_none(tmp_path):
    # `pier serve -m FILE --device cuda:0 --workers on`: the one model runs in a worker on GPU 0.
    env = dict(fake_nvml_env(tmp_path / "nvml.txt", SCRIPT), PIER_WORKER_TEST_GPU_ON_CPU="1")
    s = PierServer(["--workers", "on", "--device", "cuda:0"], env=env)
    try:
        _, m = detail(s, s.model_id)
        assert m["pier"]["device"] == "cuda:0 (NVIDIA H100 80GB HBM3)", m["pier"]
        worker = m["pier"]["instances"][0]["worker"]
        assert environ(worker["pid"])["CUDA_VISIBLE_DEVICES"] == "GPU-e2e"
    finally:
        s.stop_and_check()
    # Without a usable GPU (and without the hook), an in-process GPU model fails the start,
    # naming the device and why.
    out = subprocess.run([PIER_BINARY, "serve", "-m", PIER_MODEL, "--port", "0", "--device",
                          "cuda:7"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **fake_nvml_env(tmp_path / "nvml.txt", SCRIPT)})
    assert out.returncode != 0, out.stdout
    assert "listening" not in out.stdout
    # "no usable GPU" here; "no such device" (or the plugin's words) where there are GPUs.
    assert "did not load" in out.stderr and "device cuda:7: " in out.stderr, out.stderr


def test_without_nvml_a_gpu_worker_model_fails_naming_why_and_embeddings_stay_on_the_cpu(
        tmp_path):
    # The server's --device applies to LLMs: an embedding model that names no device runs on
    # the CPU. Without NVML a GPU served by workers cannot be sized: the load says so.
    config = write_config(str(tmp_path), f"""
workers: on
device: 'cuda:0'
models:
  - {{name: minilm, path: {MINILM}}}
  - {{name: llm, path: {PIER_MODEL}, load: on_demand}}
""")
    s = PierServer(["--config", config], with_model=False, env={"LD_LIBRARY_PATH": "/nonexistent"})
    try:
        status, body = call(s, "POST", "/v1/embeddings", {"model": "minilm", "input": "hello"})
        assert status == 200, body
        assert "minilm is an embedding model: it runs on the CPU" in s.log()
        message = refusal(s, "llm")
        assert "sized through NVML, which cannot be read" in message, message
    finally:
        s.stop_and_check()


def test_on_start_gpu_models_that_do_not_fit_together_stop_the_start(tmp_path):
    # Two models on one 1 GiB MIG instance: each alone fits (its grant and its CUDA context),
    # both do not; the server stops before listening, naming the instance and each model.
    script = SCRIPT.replace("gpu1.mig1.mem_total=67108864", "gpu1.mig1.mem_total=1073741824")
    config = write_config(str(tmp_path), f"""
workers: on
models:
  - {{name: one, path: {PIER_MODEL}, device: MIG-tiny, ctx: 512}}
  - {{name: two, path: {PIER_MODEL}, device: MIG-tiny, ctx: 512}}
""")
    out = subprocess.run([PIER_BINARY, "serve", "--config", config, "--port", "0"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, **fake_nvml_env(tmp_path / "nvml.txt", script),
                              "PIER_WORKER_TEST_GPU_ON_CPU": "1"})
    assert out.returncode != 0, out.stdout
    assert "listening" not in out.stdout
    assert "the on_start models on MIG-tiny on cuda:1 (NVIDIA A100-SXM4-40GB) need" in out.stderr, \
        out.stderr
    assert "(one " in out.stderr and ", two " in out.stderr, out.stderr
    assert "budget has 1.0 GiB free" in out.stderr, out.stderr
