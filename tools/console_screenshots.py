#!/usr/bin/env python3
"""The screenshots of the web console in docs/console/ (issue #47), taken from a server at work.

    .venv/bin/python tools/console_screenshots.py [--out docs/console] [--pier build/pier]

A picture of an idle server shows empty tables and a flat chart, so this script first gives
the server something to do, then photographs each view while it does it:
  1. starts `pier serve --port 0` with two LLMs (smol; gemma, at a higher model priority) and
     an embedding model (minilm) in the server's process (`workers:` is server-wide, not per
     model), a text pipeline over them (topic -> sentence by smol -> its embedding), API keys
     of a few tenants (one allowed only 2 requests at once), per-class SLO targets, and a
     memory budget (540 MiB) only a little above what the models hold at rest (498 MiB): the
     LLMs' elastic KV is lent, refused and reclaimed between them (the device bar shows KV and
     lent bytes, the events kv_reclaim and allocation_refused);
  2. runs load from threads: streamed chats on smol and streamed completions on gemma (gemma's
     file has no chat template) with long outputs (ignore_eos), more than each engine runs at
     once, in several classes and tenants (the queues by class fill); embeddings in batches;
     the pipeline; bursts from the limited key (429s); and, 10 s in, gemma unloaded (its
     streams in flight get the unload grace) and loaded again through the admin routes;
  3. while it runs, opens /ui in Debian's headless Chromium (selenium, the driver's path given,
     Selenium Manager offline) with a 1280x800 viewport, and saves one PNG per view, each once
     its data shows: models, requests, events (with the unload, the load and refusals),
     pipelines, the playground after a chat on smol and an embedding similarity, and last
     devices, once the memory history holds 70 s of samples;
  4. stops the load and the server (SIGTERM) and checks that it exited with 0.
It takes about 90 s (more on a busy machine). Any failure (the server, a view that never showed
its data, the browser) exits 1 saying what, and keeps the temporary folder with the config and
the server's log (--keep keeps it after a success too). Figures the page shows as null, NaN or
undefined, and the browser console's errors, are printed as warnings.
"""

import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

# Selenium Manager (which could download a browser or driver) must never go online.
os.environ["SE_OFFLINE"] = "true"

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
VIEWS = ["models", "requests", "events", "pipelines", "playground", "devices"]  # devices last
LISTENING = re.compile(r"^pier serve: listening on http://(?P<host>[^ ]+):(?P<port>\d+) ")
# Each key's tenant shows in the live requests; batch's max_concurrent makes 429s on purpose.
KEYS = {"team-a": "sk-team-a", "team-b": "sk-team-b", "search": "sk-search", "batch": "sk-batch"}
PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Explain, step by step and at length, how a memory allocator hands out pages.",
    "Describe a walk through a busy harbour town at dawn, in great detail.",
    "List and explain many ways to make a slow web service faster.",
    "Tell the history of the bicycle as a long essay.",
]
TEXTS = ["The cat sat on the mat.", "A kitten is sitting on a rug.", "Ships leave the harbour.",
         "Memory is lent between models.", "The queue grows when the engine is full.",
         "Pier serves models over HTTP.", "A lighthouse stands on the rock.", "Tokens per second."]


class Failure(Exception):
    """What went wrong, said to the user; the script exits 1."""


def log(message):
    print(f"console_screenshots: {message}", flush=True)


# --- the server --------------------------------------------------------------------------------


