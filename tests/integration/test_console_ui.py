"""The web console (GET /ui, issue #47) in a real browser: Debian's headless Chromium driven by
its chromedriver through selenium, against a real server with two LLMs in worker processes and an
embedding model. The page loads with no console errors and every view opens (a screenshot of each
is saved as a test artifact, and into docs/console/ with PIER_UPDATE_DOCS_SCREENSHOTS=1); the
device bar's bytes per owner are /admin/models' bytes; the unload button unloads and the bytes come
back; a worker killed with SIGKILL shows in the events; a server string with HTML in it stays text;
with --admin-key the page shows nothing before the right key; when the server goes away the page
says so and recovers when it is back. Every /ui response carries the strict CSP.

Chromium and chromedriver come from Debian (scripts/bootstrap installs them); a missing one fails
these tests (never skips them), and nothing is downloaded at run time (the driver's path is given,
and Selenium Manager is told to stay offline)."""

import os
import signal
import tempfile
import time
import urllib.error
import urllib.request

import pytest

import conftest
from conftest import MINILM, PIER_BINARY, PIER_MODEL, PierServer, call, wait_for, write_config

# Selenium Manager (which could fetch a browser or driver) must never go online, even if the
# explicit paths below were ignored.
os.environ["SE_OFFLINE"] = "true"

try:
    from selenium import webdriver
    from selenium.common.exceptions import (NoAlertPresentException, StaleElementReferenceException,
                                            TimeoutException)
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError("the browser tests need the 'selenium' Python package: run scripts/bootstrap "
                      "(it installs requirements.txt into .venv/)") from error

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
GEMMA = os.path.join(os.path.dirname(PIER_MODEL), "gemma-3-270m-q4_k_m.gguf")
VIEWS = ["devices", "models", "requests", "events", "pipelines", "playground"]
ADMIN_KEY = "console-admin-key-47"
# A server string with HTML in it. Model names and aliases may use only letters, digits and
# . _ : - (the config refuses '<'), so the HTML rides in a model's file path instead: the model
# fails to load, and its path appears in its failure reason, its config and the events.
HTML = "x<img src=y onerror=alert(1)>"
# How long the page gets to show what the server already says (it polls every second).
SHOW_S = 10
REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def artifact_dir():
    """Where screenshots go: $PIER_TEST_ARTIFACTS/console, else build/test-artifacts/console."""
    root = os.environ.get("PIER_TEST_ARTIFACTS") or os.path.join(os.path.dirname(PIER_BINARY),
                                                                 "test-artifacts")
    folder = os.path.join(root, "console")
    os.makedirs(folder, exist_ok=True)
    return folder


def start_on_port(port, extra_args):
    """A server on a given port (conftest's servers take --port 0)."""
    saved = conftest.BASE_ARGS
    assert saved[:2] == ["--port", "0"], saved
    conftest.BASE_ARGS = ["--port", str(port)] + saved[2:]
    try:
        return PierServer(extra_args, with_model=False)
    finally:
        conftest.BASE_ARGS = saved


@pytest.fixture(scope="module")
def main_server():
    """smol and gemma in worker processes (`workers:` is server-wide, so both LLMs get them;
    the embedding model runs in the server's process), minilm, and an on_demand model whose file
    path carries HTML (its file is not a valid GGUF, so it fails when asked to load)."""
    for path in (GEMMA, MINILM):
        assert os.path.exists(path), f"{path} is missing: run scripts/bootstrap"
    folder = tempfile.mkdtemp(prefix="pier-console-")
    broken = os.path.join(folder, HTML + ".gguf")
    with open(broken, "wb") as f:
        f.write(b"GGUF" + b"\0" * 64)
    config = write_config(folder, f"""
workers: on
worker_heartbeat_timeout: 1
models:
  - {{name: smol, path: {PIER_MODEL}, ctx: 1024}}
  - {{name: gemma, path: {GEMMA}, ctx: 1024}}
  - {{name: minilm, path: {MINILM}, aliases: [text-embedding-minilm]}}
  - {{name: escape-check, path: "{broken}", load: on_demand}}
""")
    s = PierServer(["--config", config], with_model=False)
    yield s
    s.stop_and_check()


@pytest.fixture(scope="module")
def keyed_server():
    """A server with --admin-key; a holder, since the reconnect test replaces the server."""
    folder = tempfile.mkdtemp(prefix="pier-console-key-")
    config = write_config(folder, f"""
models:
  - {{name: hidden-model, path: {PIER_MODEL}, ctx: 1024}}
""")
    holder = {"args": ["--config", config, "--admin-key", ADMIN_KEY]}
    holder["server"] = PierServer(holder["args"], with_model=False)
    yield holder
    if holder["server"].proc.poll() is None:
        holder["server"].stop_and_check()


