"""Pier's Kubernetes manifests (deploy/k8s): deploy/check passes on them and catches a broken
field by its path, and the manifests use only flags and settings `pier serve` has. Needs
kubectl (from $KUBECTL or PATH; the tests skip, saying so, without it) and the pier binary
($PIER_BINARY, default build/pier)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "deploy" / "check"
K8S = ROOT / "deploy" / "k8s"


@pytest.fixture(scope="module")
def kubectl():
    path = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not path or not shutil.which(path):
        pytest.skip("kubectl not found (set KUBECTL or put it on PATH): manifests not rendered")
    return path


def run_check(kubectl, k8s_dir):
    return subprocess.run([sys.executable, str(CHECK), str(k8s_dir)], capture_output=True,
                          text=True, env={**os.environ, "KUBECTL": kubectl}, timeout=120)


def test_check_passes_on_the_manifests(kubectl):
    result = run_check(kubectl, K8S)
    assert result.returncode == 0, result.stdout + result.stderr
    for target in ("base", "overlays/volcano", "overlays/hpa"):
        assert f"ok {target}:" in result.stdout


@pytest.mark.parametrize("file, old, new, expected", [
    ("base/deployment.yaml", "containerPort: 8080", 'containerPort: "eight"',
     "base: Deployment/pier: spec.template.spec.containers[0].ports[0].containerPort: "),
    ("base/deployment.yaml", "terminationGracePeriodSeconds: 45",
     "terminationGracePeriodSeconds: 20",
     "base: Deployment/pier: spec.template.spec.terminationGracePeriodSeconds: "),
    ("overlays/volcano/queue.yaml", "weight: 4", "weight: four",
     "overlays/volcano: Queue/pier: spec.weight: "),
])
def test_check_names_the_broken_field(kubectl, tmp_path, file, old, new, expected):
    k8s = tmp_path / "k8s"
    shutil.copytree(K8S, k8s)
    text = (k8s / file).read_text()
    assert text.count(old) == 1, f"{old!r} is no longer in {file}: update this test"
    (k8s / file).write_text(text.replace(old, new))
    result = run_check(kubectl, k8s)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"FAIL {expected}" in result.stdout, result.stdout


def help_has_flag(help_text, flag):
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is not None


def test_manifests_use_the_servers_flags(kubectl):
    binary = os.environ.get("PIER_BINARY", str(ROOT / "build" / "pier"))
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True,
                               check=True, timeout=30).stdout
    rendered = subprocess.run([kubectl, "kustomize", str(K8S / "base")], capture_output=True,
                              text=True, check=True, timeout=60).stdout
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "serve"
    flags = [a.split("=", 1)[0] for a in args if a.startswith("-")]
    assert flags, args
    for flag in flags:
        assert help_has_flag(help_text, flag), f"`pier serve --help` has no {flag}"

    # The model repository's settings are flags' names with underscores (pier serve --config).
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap"]
    for key in yaml.safe_load(config_map["data"]["models.yaml"]):
        if key != "models":
            assert help_has_flag(help_text, "--" + key.replace("_", "-")), \
                f"models.yaml: `pier serve --help` has no setting {key}"

    port = int(args[args.index("--port") + 1])
    names = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe_port = container[probe]["httpGet"]["port"]
        assert names.get(probe_port, probe_port) == port, f"{probe} port {probe_port}"