def write_files(folder, models_dir, budget):
    """The models config and the API keys file; returns (config path, keys path)."""
    paths = {name: os.path.join(models_dir, file) for name, file in [
        ("smol", "SmolLM2-135M-Instruct.Q4_1.gguf"), ("gemma", "gemma-3-270m-q4_k_m.gguf"),
        ("minilm", "all-MiniLM-L6-v2.Q8_0.gguf")]}
    for path in paths.values():
        if not os.path.exists(path):
            raise Failure(f"{path} is missing: run scripts/bootstrap")
    # max_seqs below the streams sent to each LLM, so that some wait in the queue by class;
    # kv_idle_release long, so that KV lent to an idle model stays lent until it is reclaimed;
    # gemma's priority above smol's, so that under the tight budget busy smol's KV yields to
    # gemma (a busy model yields only to a higher-priority one): kv_reclaim events. smol's KV
    # stops at 1280 tokens (28 MiB): a load takes only free memory (it reclaims no lent KV),
    # so smol must not grow into all of gemma's while gemma is unloaded, or gemma's load fails.
    config = os.path.join(folder, "models.yaml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"""kv_policy: elastic
kv_idle_release: 600
memory_budget: {budget}
# Targets this small CPU meets only part of the time: the SLO column shows attainment.
class_ttft_ms: "high=5000,normal=10000,low=20000"
class_tpot_ms: "high=150,normal=300,low=600"
models:
  - {{name: smol, path: {paths['smol']}, ctx: 1024, kv_max: 1280, max_seqs: 4}}
  - {{name: gemma, path: {paths['gemma']}, ctx: 1024, kv_max: 4096, max_seqs: 3,
     priority: 10}}
  - {{name: minilm, path: {paths['minilm']}, aliases: [text-embedding-minilm]}}
# A text pipeline over the same models, so that the pipelines view has stages at work and the
# live requests a stage column: a topic -> a sentence by smol -> its embedding by minilm.
pipelines:
  - name: describe
    inputs: [{{name: topic, datatype: BYTES, shape: [1]}}]
    outputs: [{{name: sentence, datatype: BYTES}}, {{name: vector, datatype: FP32}}]
    max_inflight: 4
    steps:
      - {{name: prompt, processor: template, template: "Write one sentence about {{topic}}.",
         inputs: {{topic: topic}}, outputs: {{text: prompt}}}}
      - {{name: write, model: smol, max_tokens: 48, temperature: 0.7,
         inputs: {{prompt: prompt}}, outputs: {{text: sentence}}}}
      - {{name: embed, model: minilm, inputs: {{text: sentence}}, outputs: {{embedding: vector}}}}
""")
    keys = os.path.join(folder, "keys.yaml")
    with open(keys, "w", encoding="utf-8") as f:
        f.write("keys:\n")
        for tenant, key in KEYS.items():
            limit = ", max_concurrent: 2, max_priority: low" if tenant == "batch" else ""
            f.write(f"  - {{key: {key}, tenant: {tenant}{limit}}}\n")
    return config, keys


class Server:
    """`pier serve` on a free port; its stdout and stderr go to a log file."""

    def __init__(self, pier, config, keys, threads, folder):
        self.log_path = os.path.join(folder, "server.log")
        self._log = open(self.log_path, "w", encoding="utf-8")
        args = [pier, "serve", "--config", config, "--api-keys", keys, "--port", "0",
                "--threads", str(threads)]
        log("starting " + " ".join(args))
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        lines = queue.Queue()

        def pump():  # keeps the pipe drained for the server's whole life
            for line in self.proc.stdout:
                self._log.write(line)
                self._log.flush()
                lines.put(line)

        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + 120
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise Failure(f"no 'listening' line from pier serve within 120 s "
                              f"(log: {self.log_path})") from None
            match = LISTENING.match(line)
            if match:
                self.base_url = f"http://{match['host']}:{match['port']}"
                break
            if self.proc.poll() is not None and lines.empty():
                raise Failure(f"pier serve exited with {self.proc.returncode} before listening:\n"
                              + self.tail())

    def tail(self, n=20):
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def check_alive(self):
        if self.proc.poll() is not None:
            raise Failure(f"pier serve exited with {self.proc.returncode} during the run:\n"
                          + self.tail())

    def stop(self):
        """SIGTERM, then its exit status (0 expected); SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise Failure("pier serve did not exit within 30 s of SIGTERM") from None
        return self.proc.returncode


def http(base_url, method, path, body=None, key=None, timeout=60):
    """(status, parsed JSON or None) of one request; status 0 when the server is unreachable."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base_url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        text, status = error.read(), error.code
    except (urllib.error.URLError, OSError):
        return 0, None
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, None


def model_states(base_url):
    status, body = http(base_url, "GET", "/admin/models")
    if status != 200 or not body:
        return {}
    return {m["id"]: m["pier"]["state"] for m in body["data"]}


def wait_until(condition, timeout_s, what, interval=0.25):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise Failure(f"{what}: not within {timeout_s:.0f} s")


# --- the load ----------------------------------------------------------------------------------


class Load:
    """Threads that keep the server busy until stop(); counts what they got, by kind."""

    def __init__(self, base_url):
        self.base_url = base_url
        self.stopping = threading.Event()
        self.gemma_paused = threading.Event()
        self.lock = threading.Lock()
        self.counts = {}  # (kind, outcome) -> n
        self.tokens = {"smol": 0, "gemma": 0}
        self.threads = []

    def count(self, kind, outcome, n=1):
        with self.lock:
            self.counts[(kind, outcome)] = self.counts.get((kind, outcome), 0) + n

    def spawn(self, target, *args):
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    def start(self):
        rng = random.Random(47)
        # smol runs 4 sequences at once and gemma 3: six and five streams keep both full and
        # their queues non-empty, in several classes and tenants.
        for i in range(6):
            self.spawn(self.stream_loop, "smol", ["team-a", "team-b"][i % 2],
                       ["normal", "high", "low"][i % 3], rng.randrange(1000))
        # A busy model's KV yields only to as urgent work (the class of its running requests)
        # of a higher-priority model: gemma runs high-class work too, so it can reclaim.
        for i in range(5):
            self.spawn(self.stream_loop, "gemma", ["team-b", "team-a"][i % 2],
                       ["high", "normal", "low"][i % 3], rng.randrange(1000), i > 0)
        self.spawn(self.embed_loop)
        self.spawn(self.batch_loop)
        for seed in range(2):
            self.spawn(self.pipeline_loop, seed)

    def stop(self, timeout_s=20):
        """Ends the load: streams close their connections at their next event."""
        self.stopping.set()
        deadline = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))

    def stream_once(self, model, tenant, priority, rng):
        """One streamed chat (smol) or completion (gemma, which has no chat template)."""
        body = {"model": model, "stream": True, "max_tokens": rng.randint(200, 400),
                "ignore_eos": True, "temperature": 0.8, "priority": priority}
        prompt = rng.choice(PROMPTS)
        if model == "smol":
            path = "/v1/chat/completions"
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            path = "/v1/completions"
            body["prompt"] = prompt + "\n\n"
        request = urllib.request.Request(
            self.base_url + path, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {KEYS[tenant]}"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                for line in response:
                    if self.stopping.is_set():
                        return "stopped"  # closing the connection ends the stream
                    if line.startswith(b"data: {"):
                        with self.lock:
                            self.tokens[model] += 1
            return "ok"
        except urllib.error.HTTPError as error:
            error.read()
            return f"http {error.code}"
        except (urllib.error.URLError, OSError) as error:
            return f"error {error}"

    def stream_loop(self, model, tenant, priority, seed, pausable=False):
        rng = random.Random(seed)
        time.sleep(rng.uniform(0, 2))  # staggered, so streams end at different times
        while not self.stopping.is_set():
            # While gemma is cycled, its clients hold back (as behind a balancer) but one, so
            # the events show a few refusals with their reasons rather than a flood of them.
            if pausable and self.gemma_paused.is_set():
                self.stopping.wait(0.5)
                continue
            outcome = self.stream_once(model, tenant, priority, rng)
            self.count(model, outcome)
            if outcome != "ok":
                self.stopping.wait(3)  # e.g. gemma unloaded for a moment: a few 503s, no flood

    def embed_loop(self):
        rng = random.Random(7)
        while not self.stopping.is_set():
            texts = rng.sample(TEXTS, 6)
            status, _ = http(self.base_url, "POST", "/v1/embeddings",
                             {"model": "minilm", "input": texts}, key=KEYS["search"])
            self.count("minilm", "ok" if status == 200 else f"http {status}")
            self.stopping.wait(0.4)

    def pipeline_loop(self, seed):
        rng = random.Random(seed)
        topics = ["harbours", "lighthouses", "memory budgets", "rivers", "bicycles", "queues"]
        n = 0
        while not self.stopping.is_set():
            n += 1
            status, _ = http(self.base_url, "POST", "/v1/pipelines/describe",
                             {"inputs": {"topic": rng.choice(topics)}, "priority": "high",
                              "id": f"describe-{seed}-{n}"},
                             key=KEYS["team-b"], timeout=180)
            self.count("describe", "ok" if status == 200 else f"http {status}")
            if status != 200:
                self.stopping.wait(3)

    def batch_loop(self):
        """Every ~12 s, four short requests at once from a key allowed two: two 429s."""
        while not self.stopping.wait(6):
            def one():
                status, _ = http(self.base_url, "POST", "/v1/chat/completions", {
                    "model": "smol", "max_tokens": 24, "priority": "low",
                    "messages": [{"role": "user", "content": "Name three rivers."}]},
                    key=KEYS["batch"])
                self.count("batch", "ok" if status == 200 else f"http {status}")

            burst = [threading.Thread(target=one, daemon=True) for _ in range(4)]
            for thread in burst:
                thread.start()
            for thread in burst:
                thread.join(timeout=120)
            self.stopping.wait(6)

    def summary(self):
        with self.lock:
            parts = [f"{kind} {outcome}: {n}" for (kind, outcome), n in sorted(self.counts.items())]
            return "; ".join(parts) + f"; streamed tokens smol {self.tokens['smol']}, " \
                f"gemma {self.tokens['gemma']}"


def event_counts(base_url):
    """'type n, ...' of the server's events so far (what the events view could show)."""
    status, body = http(base_url, "GET", "/admin/events?format=json&after=0")
    counts = {}
    for event in (body or {}).get("events", []):
        counts[event["type"]] = counts.get(event["type"], 0) + 1
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items())) or f"none ({status})"


