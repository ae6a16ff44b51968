"""Binding worker processes (`cpus`, `numa_node`, `gpu`, MPS limits; placement/placer.h): the
kernel's view of each worker (/proc/PID/status, /proc/PID/environ) is what /admin/models and
the log say; a binding outside the allowed CPUs is a config error; one the worker cannot
apply fails that model only, with the reason."""

import os
import subprocess
import tempfile

import pytest

from conftest import PIER_BINARY, PIER_MODEL, PierServer, call, write_config

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "placement", "fixtures")


def cpus_allowed(pid):
    """The worker's CPU affinity as the kernel reports it."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Cpus_allowed_list for {pid}")


def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(e.split("=", 1) for e in f.read().decode().split("\0") if "=" in e)


def instances(server, model):
    detail = call(server, "GET", "/admin/models")[1]["data"]
    return [i["worker"] for m in detail if m["id"] == model for i in m["pier"]["instances"]]


def cpu_list(cpus):
    return ",".join(str(c) for c in sorted(cpus))


def test_auto_gives_instances_disjoint_cores_and_gpu_settings_reach_the_environment():
    allowed = sorted(os.sched_getaffinity(0))
    config = write_config(tempfile.mkdtemp(prefix="pier-binding-"), f"""
workers: on
models:
  - name: alpha
    path: {PIER_MODEL}
    ctx: 512
    threads: 1
    instances: 2
    cpus: auto
    gpu: [0, MIG-4b6b1a2c-0000-5000-8000-000000000000]
    mps_thread_percentage: 30
    mps_memory_limit: 2GiB
""")
    s = PierServer(["--config", config], with_model=False)
    try:
        workers = instances(s, "alpha")
        assert len(workers) == 2
        seen = []
        for worker in workers:
            binding = worker["binding"]
            assert cpus_allowed(worker["pid"]) == binding["cpus"], binding
            seen.append(binding["cpus"])
            env = environ(worker["pid"])
            assert env["CUDA_VISIBLE_DEVICES"] == binding["gpu"]
            assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
            assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
            assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
        assert [w["binding"]["gpu"] for w in workers] == [
            "0", "MIG-4b6b1a2c-0000-5000-8000-000000000000"]
        if len(allowed) >= 2:
            # One core each while there are enough (this machine has no hyperthreads to
            # share a core, or they would be listed together).
            assert set(seen[0].split(",")).isdisjoint(seen[1].split(",")), seen
        log = s.log()
        assert "placing worker instances on this machine:" in log, log
        assert f"model alpha instance 1: cpus {seen[0]}" in log, log
        # It serves (bound to its cores).
        status, body = call(s, "POST", "/v1/completions",
                            {"model": "alpha", "prompt": "Hello", "max_tokens": 4})
        assert status == 200, body
    finally:
        s.stop_and_check()


def test_cpus_outside_the_allowed_set_are_a_config_error():
    outside = max(os.sched_getaffinity(0)) + 1
    config = write_config(tempfile.mkdtemp(prefix="pier-binding-"), f"""
workers: on
models:
  - {{name: alpha, path: {PIER_MODEL}, cpus: "{outside}"}}
""")
    run = subprocess.run([PIER_BINARY, "serve", "--config", config, "--port", "0"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run
    assert f"model alpha: cpus: {outside} is outside the CPUs this server may use" in run.stderr, \
        run.stderr


def test_binding_needs_worker_processes():
    config = write_config(tempfile.mkdtemp(prefix="pier-binding-"), f"""
models:
  - {{name: alpha, path: {PIER_MODEL}, cpus: auto}}
""")
    run = subprocess.run([PIER_BINARY, "serve", "--config", config, "--port", "0"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run
    assert "alpha): cpus, numa_node, gpu and the MPS limits bind worker processes: they need " \
           "workers: on" in run.stderr, run.stderr


def test_a_binding_the_worker_cannot_apply_fails_that_model_only():
    # Placed on a 32-CPU two-socket topology, so the config passes; the worker, on this
    # machine, cannot bind to CPUs 30-31 (unless this machine has them).
    if 31 in os.sched_getaffinity(0):
        pytest.skip("this machine has CPU 31: a binding to it would apply")
    config = write_config(tempfile.mkdtemp(prefix="pier-binding-"), f"""
workers: on
models:
  - {{name: alpha, path: {PIER_MODEL}, ctx: 512, threads: 1}}
  - {{name: beta, path: {PIER_MODEL}, ctx: 512, threads: 1, load: on_demand, cpus: "30-31"}}
""")
    s = PierServer(["--config", config, "--topology", os.path.join(FIXTURES, "two_sockets.xml")],
                   with_model=False)
    try:
        assert "2 NUMA nodes, 16 cores (32 CPUs 0-31)" in s.log()
        status, body = call(s, "POST", "/v1/completions",
                            {"model": "beta", "prompt": "Hello", "max_tokens": 4})
        assert status == 503, body
        assert "binding: cannot bind to cpus 30-31: 30-31 not on this machine" in \
            body["error"]["message"], body
        models = {m["id"]: m for m in call(s, "GET", "/v1/models")[1]["data"]}
        assert models["beta"]["pier"]["state"] == "failed", models["beta"]
        status, body = call(s, "POST", "/v1/completions",
                            {"model": "alpha", "prompt": "Hello", "max_tokens": 4})
        assert status == 200, body
    finally:
        s.stop_and_check()