@pytest.fixture(scope="module")
def browser():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"{' and '.join(missing)} missing: the browser tests need Debian's chromium "
                    f"and chromium-driver packages (scripts/bootstrap installs them)",
                    pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--force-device-scale-factor=1", "--hide-scrollbars",
                "--no-first-run", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update",
                "--disable-default-apps"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


# --- helpers ---------------------------------------------------------------------------------


def console_errors(driver):
    """The browser log's SEVERE entries since the last call (reading the log empties it)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def until(driver, condition, what, timeout_s=SHOW_S):
    """Waits for `condition(driver)` to be truthy; fails naming `what` and the page's text."""
    def safe(d):
        try:
            return condition(d)
        except StaleElementReferenceException:
            return False

    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.1).until(safe)
    except TimeoutException:
        body = driver.find_element(By.TAG_NAME, "body").text[-3000:]
        raise AssertionError(f"{what}: not within {timeout_s} s; the page shows:\n{body}") from None


def css(driver, selector):
    return driver.find_elements(By.CSS_SELECTOR, selector)


def open_console(driver, server):
    driver.get(server.base_url + "/ui")
    until(driver, lambda d: css(d, "#nav-devices"), "the console's navigation (#nav-devices)")


def open_view(driver, view):
    driver.find_element(By.ID, f"nav-{view}").click()
    until(driver, lambda d: d.find_element(By.ID, f"view-{view}").is_displayed(),
          f"#view-{view} shown after clicking #nav-{view}")


def conn_status(driver):
    found = css(driver, "#conn-status")
    return found[0].text.lower() if found else ""


def model_row(driver, model):
    """The models view's row of `model` (not its buttons, which carry data-model too)."""
    for element in css(driver, f'#view-models [data-model="{model}"]'):
        if "action-" not in (element.get_attribute("class") or ""):
            return element
    return None


def state_of_row(driver, model, state):
    row = model_row(driver, model)
    return row is not None and bool(row.find_elements(By.CSS_SELECTOR, f".state-{state}"))


def page_owner_bytes(driver):
    """{owner: committed bytes} drawn in the device bars (zero-byte owners left out)."""
    shown = {}
    for element in css(driver, "#view-devices [data-owner][data-bytes]"):
        shown[element.get_attribute("data-owner")] = int(element.get_attribute("data-bytes"))
    return {owner: b for owner, b in shown.items() if b > 0}


def admin_models(server):
    status, body = call(server, "GET", "/admin/models")
    assert status == 200, body
    return body


def admin_owner_bytes(server):
    """{owner: committed bytes} of every model in /admin/models (zero-byte owners left out)."""
    return {o["owner"]: o["committed_bytes"] for m in admin_models(server)["data"]
            for o in m["pier"]["memory"]["owners"] if o["committed_bytes"] > 0}


def settled_owner_bytes(server, timeout_s=20):
    """/admin/models' owners once two reads a poll interval apart agree (the server is idle)."""
    previous = admin_owner_bytes(server)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(1.2)
        now = admin_owner_bytes(server)
        if now == previous:
            return now
        previous = now
    raise AssertionError(f"/admin/models' bytes kept changing for {timeout_s} s: {previous}")


def confirm(driver):
    """Accepts the page's confirmation: its own dialog (#confirm, whose OK is #confirm-ok), or
    window.confirm, which the contract allows too."""
    try:
        WebDriverWait(driver, 0.3).until(expected_conditions.alert_is_present()).accept()
        return
    except TimeoutException:
        pass
    until(driver, lambda d: [b for b in css(d, "#confirm-ok") if b.is_displayed()],
          "the confirmation dialog's #confirm-ok")[0].click()


def screenshot(driver, view):
    path = os.path.join(artifact_dir(), f"{view}.png")
    assert driver.save_screenshot(path), path
    if os.environ.get("PIER_UPDATE_DOCS_SCREENSHOTS") == "1":
        docs = os.path.join(REPO, "docs", "console")
        os.makedirs(docs, exist_ok=True)
        assert driver.save_screenshot(os.path.join(docs, f"{view}.png"))