def cycle_gemma(base_url, load):
    """gemma unloaded and loaded again through the admin routes (events, history, lifecycle)."""
    load.gemma_paused.set()
    try:
        began = time.monotonic()
        status, body = http(base_url, "POST", "/admin/models/gemma/unload", timeout=120)
        if status != 200:
            raise Failure(f"POST /admin/models/gemma/unload: {status} {body}")
        unloaded = time.monotonic()
        load.stopping.wait(4)  # a few seconds unloaded
        status, body = http(base_url, "POST", "/admin/models/gemma/load", timeout=180)
        if status != 200:
            raise Failure(f"POST /admin/models/gemma/load: {status} {body}")
        log(f"gemma unloaded in {unloaded - began:.1f} s (its streams in flight finishing), "
            f"loaded again in {time.monotonic() - unloaded - 4:.1f} s")
    finally:
        load.gemma_paused.clear()


# --- the browser -------------------------------------------------------------------------------


def start_browser(chromium, chromedriver):
    for path in (chromium, chromedriver):
        if not os.access(path, os.X_OK):
            raise Failure(f"{path} missing: install Debian's chromium and chromium-driver "
                          f"(scripts/bootstrap does)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise Failure("the 'selenium' package is missing: run this with .venv/bin/python "
                      "(scripts/bootstrap installs requirements.txt there)") from None
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,800", "--force-device-scale-factor=1", "--hide-scrollbars",
                "--no-first-run", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update",
                "--disable-default-apps"]:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    # The viewport itself 1280x800 (the window's size includes what headless Chrome reserves).
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1280, "height": 800, "deviceScaleFactor": 1,
                            "mobile": False})
    return driver


