"""Fixtures for the integration tests: `pier serve` processes on free loopback ports.

The binary and the model come from the environment (set by tests/integration/CMakeLists.txt):
PIER_BINARY (the built `pier`) and PIER_MODEL (the default model). A server is started with
`--port 0`; the fixture waits for its "listening" line on stdout, which gives the real port.
At the end the server gets SIGTERM and must exit with status 0.
"""

import json
import os
import queue
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

try:
    import openai  # noqa: F401  (imported here so that a missing package fails every test)
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "the integration tests need the official 'openai' Python package: run scripts/bootstrap "
        "(it installs requirements.txt into .venv/)") from error

LISTENING = re.compile(r"^pier serve: listening on http://(?P<host>[^ ]+):(?P<port>\d+) "
                       r"\(models? (?P<model>.+)\)$")
GRPC_LISTENING = re.compile(r"^pier serve: KServe v2 gRPC on (?P<host>[^ ]+):(?P<port>\d+)$")
START_TIMEOUT_S = 120
# Every server: two compute threads and a 4096-token KV cache, like the CI machine.
BASE_ARGS = ["--port", "0", "--threads", "2", "--ctx", "4096"]


def call(server, method, path, body=None, timeout=120):
    """(status, JSON body) of one request to `server` (a PierServer)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(server.base_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def write_config(folder, text):
    """Writes `text` as models.yaml in `folder`; returns its path."""
    path = os.path.join(folder, "models.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def metrics_text(server):
    """The server's /metrics page."""
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=60) as response:
        return response.read().decode()


def wait_for(condition, timeout=30.0):
    """Polls `condition` every 50 ms until it is true (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def fake_nvml_env(script_path, script):
    """The environment for a server that reads GPUs from the stand-in libnvidia-ml.so.1
    (tests/metrics/fake_nvml.cpp) answering from `script`, written to `script_path`."""
    folder = os.environ.get("PIER_FAKE_NVML_DIR") or os.path.join(
        os.path.dirname(PIER_BINARY), "tests", "metrics", "fake_nvml")
    assert os.path.exists(os.path.join(folder, "libnvidia-ml.so.1")), \
        f"no stand-in libnvidia-ml.so.1 in {folder} (set PIER_FAKE_NVML_DIR)"
    with open(script_path, "w", encoding="utf-8") as f:
        f.write(script)
    return {"LD_LIBRARY_PATH": folder, "PIER_FAKE_NVML_SCRIPT": str(script_path)}


def hf_wordpiece_ids(texts):
    """Hugging Face's token ids of `texts` for all-MiniLM-L6-v2, from the committed fixture
    (tests/fixtures/tokenizer/wordpiece_minilm.json, made by tools/gen_wordpiece_fixture.py)."""
    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "tokenizer",
                        "wordpiece_minilm.json")
    with open(path, encoding="utf-8") as f:
        ids = {c["text"]: c["ids"] for c in json.load(f)["singles"]}
    return [ids[t] for t in texts]


def _required_env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set: run these tests through ctest "
                           f"(tests/integration/CMakeLists.txt sets it)")
    return value


PIER_BINARY = _required_env("PIER_BINARY")
PIER_MODEL = _required_env("PIER_MODEL")


class PierServer:
    """One `pier serve` process. Its stderr goes to a temporary file, shown on failure."""

    def __init__(self, extra_args=(), with_model=True, env=None):
        args = [PIER_BINARY, "serve"]
        if with_model:
            args += ["-m", PIER_MODEL]
        args += BASE_ARGS + list(extra_args)
        self.args = args
        self.stderr = tempfile.NamedTemporaryFile(prefix="pier-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
                                     env=None if env is None else {**os.environ, **env})
        self.lines = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self.host = self.port = self.model_id = self.grpc_port = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.port is None:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                raise AssertionError(f"no listening line within {START_TIMEOUT_S} s\n{self.log()}")
            if line is None:
                code = self.proc.wait()
                raise AssertionError(f"pier serve exited ({code}) before listening\n{self.log()}")
            grpc = GRPC_LISTENING.match(line.rstrip("\n"))
            if grpc:
                self.grpc_port = int(grpc["port"])
            match = LISTENING.match(line.rstrip("\n"))
            if match:
                self.host, self.port = match["host"], int(match["port"])
                self.model_id = match["model"]

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}"

    def log(self):
        with open(self.stderr.name, encoding="utf-8", errors="replace") as f:
            text = f.read()
        return f"--- pier serve stderr ({' '.join(self.args)}) ---\n{text[-4000:]}"

    def terminate(self, timeout_s=60):
        """SIGTERM; returns the exit status (None if it did not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop_and_check(self):
        code = self.terminate()
        if code is None:
            self.kill()
        assert code == 0, f"pier serve exited with {code} after SIGTERM\n{self.log()}"


# The embedding model scripts/bootstrap converts next to the default model.
MINILM = os.path.join(os.path.dirname(PIER_MODEL), "all-MiniLM-L6-v2.Q8_0.gguf")


def start_llm_and_embedder(folder, *extra_args, embedder_only=False):
    """A server with the default LLM as `smol` and all-MiniLM-L6-v2 (Q8_0) as `minilm` (alias
    text-embedding-minilm), from a models.yaml written into `folder`."""
    assert os.path.exists(MINILM), f"{MINILM} is missing: run scripts/bootstrap"
    llm = "" if embedder_only else f"""
  - name: smol
    path: {PIER_MODEL}"""
    config = write_config(str(folder), f"""
models:{llm}
  - name: minilm
    path: {MINILM}
    aliases: [text-embedding-minilm]
""")
    return PierServer(["--config", config] + list(extra_args), with_model=False)


@pytest.fixture(scope="session")
def server():
    """The shared server: default settings, open API."""
    s = PierServer()
    yield s
    s.stop_and_check()


@pytest.fixture
def start_server():
    """Starts extra servers with more flags; each is stopped (and checked) at the end."""
    started = []

    def start(*extra_args):
        s = PierServer(extra_args)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.stop_and_check()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)
