"""The Grafana dashboard deploy/grafana/pier.json (issue #22) against a live server.

One `pier serve --workers on` with class SLO targets and the stand-in NVML library
(tests/metrics/fake_nvml.cpp, one GPU) serves one chat completion; then every metric name the
dashboard queries (panel targets and template variables) must be in its /metrics, and every
label a selector matches on or an aggregation groups by must be one of that family's labels (or
one Prometheus adds when it scrapes). A name that only appears after minutes is in ALLOWLIST,
with the reason, and must then be documented in docs/metrics.md and registered in src/
instead. The dashboard's structure is checked too (JSON model, unique ids, the ${datasource}
variable everywhere, targets with expr and refId, grid within 24 columns), and broken copies of
it must fail the check.

The stand-in library comes from $PIER_FAKE_NVML_DIR (set by the suite's ctest environment), else
the build's tests/metrics/fake_nvml (conftest.fake_nvml_env); it missing is a failure."""

import json
import re
import time
from pathlib import Path

import pytest

from conftest import PierServer, call, fake_nvml_env, metrics_text

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "pier.json"
# Where an allowlisted name must be documented: the reference list of what Pier exports.
DOCS = (REPO / "docs" / "metrics.md",)

# Names the dashboard queries that a server a few seconds old does not export yet.
ALLOWLIST = {
    "pier_demand_forecast_requests_per_second":
        "absent until the model has five minutes of demand history (ForecastRate)",
    "pier_demand_forecast_tokens_per_second":
        "absent until the model has five minutes of demand history (ForecastRate)",
}

# What issue #22 asks the dashboard to show; a name ending in '*' is a prefix.
REQUIRED = [
    "pier_model_state", "pier_worker_up", "pier_worker_restarts_total",
    "pier_memory_owner_used_bytes", "pier_memory_used_bytes", "pier_memory_budget_bytes",
    "pier_memory_pressure_index", "pier_memory_guaranteed_bytes", "pier_memory_lent_bytes",
    "pier_memory_reclaims_in_progress", "pier_memory_waiting_allocations",
    "pier_worker_device_unaccounted_bytes",
    "pier_kv_blocks_used", "pier_kv_blocks_total", "pier_kv_cache_usage_ratio",
    "pier_kv_cache_reclaims_total", "pier_worker_kv_lent_bytes",
    "pier_num_requests_waiting", "pier_qos_queued_sequences", "pier_qos_slo_attainment_ratio",
    "pier_qos_tenant_*",
    "pier_generation_tokens_total", "pier_prompt_tokens_total",
    "pier_time_to_first_token_seconds_bucket", "pier_time_per_output_token_seconds_bucket",
    "pier_demand_requests_per_second", "pier_demand_forecast_requests_per_second",
    "pier_gpu_utilization_ratio", "pier_gpu_memory_used_bytes", "pier_gpu_memory_total_bytes",
    "pier_gpu_memory_pressure_index", "pier_gpu_temperature_celsius", "pier_gpu_power_watts",
    "pier_gpu_xid_errors_total", "pier_gpu_telemetry_period_seconds",
]

# Labels Prometheus (and the ServiceMonitor in deploy/k8s) attaches to scraped series; Pier's own
# `instance` label is stored as `exported_instance` unless the scrape honours labels.
SCRAPE_LABELS = {"job", "instance", "exported_instance", "namespace", "pod", "service",
                 "endpoint", "container"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# One GPU with every reading the stand-in library offers, and one (non-critical for any worker:
# the workers run on the CPU) XID event so that pier_gpu_xid_errors_total has a series.
NVML_SCRIPT = """\
driver=550.54.15
devices=1
gpu0.name=NVIDIA H100 80GB HBM3
gpu0.uuid=GPU-00000000-1111-2222-3333-444444444444
gpu0.util=35
gpu0.mem_util=10
gpu0.mem_total=85899345920
gpu0.mem_used=21474836480
gpu0.temperature=51
gpu0.power_mw=250000
gpu0.sm_clock=1980
gpu0.mem_clock=2619
gpu0.ecc_corrected=3
gpu0.ecc_uncorrected=0
gpu0.processes=4242:1073741824
gpu0.pcie_tx=1000
gpu0.pcie_rx=2000
gpu0.xids=13
"""

# --- The check, on any dashboard and any /metrics page ---------------------------------------

STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
METRIC = re.compile(r"(?<![A-Za-z0-9_:$])((?:pier_|DCGM_|vllm:)[A-Za-z0-9_:]*)")
SELECTOR = re.compile(r'(?<![A-Za-z0-9_:$])([A-Za-z_:][A-Za-z0-9_:]*)\s*'
                      r'\{((?:[^}"]|"(?:[^"\\]|\\.)*")*)\}')
MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*"')
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s")
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="(?:[^"\\]|\\.)*"')