class Page:
    """The console open in the browser: navigation, waits, screenshots."""

    def __init__(self, driver, out):
        from selenium.webdriver.common.by import By
        self.by = By
        self.driver = driver
        self.out = out
        self.warnings = []

    def css(self, selector):
        return self.driver.find_elements(self.by.CSS_SELECTOR, selector)

    def text(self, element_id):
        found = self.driver.find_elements(self.by.ID, element_id)
        return found[0].text if found else ""

    def until(self, condition, what, timeout_s=20):
        from selenium.common.exceptions import StaleElementReferenceException

        def safe():
            try:
                return condition()
            except StaleElementReferenceException:
                return False

        try:
            return wait_until(safe, timeout_s, what, interval=0.1)
        except Failure as failure:
            body = self.text("view-" + self.current) if hasattr(self, "current") else ""
            raise Failure(f"{failure}; the view shows:\n{body[-2000:]}") from None

    def open(self, base_url):
        self.driver.get(base_url + "/ui")
        self.until(lambda: self.css("#nav-devices"), "the console's navigation (#nav-devices)")
        self.until(lambda: "live" in self.text("conn-status").lower(), "#conn-status saying live")

    def show(self, view):
        self.current = view
        self.driver.find_element(self.by.ID, f"nav-{view}").click()
        self.until(lambda: self.driver.find_element(self.by.ID, f"view-{view}").is_displayed(),
                   f"#view-{view} shown after clicking #nav-{view}")

    def shoot(self, view):
        time.sleep(1.5)  # a poll and a render, so the picture shows the view drawn
        path = os.path.join(self.out, f"{view}.png")
        if not self.driver.save_screenshot(path):
            raise Failure(f"could not save {path}")
        text = self.text(f"view-{view}")
        for word in ("null", "undefined", "NaN", "[object Object]"):
            if re.search(rf"\b{re.escape(word)}\b", text):
                self.warnings.append(f"#view-{view} shows {word!r}")
        log(f"saved {os.path.relpath(path)} ({os.path.getsize(path) // 1024} KiB)")

    def console_errors(self):
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]