def get(url):
    """(status, headers) of a plain GET."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            response.read()
            return response.status, response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.headers


# --- the tests, in the order they build on each other ------------------------------------------


def test_every_ui_response_carries_the_strict_csp(main_server):
    for path, want in [("/ui", 200), ("/ui/app.js", 200), ("/ui/app.css", 200), ("/ui/x", 404)]:
        status, headers = get(main_server.base_url + path)
        assert status == want, (path, status)
        csp = headers.get("Content-Security-Policy") or ""
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, (path, csp)
    assert "javascript" in get(main_server.base_url + "/ui/app.js")[1].get("Content-Type", "")
    assert "text/css" in get(main_server.base_url + "/ui/app.css")[1].get("Content-Type", "")


def test_the_page_loads_without_console_errors_and_every_view_opens(main_server, browser):
    console_errors(browser)  # empties the log
    open_console(browser, main_server)
    until(browser, lambda d: "live" in conn_status(d), "#conn-status saying live")
    # What each view should be showing before its screenshot is taken.
    ready = {
        "devices": lambda d: css(d, "#view-devices [data-owner][data-bytes]"),
        "models": lambda d: model_row(d, "gemma") is not None,
        "events": lambda d: css(d, "#view-events [data-type]"),
    }
    for view in VIEWS:
        open_view(browser, view)
        for other in VIEWS:
            if other != view:
                shown = browser.find_element(By.ID, f"view-{other}").is_displayed()
                assert not shown, f"#view-{other} still shown beside #view-{view}"
        if view in ready:
            until(browser, ready[view], f"#view-{view}'s content")
        time.sleep(0.5)  # a render tick, so the screenshot shows the drawn view
        screenshot(browser, view)
        # A missing figure is drawn as a dash, never as JavaScript's null, undefined or NaN.
        text = browser.find_element(By.ID, f"view-{view}").text
        for word in ("null", "undefined", "NaN", "[object Object]"):
            assert word not in text, f"#view-{view} shows {word!r}:\n{text}"
    assert console_errors(browser) == []


def test_the_playground_chats_and_compares_embeddings(main_server, browser):
    """A chat to smol answers with its timing and usage; the embedding similarity the page
    shows is the cosine of minilm's own vectors, computed here from /v1/embeddings."""
    from selenium.webdriver.support.ui import Select
    import math

    open_console(browser, main_server)
    open_view(browser, "playground")
    until(browser, lambda d: "smol" in [o.text for o in Select(d.find_element(By.ID, "chat-model")).options],
          "smol offered in #chat-model")
    Select(browser.find_element(By.ID, "chat-model")).select_by_visible_text("smol")
    box = browser.find_element(By.ID, "chat-input")
    box.clear()
    box.send_keys("Name a colour.")
    browser.find_element(By.ID, "chat-send").click()
    until(browser, lambda d: "completion" in d.find_element(By.ID, "chat-meta").text,
          "#chat-meta with the answer's usage", timeout_s=60)
    meta = browser.find_element(By.ID, "chat-meta").text
    assert " ms" in meta and "model smol" in meta, meta
    assert browser.find_element(By.ID, "chat-output").text.strip(), "an empty answer"

    a, b = "a lighthouse on a cliff", "a beacon by the sea"
    until(browser, lambda d: "minilm" in [o.text for o in Select(d.find_element(By.ID, "embed-model")).options],
          "minilm offered in #embed-model")
    Select(browser.find_element(By.ID, "embed-model")).select_by_visible_text("minilm")
    for element_id, text in (("embed-a", a), ("embed-b", b)):
        field = browser.find_element(By.ID, element_id)
        field.clear()
        field.send_keys(text)
    browser.find_element(By.ID, "embed-send").click()
    until(browser, lambda d: "cosine similarity" in d.find_element(By.ID, "embed-output").text,
          "#embed-output with the similarity", timeout_s=30)
    shown = float(browser.find_element(By.ID, "embed-output").text.split()[-1])
    status, body = call(main_server, "POST", "/v1/embeddings", {"model": "minilm", "input": [a, b]})
    assert status == 200, body
    u, v = (d["embedding"] for d in body["data"])
    expected = sum(x * y for x, y in zip(u, v)) / math.sqrt(sum(x * x for x in u) * sum(y * y for y in v))
    assert abs(shown - expected) < 1e-4, (shown, expected)
    assert console_errors(browser) == []


def test_the_device_bar_shows_the_governors_bytes_per_owner(main_server, browser):
    open_view(browser, "devices")
    want = settled_owner_bytes(main_server)
    assert any(o.startswith("smol/") for o in want) and any(o.startswith("gemma/") for o in want)
    assert any(o.startswith("minilm/") for o in want), want
    until(browser, lambda d: page_owner_bytes(d) == want,
          f"the device bar's owners equal /admin/models' {want} (the page has "
          f"{page_owner_bytes(browser)})")


