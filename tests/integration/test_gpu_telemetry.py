"""GPU telemetry end to end, through the stand-in libnvidia-ml.so.1 (tests/metrics/
fake_nvml.cpp) found by the same dlopen name as NVIDIA's: /metrics carries the GPU under
Pier's and the DCGM exporter's names, NVML's per-process memory of a worker is reconciled
with its grant, a worker that NVML sees holding more device memory than its grant plus the
leak margin is drained and restarted; and without NVML the server says so once and
exports no GPU series."""
import json
import os
import re
import socket
import subprocess
import time

from conftest import PIER_BINARY, PierServer, call, fake_nvml_env, metrics_text, wait_for

GIB = 1 << 30

SCRIPT = """driver=550.54.15
devices=1
gpu0.name=NVIDIA H100 80GB HBM3
gpu0.uuid=GPU-e2e
gpu0.util=35
gpu0.mem_total=85899345920
gpu0.mem_used=21474836480
gpu0.temperature=51
gpu0.power_mw=250000
gpu0.sm_clock=1980
gpu0.ecc_corrected=2
gpu0.processes=1:1048576
"""


def sample(text, series):
    match = re.search("^" + re.escape(series) + r" (\S+)$", text, re.M)
    return None if match is None else float(match.group(1))


def worker(server):
    return call(server, "GET", "/admin/models")[1]["data"][0]["pier"]["instances"][0]["worker"]


def start(tmp_path, script, extra=()):
    path = tmp_path / "nvml.txt"
    server = PierServer(["--workers", "on", "--gpu-telemetry-min-period", "0.05",
                         "--gpu-telemetry-max-period", "1.05", *extra],
                        env=fake_nvml_env(path, script))
    return server, path