def row_count(page, selector):
    return len(page.css(selector))


def take_views(page, server, started, devices_after_s):
    """One screenshot per view, each once its data shows; devices last."""
    page.show("models")
    page.until(lambda: all(page.css(f'#models-body tr[data-model="{m}"] .state-ready')
                           for m in ("smol", "gemma", "minilm")), "every model's row ready")
    # Rates come from two readings of /metrics two seconds apart. The page's tokens/s counts
    # tokens when their request finishes, so it reads 0 between finishes: wait a little for a
    # reading with one in it (smol finishes often), and take the picture anyway after 30 s.
    page.until(lambda: "tok/s" in page.text("models-body"), "a tokens/s rate in the models view")
    try:
        page.until(lambda: re.match(r"[1-9][0-9.]* tok/s", page.css(
            '#models-body tr[data-model="smol"] .col-rate')[0].text), "smol's rate", 30)
    except Failure:
        page.warnings.append("the models view shows smol at 0.0 tok/s")
    page.shoot("models")

    page.show("requests")
    page.until(lambda: row_count(page, "#requests-body tr.req-running") >= 4
               and row_count(page, "#requests-body tr") > row_count(
                   page, "#requests-body tr.req-running"),
               "running and waiting rows in the live requests")
    page.shoot("requests")

    page.show("events")
    for kind in ("model_unloaded", "model_loaded", "request_refused"):
        page.until(lambda: page.css(f'#events-body tr[data-type="{kind}"]'),
                   f"a {kind} event in the events view", timeout_s=40)
    page.shoot("events")

    page.show("pipelines")
    page.until(lambda: page.css('#pipelines [data-pipeline="describe"] .stage'),
               "the describe pipeline's stages")
    page.shoot("pipelines")

    page.show("playground")
    page.until(lambda: page.css('#chat-model option[value="smol"]'), "smol in #chat-model")
    from selenium.webdriver.support.ui import Select
    Select(page.driver.find_element(page.by.ID, "chat-model")).select_by_value("smol")
    page.driver.find_element(page.by.ID, "playground-key").send_keys(KEYS["team-a"])
    prompt = page.driver.find_element(page.by.ID, "chat-input")
    prompt.clear()
    prompt.send_keys("In two sentences, what does a lighthouse keeper do?")
    tokens = page.driver.find_element(page.by.ID, "chat-max-tokens")
    tokens.clear()
    tokens.send_keys("60")
    page.driver.find_element(page.by.ID, "chat-send").click()
    page.driver.find_element(page.by.ID, "embed-send").click()
    page.until(lambda: page.text("chat-output").strip(), "the chat's answer in #chat-output",
               timeout_s=120)
    page.until(lambda: "cosine" in page.text("embed-output"), "the similarity in #embed-output",
               timeout_s=60)
    if "HTTP" in page.text("chat-meta"):
        raise Failure(f"the playground's chat failed: {page.text('chat-meta')} "
                      f"{page.text('chat-output')}")
    page.shoot("playground")

    # The history chart needs a minute of samples (one every 2 s) to be worth a picture.
    wait = started + devices_after_s - time.monotonic()
    if wait > 0:
        log(f"waiting {wait:.0f} s more for the memory history")
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            server.check_alive()
            time.sleep(1)
    page.show("devices")
    page.until(lambda: page.css("#view-devices [data-owner][data-bytes]"), "the device bar")
    # The page asks /admin/history every 5 s: wait for a reading taken after the wait.
    samples = len((http(server.base_url, "GET", "/admin/history")[1] or {}).get("samples", []))
    if samples < 25:
        raise Failure(f"/admin/history has {samples} samples after {devices_after_s} s")
    time.sleep(5.5)
    page.until(lambda: page.css("#history canvas"), "the history chart")
    page.shoot("devices")