def test_html_in_a_server_string_is_shown_as_text(main_server, browser):
    status, body = call(main_server, "POST", "/admin/models/escape-check/load")
    assert status != 200, body
    model = next(m for m in admin_models(main_server)["data"] if m["id"] == "escape-check")
    assert HTML in model["pier"].get("reason", ""), model
    console_errors(browser)
    open_view(browser, "models")
    until(browser, lambda d: state_of_row(d, "escape-check", "failed"),
          "escape-check's row in state-failed")
    row_text = model_row(browser, "escape-check").get_attribute("textContent")
    assert HTML in row_text, row_text
    open_view(browser, "events")
    until(browser, lambda d: any(HTML in row.get_attribute("textContent") for row in css(
        d, '#view-events [data-type="model_load_failed"]')),
          "the model_load_failed event with its HTML as text")
    # Parsed as HTML, the string would have made an <img> (and the CSP would have refused its
    # inline handler, logging an error); shown as text it made neither, and no alert fired.
    assert css(browser, 'img[src="y"]') == []
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert console_errors(browser) == []


def test_a_worker_killed_with_sigkill_shows_in_the_events(main_server, browser):
    def gemma_worker():
        model = next(m for m in admin_models(main_server)["data"] if m["id"] == "gemma")
        worker = model["pier"]["instances"][0]["worker"]
        return worker["pid"] if worker["state"] == "ready" else None

    pid = gemma_worker()
    assert pid, admin_models(main_server)
    open_view(browser, "events")
    os.kill(pid, signal.SIGKILL)

    def worker_event(kind):
        return lambda d: any("gemma" in row.get_attribute("textContent")
                             for row in css(d, f'#view-events [data-type="{kind}"]'))

    until(browser, worker_event("worker_down"), "gemma's worker_down event", timeout_s=20)
    until(browser, worker_event("worker_restarted"), "gemma's worker_restarted event", timeout_s=20)
    restarted = wait_for(lambda: gemma_worker() not in (None, pid), timeout=30)
    assert restarted, admin_models(main_server)
    open_view(browser, "models")
    until(browser, lambda d: state_of_row(d, "gemma", "ready"), "gemma ready again")


def test_the_unload_button_unloads_and_returns_the_bytes(main_server, browser):
    settled_owner_bytes(main_server)
    before = admin_models(main_server)
    smol = next(m for m in before["data"] if m["id"] == "smol")
    smol_bytes = smol["pier"]["memory"]["committed_bytes"]
    assert smol_bytes > 0, smol
    open_view(browser, "models")
    until(browser, lambda d: state_of_row(d, "smol", "ready"), "smol's row in state-ready")
    browser.find_element(By.CSS_SELECTOR, '#view-models .action-unload[data-model="smol"]').click()
    confirm(browser)
    until(browser, lambda d: state_of_row(d, "smol", "unloaded"), "smol's row in state-unloaded",
          timeout_s=30)
    after = admin_models(main_server)
    assert before["device"]["committed_bytes"] - after["device"]["committed_bytes"] == smol_bytes, (
        before["device"], after["device"], smol_bytes)
    open_view(browser, "devices")
    until(browser, lambda d: css(d, "#view-devices [data-owner][data-bytes]") and not any(
        o.startswith("smol/") for o in page_owner_bytes(d)), "smol's owners gone from the bar")


def test_with_an_admin_key_the_page_shows_nothing_before_the_right_key(keyed_server, browser):
    server = keyed_server["server"]
    status, headers = get(server.base_url + "/ui")
    assert status == 200 and "frame-ancestors 'none'" in headers.get("Content-Security-Policy", "")
    open_console(browser, server)
    until(browser, lambda d: d.find_element(By.ID, "login").is_displayed(), "the login box")
    time.sleep(1.5)  # a poll or two: nothing may arrive without the key
    assert "hidden-model" not in browser.page_source
    assert css(browser, "[data-model]") == []

    key_input = browser.find_element(By.ID, "login-key")
    key_input.send_keys("not-the-key")
    browser.find_element(By.ID, "login-submit").click()
    words = ("invalid", "wrong", "denied", "unauthori", "401", "refused", "rejected", "incorrect")
    until(browser, lambda d: any(w in d.find_element(By.ID, "login").text.lower() for w in words),
          "an error in the login box after a wrong key")
    time.sleep(1.5)
    assert browser.find_element(By.ID, "login").is_displayed()
    assert "hidden-model" not in browser.page_source
    assert css(browser, "[data-model]") == []

    key_input = browser.find_element(By.ID, "login-key")
    key_input.clear()
    key_input.send_keys(ADMIN_KEY)
    browser.find_element(By.ID, "login-submit").click()
    until(browser, lambda d: not d.find_element(By.ID, "login").is_displayed(),
          "the login box gone after the right key")
    open_view(browser, "models")
    until(browser, lambda d: model_row(d, "hidden-model") is not None, "hidden-model's row")
    # The key lives only in the page's memory: no cookie, no web storage, not in the URL.
    assert browser.get_cookies() == []
    assert browser.execute_script("return localStorage.length + sessionStorage.length") == 0
    assert ADMIN_KEY not in browser.current_url


