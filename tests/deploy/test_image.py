"""The container image's root (deploy/image/build --root-only): built offline from the base
root scripts/bootstrap caches, it holds every library pier needs, and `pier serve` started
in it (chroot, with /proc and /sys mounted as a container runtime would) with the
arguments and the models.yaml of deploy/k8s reaches its listening line and answers /health
and a completion. Needs root (chroot, mount), as the image build does."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "deploy" / "image" / "build"
MODEL = Path(os.environ.get("PIER_MODEL",
                            ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))


def deployment_args():
    deployment = yaml.safe_load((ROOT / "deploy/k8s/base/deployment.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return container["command"], [str(a) for a in container["args"]]


@pytest.fixture
def image_root():
    if os.geteuid() != 0:
        pytest.skip("the image build needs root (chroot, mount): not run as a normal user")
    root = Path(tempfile.mkdtemp(prefix="pier-image-root-", dir="/var/tmp"))
    mounts = []
    try:
        result = subprocess.run([str(BUILD), "--root-only", "--offline", "--root", str(root)],
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        for kind, target in (("proc", "proc"), ("sysfs", "sys")):
            subprocess.run(["mount", "-t", kind, kind, str(root / target)], check=True)
            mounts.append(root / target)
        yield root
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", str(m)])
        shutil.rmtree(root, ignore_errors=True)


def test_pier_serves_from_the_image_root_with_the_manifests_arguments(image_root):
    assert (image_root / "usr/local/bin/pier").exists()
    assert not list(image_root.glob("var/cache/apt/archives/*.deb")), "package cache left in"
    # The manifests' models.yaml and arguments, on another port.
    shutil.copy(ROOT / "deploy/k8s/common/models.yaml", image_root / "etc/pier/models.yaml")
    config = yaml.safe_load((image_root / "etc/pier/models.yaml").read_text())
    model_path = config["models"][0]["path"]
    shutil.copy(MODEL, image_root / model_path.lstrip("/"))
    command, args = deployment_args()
    assert command == ["pier"]
    port = args[args.index("--port") + 1]
    args[args.index("--port") + 1] = "0"
    args[args.index("--host") + 1] = "127.0.0.1"
    threads = ["--threads", "1"]  # the manifests ask for 4: this machine may have fewer
    log = tempfile.TemporaryFile(mode="w+")  # a pipe read only at the end could fill up
    proc = subprocess.Popen(["chroot", str(image_root), "/usr/bin/env",
                             "PATH=/usr/local/bin:/usr/bin:/bin", *command, *args, *threads],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        deadline = time.monotonic() + 120
        listening = None
        while time.monotonic() < deadline and listening is None:
            line = proc.stdout.readline()
            if not line:
                break
            listening = re.match(r"pier serve: listening on (http://\S+) \(model (\S+)\)", line)
        log.seek(0)
        assert listening, f"no listening line (manifests' port {port}): {log.read()}"
        base, model = listening.group(1), listening.group(2)
        assert model == config["models"][0]["name"]
        with urllib.request.urlopen(base + "/health", timeout=10) as r:
            assert r.status == 200
        request = urllib.request.Request(
            base + "/v1/completions", method="POST",
            data=json.dumps({"model": model, "prompt": "Hello", "max_tokens": 3}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as r:
            body = json.load(r)
        assert body["usage"]["completion_tokens"] == 3, body
    finally:
        proc.terminate()
        proc.wait(timeout=60)