# --- main --------------------------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "docs", "console"),
                        help="folder for the PNGs (default docs/console)")
    parser.add_argument("--pier", default=os.path.join(REPO, "build", "pier"))
    parser.add_argument("--models", default=os.path.join(REPO, "models"),
                        help="folder holding the model files (default models/)")
    parser.add_argument("--memory-budget", default="540MiB",
                        help="tight enough that the LLMs' KV is lent and reclaimed (the three "
                             "models hold about 498 MiB at rest with this config)")
    parser.add_argument("--threads", type=int, default=2, help="compute threads per model")
    parser.add_argument("--devices-after", type=float, default=70,
                        help="seconds of load before the devices screenshot (its history)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary folder (config, server log) after a success")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    return parser.parse_args()


def run(args, folder):
    if not os.access(args.pier, os.X_OK):
        raise Failure(f"{args.pier} is not built")
    os.makedirs(args.out, exist_ok=True)
    config, keys = write_files(folder, args.models, args.memory_budget)
    server = Server(args.pier, config, keys, args.threads, folder)
    load = driver = None
    try:
        wait_until(lambda: set(model_states(server.base_url).values()) == {"ready"}, 120,
                   "every model ready")
        log(f"server at {server.base_url}; starting the load")
        load = Load(server.base_url)
        started = time.monotonic()
        load.start()
        time.sleep(10)  # the engines full, KV grown
        cycle_gemma(server.base_url, load)
        log("opening the console")
        driver = start_browser(args.chromium, args.chromedriver)
        page = Page(driver, args.out)
        page.open(server.base_url)
        take_views(page, server, started, args.devices_after)
        errors = page.console_errors()
        server.check_alive()
        log(f"load: {load.summary()}")
        log(f"events: {event_counts(server.base_url)}")
        if not any(outcome == "ok" for (kind, outcome) in load.counts if kind == "smol"):
            raise Failure(f"no smol stream completed: {load.summary()}")
        for warning in page.warnings + [f"browser console: {e}" for e in errors]:
            log(f"warning: {warning}")
    finally:
        # The server goes first: streams still waiting in its queues end with it.
        if driver is not None:
            driver.quit()
        if load is not None:
            load.stopping.set()
        code = server.stop()
        if load is not None:
            load.stop(timeout_s=10)
    if code != 0:
        raise Failure(f"pier serve exited with {code} after SIGTERM:\n{server.tail()}")


def main():
    args = parse_args()
    folder = tempfile.mkdtemp(prefix="pier-console-shots-")
    began = time.monotonic()
    try:
        run(args, folder)
    except Failure as failure:
        log(f"error: {failure}")
        log(f"server log and config kept in {folder}")
        return 1
    except Exception as error:  # selenium's and others': still a clear one-line cause
        log(f"error: {type(error).__name__}: {error}")
        log(f"server log and config kept in {folder}")
        return 1
    if args.keep:
        log(f"server log and config kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    log(f"done in {time.monotonic() - began:.0f} s: {', '.join(v + '.png' for v in VIEWS)} "
        f"in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