def test_the_page_says_when_the_server_goes_away_and_recovers(keyed_server, browser):
    # Follows the previous test: the page is open on the keyed server, logged in.
    server = keyed_server["server"]
    until(browser, lambda d: "live" in conn_status(d), "#conn-status saying live")
    server.stop_and_check()
    until(browser, lambda d: "reconnecting" in conn_status(d),
          "#conn-status saying reconnecting after the server stopped", timeout_s=20)
    until(browser, lambda d: "server unreachable" in d.find_element(By.TAG_NAME, "body").text,
          "the visible 'server unreachable' banner")
    keyed_server["server"] = start_on_port(server.port, keyed_server["args"])
    # Backoff is at most 10 s between tries.
    until(browser, lambda d: "live" in conn_status(d) and "reconnecting" not in conn_status(d),
          "#conn-status live again after the server came back", timeout_s=20)
    until(browser, lambda d: "server unreachable" not in d.find_element(By.TAG_NAME, "body").text,
          "the banner gone")
    open_view(browser, "models")
    until(browser, lambda d: state_of_row(d, "hidden-model", "ready"), "hidden-model ready again")


def test_a_flood_of_events_is_sampled_and_the_page_stays_responsive(browser, tmp_path):
    """Thousands of request_refused events a second (a key past its rate, hammered from four
    threads): the events view keeps a bounded table, counts what it sampled out, and answers
    a script at once throughout."""
    import http.client
    import threading

    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - {key: sk-flood, tenant: flood, requests_per_second: 0.001}\n")
    server = PierServer(["--name", "smol", "--api-keys", str(keys)])
    try:
        open_console(browser, server)
        open_view(browser, "events")
        # Empties the log: the keyed-server tests before this one leave their expected 401s in it.
        console_errors(browser)
        body = ('{"model": "smol", "messages": [{"role": "user", "content": "Hi"}], '
                '"max_tokens": 1}')
        headers = {"Authorization": "Bearer sk-flood", "Content-Type": "application/json"}
        stop = time.monotonic() + 6
        sent = [0] * 4

        def hammer(n):
            conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
            while time.monotonic() < stop:
                conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
                conn.getresponse().read()
                sent[n] += 1

        threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        slowest = 0.0
        while any(t.is_alive() for t in threads):
            started = time.monotonic()
            rows = browser.execute_script(
                "return document.querySelectorAll('#events-body tr.event').length")
            slowest = max(slowest, time.monotonic() - started)
            assert rows <= 600, f"{rows} event rows in the DOM: the page appends without bound"
            time.sleep(0.2)
        for t in threads:
            t.join()
        published = call(server, "GET", "/admin/events?format=json&replay=0")[1]["next"]
        rate = published / 6
        assert published > 3000 and rate > 500, f"only {published} events in 6 s"

        def counter(element_id):
            return int(browser.find_element(By.ID, element_id).text.replace(",", "") or 0)

        until(browser, lambda d: counter("events-received") + counter("events-dropped") >= 0.9 *
              published, "the page's counters catching up with the server's events", timeout_s=20)
        assert counter("events-sampled") > 0 or counter("events-dropped") > 0
        rows = len(css(browser, "#events-body tr.event"))
        assert 0 < rows <= 600, rows
        assert slowest < 2.0, f"a script waited {slowest:.2f} s for the page during the flood"
        assert console_errors(browser) == []
        print(f"flood: {sum(sent)} requests, {published} events ({rate:.0f}/s), "
              f"{rows} rows kept, slowest script round trip {slowest * 1000:.0f} ms")
    finally:
        server.stop_and_check()
