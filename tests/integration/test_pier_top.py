"""`pier top` against a live server, in a real terminal: tmux runs it in an 80x30 window and
the captured screen is checked (models, memory, the GPU from the stand-in NVML library,
workers); when the server goes away the screen says so and retries, with no stack trace;
--once against nothing exits 1 with the reason."""
import shutil
import subprocess
import time
import uuid

import pytest

from conftest import PIER_BINARY, PierServer, call, fake_nvml_env



@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.fail("tmux is missing: scripts/bootstrap installs it")
    session = "pier-top-" + uuid.uuid4().hex[:8]
    yield session
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def screen(session):
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, check=True).stdout


def wait_for_screen(session, text, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = screen(session)
        if text in shown:
            return shown
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared on the screen:\n{screen(session)}")


def test_pier_top_shows_the_server_and_survives_its_loss(tmux, tmp_path):
    env = fake_nvml_env(tmp_path / "nvml.txt",
                        "devices=1\ngpu0.name=NVIDIA H100 80GB HBM3\ngpu0.uuid=GPU-top\n"
                        "gpu0.util=42\ngpu0.mem_total=85899345920\ngpu0.mem_used=21474836480\n"
                        "gpu0.temperature=55\ngpu0.power_mw=310000\n")
    server = PierServer(["--workers", "on"], env=env)
    try:
        status, _ = call(server, "POST", "/v1/completions",
                            {"model": server.model_id, "prompt": "Hello", "max_tokens": 4})
        assert status == 200
        subprocess.run(["tmux", "new-session", "-d", "-s", tmux, "-x", "80", "-y", "30",
                        f"{PIER_BINARY} top --url {server.base_url} --interval 0.5"], check=True)
        shown = wait_for_screen(tmux, "WORKER")
        lines = shown.splitlines()
        assert all(len(line) <= 80 for line in lines), shown
        assert lines[0].startswith(f"pier top  {server.base_url}"), shown
        model_line = next(l for l in lines if l.startswith(server.model_id[:21]))
        assert " ready " in model_line and " 1/1 " in model_line, shown
        assert any(l.startswith("cpu ") and "pressure" in l for l in lines), shown
        gpu_line = next(l for l in lines if l.startswith("0    NVIDIA H100"))
        assert "42%" in gpu_line and "20.0 GiB" in gpu_line and "55C" in gpu_line, shown
        assert any(l.startswith(server.model_id[:21]) and " yes " in l
                   for l in lines[lines.index(next(l for l in lines if l.startswith("WORKER"))):]), shown
    finally:
        server.stop_and_check()
    # The server is gone: one clear line, retrying, and pier top is still running.
    shown = wait_for_screen(tmux, "retrying every")
    assert "cannot read " + server.base_url + "/metrics" in shown, shown
    assert "Traceback" not in shown and "terminate called" not in shown, shown
    alive = subprocess.run(["tmux", "list-panes", "-t", tmux, "-F", "#{pane_dead}"],
                           capture_output=True, text=True)
    assert alive.stdout.strip() == "0", alive


def test_pier_top_once_against_nothing_exits_1_with_the_reason():
    result = subprocess.run([PIER_BINARY, "top", "--url", "http://127.0.0.1:9", "--once"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.startswith("pier top: cannot read http://127.0.0.1:9/metrics: "), result
    assert result.stdout == ""
    bad = subprocess.run([PIER_BINARY, "top", "--url", "https://example.com", "--once"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "--url" in bad.stderr, bad