def metric_names(expr):
    """The Pier, DCGM and vLLM metric names a PromQL expression (or a Grafana variable query such
    as label_values(...)) mentions, string literals left out."""
    return set(METRIC.findall(STRING.sub('""', expr)))


def parse_exposition(text):
    """{family: {"type": type or None, "labels": set of label names}} from Prometheus' text
    format; a histogram's _bucket/_sum/_count samples count under the histogram."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 4:
                families.setdefault(parts[2], {"labels": set()})["type"] = parts[3]
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        name = family_of(match[1], families) or match[1]
        entry = families.setdefault(name, {"type": None, "labels": set()})
        entry["labels"].update(LABEL.findall(match[2] or ""))
    return families


def family_of(name, families):
    """The family a queried name belongs to, or None when /metrics has no such name."""
    if name in families:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and families.get(base, {}).get("type") in ("histogram",
                                                                             "summary"):
            return base
    return None


def dashboard_queries(dashboard):
    """(where, PromQL) of every panel target (rows' nested panels included) and template
    variable query of a Grafana dashboard."""
    queries = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                where = (f"panel {panel.get('id')} {panel.get('title')!r} "
                         f"target {target.get('refId')}")
                queries.append((where, target.get("expr", "")))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        queries.append((f"variable {variable.get('name')}", query))
        if variable.get("definition"):
            queries.append((f"variable {variable.get('name')} definition", variable["definition"]))
    return queries


def registered_in_source(name):
    """Whether src/ spells `name` as a string literal (where a family is registered)."""
    literal = f'"{name}"'
    for path in (REPO / "src").rglob("*"):
        if path.suffix in (".cpp", ".h") and literal in path.read_text(errors="replace"):
            return True
    return False


def dashboard_problems(dashboard, exposition, docs_text, allowlist=ALLOWLIST,
                       in_source=registered_in_source):
    """What is wrong with the metric names and labels the dashboard queries, given a /metrics
    page: [] when nothing is."""
    families = parse_exposition(exposition)
    problems = []
    for where, expr in dashboard_queries(dashboard):
        names = metric_names(expr)
        known_labels = set()
        labels_complete = bool(names)
        for name in sorted(names):
            if name in allowlist:
                labels_complete = False
                word = rf"(?<![A-Za-z0-9_:]){re.escape(name)}(?![A-Za-z0-9_:])"
                if not re.search(word, docs_text):
                    problems.append(f"{where}: allowlisted {name} is not documented in "
                                    f"docs/metrics.md")
                if not in_source(name):
                    problems.append(f"{where}: allowlisted {name} is not registered in src/")
                continue
            family = family_of(name, families)
            if family is None:
                problems.append(f"{where}: {name} is not in /metrics")
                labels_complete = False
                continue
            labels = families[family]["labels"] | ({"le"} if name.endswith("_bucket") else set())
            known_labels |= labels
            for selector_name, matchers in SELECTOR.findall(expr):
                if selector_name != name:
                    continue
                for label in MATCHER.findall(matchers):
                    if label not in labels | SCRAPE_LABELS:
                        problems.append(f"{where}: {name} has no label {label!r} "
                                        f"(it has {sorted(labels)})")
        if labels_complete:
            for group in GROUPING.findall(STRING.sub('""', expr)):
                for label in filter(None, (l.strip() for l in group.split(","))):
                    if label not in known_labels | SCRAPE_LABELS:
                        problems.append(f"{where}: grouping by {label!r}, a label none of "
                                        f"{sorted(names)} has")
    return problems


def dashboard_names(dashboard):
    return set().union(*(metric_names(expr) for _, expr in dashboard_queries(dashboard)))


def load_dashboard():
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def docs_text():
    return "\n".join(path.read_text(encoding="utf-8") for path in DOCS)


# --- The live server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live_metrics(tmp_path_factory):
    """/metrics of a server with workers, SLO targets and a GPU, after one chat completion,
    once every name the dashboard queries (less the allowlist) is there or 15 s have passed."""
    env = fake_nvml_env(tmp_path_factory.mktemp("nvml") / "nvml.txt", NVML_SCRIPT)
    server = PierServer(["--workers", "on", "--class-ttft-ms", "critical=500,normal=2000",
                         "--class-tpot-ms", "normal=200"], env=env)
    try:
        status, body = call(server, "POST", "/v1/chat/completions", {
            "model": server.model_id, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Say hello."}]})
        assert status == 200, f"{body}\n{server.log()}"
        wanted = dashboard_names(load_dashboard()) - set(ALLOWLIST)
        deadline = time.monotonic() + 15
        while True:
            text = metrics_text(server)
            families = parse_exposition(text)
            missing = {n for n in wanted if family_of(n, families) is None}
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        yield text
    finally:
        server.stop_and_check()


# --- Tests ---------------------------------------------------------------------------------------


def test_dashboard_structure():
    dashboard = load_dashboard()  # valid JSON, or this raises
    assert dashboard["schemaVersion"] == 39
    assert dashboard.get("uid") and dashboard.get("title")

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("model", "tenant"):
        assert variables[name]["type"] == "query"
        assert variables[name]["datasource"]["uid"] == "${datasource}"
    model_query = variables["model"]["query"]
    model_query = model_query["query"] if isinstance(model_query, dict) else model_query
    assert model_query == "label_values(pier_model_state, model)"

    panels = []

    def walk(items):
        for panel in items:
            panels.append(panel)
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(ids)}"
    graphs = [p for p in panels if p["type"] != "row"]
    assert 25 <= len(graphs) <= 40, f"{len(graphs)} panels"
    for panel in panels:
        what = f"panel {panel['id']} {panel.get('title')!r}"
        assert panel.get("datasource", {}).get("uid") == "${datasource}", what
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0, what
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, f"{what}: {grid}"
        if panel["type"] == "row":
            continue
        assert panel.get("targets"), f"{what} has no targets"
        ref_ids = [t.get("refId") for t in panel["targets"]]
        assert all(ref_ids) and len(ref_ids) == len(set(ref_ids)), f"{what}: refIds {ref_ids}"
        for target in panel["targets"]:
            assert target.get("expr", "").strip(), f"{what} target {target.get('refId')}: no expr"
            assert target.get("datasource", {}).get("uid", "${datasource}") == "${datasource}", what
            assert metric_names(target["expr"]), f"{what}: {target['expr']} queries no Pier metric"
        assert panel.get("fieldConfig", {}).get("defaults", {}).get("unit"), f"{what}: no unit"

    # No two panels overlap.
    cells = {}
    for panel in panels:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells.get((x, y))} and {panel['id']} overlap"
                cells[(x, y)] = panel["id"]


def test_dashboard_shows_what_the_issue_asks_for():
    names = dashboard_names(load_dashboard())
    missing = [r for r in REQUIRED
               if not (any(n.startswith(r[:-1]) for n in names) if r.endswith("*") else r in names)]
    assert not missing, f"the dashboard does not query {missing}"


def test_allowlist_is_used_and_explained():
    names = dashboard_names(load_dashboard())
    for name, reason in ALLOWLIST.items():
        assert reason, name
        assert name in names, f"{name} is allowlisted but the dashboard does not query it"


@pytest.mark.parametrize("expr, names", [
    ('histogram_quantile(0.99, sum by (le) (rate(pier_time_to_first_token_seconds_bucket'
     '{model=~"$model"}[$__rate_interval])))', {"pier_time_to_first_token_seconds_bucket"}),
    ('sum by (model) (rate(vllm:prompt_tokens_total{model_name="pier_not_a_metric"}[5m])) '
     '/ on() group_left DCGM_FI_DEV_GPU_UTIL',
     {"vllm:prompt_tokens_total", "DCGM_FI_DEV_GPU_UTIL"}),
    ("label_values(pier_model_state, model)", {"pier_model_state"}),
    ("up{job=\"pier\"} * $pier_variable", set()),
])
def test_metric_names(expr, names):
    assert metric_names(expr) == names


def test_every_dashboard_metric_is_served(live_metrics):
    problems = dashboard_problems(load_dashboard(), live_metrics, docs_text())
    assert not problems, "\n".join(problems)
    served = dashboard_names(load_dashboard()) - set(ALLOWLIST)
    assert len(served) >= 40, sorted(served)


def _replace_in_expr(dashboard, old, new):
    """Replaces `old` in the first query that has it (variables included); fails if none does."""
    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if old in target.get("expr", ""):
                    target["expr"] = target["expr"].replace(old, new)
                    return True
            if walk(panel.get("panels", [])):
                return True
        return False

    if walk(dashboard["panels"]):
        return
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict) and old in query.get("query", ""):
            query["query"] = query["query"].replace(old, new)
            return
    raise AssertionError(f"no query has {old!r}")


@pytest.mark.parametrize("old, new, complaint", [
    ("pier_kv_blocks_used", "pier_kv_block_used", "pier_kv_block_used is not in /metrics"),
    ("pier_gpu_power_watts", "pier_gpu_power_watt", "pier_gpu_power_watt is not in /metrics"),
    ("pier_time_to_first_token_seconds_bucket", "pier_time_to_first_token_bucket",
     "pier_time_to_first_token_bucket is not in /metrics"),
    ("pier_kv_blocks_used{", "pier_kv_blocks_used_bucket{",
     "pier_kv_blocks_used_bucket is not in /metrics"),  # _bucket of a gauge
    ("pier_demand_forecast_requests_per_second", "pier_demand_forecast_request_per_second",
     "pier_demand_forecast_request_per_second is not in /metrics"),  # not allowlisted
    ('pier_memory_used_bytes{device=~"$device"}', 'pier_memory_used_bytes{model=~"$model"}',
     "pier_memory_used_bytes has no label 'model'"),
    ("sum by (class) (pier_qos_queued_sequences", "sum by (tenant) (pier_qos_queued_sequences",
     "grouping by 'tenant'"),
    ("label_values(pier_model_state, model)", "label_values(pier_models_state, model)",
     "variable model: pier_models_state is not in /metrics"),
])
def test_a_broken_dashboard_fails(live_metrics, old, new, complaint):
    dashboard = load_dashboard()
    assert not dashboard_problems(dashboard, live_metrics, docs_text())
    _replace_in_expr(dashboard, old, new)
    problems = dashboard_problems(dashboard, live_metrics, docs_text())
    assert any(complaint in p for p in problems), problems


def test_a_misspelled_allowlisted_name_fails(live_metrics):
    """An allowlisted name is not looked up in /metrics, so a typo in it must be caught by the
    documentation and the source; with the typo allowlisted too, it still fails."""
    dashboard = load_dashboard()
    typo = "pier_demand_forcast_requests_per_second"
    _replace_in_expr(dashboard, "pier_demand_forecast_requests_per_second", typo)
    allowlist = {**ALLOWLIST, typo: "a typo"}
    problems = dashboard_problems(dashboard, live_metrics, docs_text(), allowlist=allowlist)
    text = "\n".join(problems)
    assert f"allowlisted {typo} is not documented in docs/metrics.md" in text, problems
    assert f"allowlisted {typo} is not registered in src/" in text, problems