def test_metrics_carry_the_gpu_and_reconcile_a_workers_device_memory(tmp_path):
    # No leak check here (margin 0): 1 GiB appearing would otherwise be one.
    server, path = start(tmp_path, SCRIPT, ["--worker-leak-margin", "0"])
    try:
        pid = worker(server)["pid"]
        path.write_text(SCRIPT.replace("gpu0.processes=1:1048576",
                                       f"gpu0.processes={pid}:{GIB},1:{2 * GIB}"))
        labels = f'{{model="{server.model_id}",instance="1"}}'
        assert wait_for(lambda: sample(metrics_text(server), "pier_worker_device_bytes" + labels)
                        == GIB), metrics_text(server)
        text = metrics_text(server)
        granted = sample(text, "pier_worker_granted_bytes" + labels)
        assert sample(text, "pier_worker_device_unaccounted_bytes" + labels) == GIB - granted
        gpu = '{gpu="0",mig="",uuid="GPU-e2e"}'
        assert sample(text, "pier_gpu_utilization_ratio" + gpu) == 0.35
        assert sample(text, "pier_gpu_memory_used_bytes" + gpu) == 20 * GIB
        dcgm = ('{gpu="0",UUID="GPU-e2e",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",'
                f'Hostname="{socket.gethostname()}",GPU_I_ID=""}}')
        assert sample(text, "DCGM_FI_DEV_GPU_UTIL" + dcgm) == 35
        assert sample(text, "DCGM_FI_DEV_FB_USED" + dcgm) == 20 * 1024
        assert sample(text, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" + dcgm) == 2
        assert sample(text, f'pier_gpu_process_memory_bytes{{gpu="0",uuid="GPU-e2e",pid="{pid}"}}') \
            == GIB
        # 35% busy: the period sits between the bounds, 50 + 0.35 x 1000 ms.
        assert sample(text, "pier_gpu_telemetry_period_seconds") == 0.4
        assert sample(text, 'pier_memory_pressure_index{device="cpu"}') == 0
        assert worker(server)["restarts"] == 0
    finally:
        server.stop_and_check()


def test_a_worker_nvml_sees_leaking_device_memory_is_restarted(tmp_path):
    server, path = start(tmp_path, SCRIPT, ["--worker-leak-margin", "64MiB"])
    try:
        pid = worker(server)["pid"]
        # Its first reading once ready was 0 (not listed): 4 GiB is past 0 + 64 MiB.
        time.sleep(0.5)
        path.write_text(SCRIPT.replace("gpu0.processes=1:1048576",
                                       f"gpu0.processes={pid}:{4 * GIB}"))
        assert wait_for(lambda: worker(server)["restarts"] >= 1, timeout=30), worker(server)
        why = worker(server)["last_failure"]
        assert "leaking: device memory 4.0 GiB (NVML)" in why, why
        assert "plus the margin of 64.0 MiB" in why, why
        assert wait_for(lambda: worker(server)["state"] == "ready"), worker(server)
        assert worker(server)["pid"] != pid
        status, body = call(server, "POST", "/v1/completions",
                            {"model": server.model_id, "prompt": "Hi", "max_tokens": 2})
        assert status == 200, body
    finally:
        server.stop_and_check()


def test_without_nvml_the_server_says_so_once_and_exports_no_gpu_series(tmp_path):
    env = {"LD_LIBRARY_PATH": "/nonexistent"}
    server = PierServer([], env=env)
    try:
        text = metrics_text(server)
        assert "pier_gpu_" not in text and "DCGM_" not in text
        log = server.log()
        assert log.count("GPU telemetry: NVML is not available") == 1, log
    finally:
        server.stop_and_check()
    off = PierServer(["--gpu-telemetry", "off"],
                     env=fake_nvml_env(tmp_path / "nvml.txt", SCRIPT))
    try:
        assert "pier_gpu_" not in metrics_text(off)
        assert "GPU telemetry" not in off.log()
    finally:
        off.stop_and_check()


def test_pier_devices_lists_each_gpu_and_its_mig_instances(tmp_path):
    # Two GPUs as NVML reports them (the stand-in library): the second partitioned into two
    # MIG instances, one slot empty. `pier devices` names each as the cuda:N a model's
    # device: takes, with its UUID and memory, and each MIG instance a worker's gpu: takes.
    script = """driver=550.54.15
devices=2
gpu0.name=NVIDIA H100 80GB HBM3
gpu0.uuid=GPU-aaaa
gpu0.mem_total=85899345920
gpu0.mem_used=21474836480
gpu1.name=NVIDIA A100-SXM4-40GB
gpu1.uuid=GPU-bbbb
gpu1.mem_total=42949672960
gpu1.mem_used=0
gpu1.mig_devices=2
gpu1.mig0.uuid=MIG-1111
gpu1.mig0.gi=3
gpu1.mig0.mem_total=10737418240
gpu1.mig0.mem_used=0
gpu1.mig1.uuid=MIG-2222
gpu1.mig1.gi=5
gpu1.mig1.mem_total=5368709120
gpu1.mig1.mem_used=0
"""
    env = dict(os.environ, **fake_nvml_env(tmp_path / "nvml.txt", script))
    out = subprocess.run([PIER_BINARY, "devices", "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["nvml"] == {"driver_version": "550.54.15", "unavailable_reason": ""}
    gpus = info["gpus"]
    assert [g["device"] for g in gpus] == ["cuda:0", "cuda:1"]
    assert gpus[0]["name"] == "NVIDIA H100 80GB HBM3" and gpus[0]["uuid"] == "GPU-aaaa"
    assert gpus[0]["memory_total_bytes"] == 80 * GIB
    assert gpus[0]["memory_free_bytes"] == 60 * GIB
    assert gpus[0]["mig_enabled"] is False and gpus[0]["mig"] == []
    assert gpus[1]["mig_enabled"] is True
    assert gpus[1]["mig"] == [
        {"uuid": "MIG-1111", "gpu_instance": 3, "memory_total_bytes": 10 * GIB},
        {"uuid": "MIG-2222", "gpu_instance": 5, "memory_total_bytes": 5 * GIB},
    ]
    # The text form says the same, and still why the CUDA plugin does or does not run.
    text = subprocess.run([PIER_BINARY, "devices"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert text.returncode == 0, text.stderr
    assert "cuda:1  NVIDIA A100-SXM4-40GB  GPU-bbbb  40.0 GiB" in text.stdout, text.stdout
    assert "MIG-2222  GPU instance 5  5.0 GiB" in text.stdout, text.stdout
    assert "cuda:  " in text.stdout


def test_pier_devices_without_nvml_says_why(tmp_path):
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path))  # no libnvidia-ml.so.1 there
    out = subprocess.run([PIER_BINARY, "devices", "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["gpus"] == [], info
    assert info["nvml"]["unavailable_reason"] != "", info
