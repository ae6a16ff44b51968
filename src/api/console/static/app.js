// Pier console (issue #47): polls the admin routes, follows /admin/events, renders six views
// and runs the admin actions. No framework, no build step; charts.js (PierUi) draws the bars and
// charts. Server strings become text nodes only (see charts.js). The admin key lives in
// `state.key` and nowhere else: no cookie, no storage, no URL.
'use strict';

const {h, fmtBytes, fmtNum, renderDevices, renderHistory} = PierUi;
const $ = (id) => document.getElementById(id);

// replaceChildren without the nulls of `cond ? node : null` (it would print "null").
function fill(el, ...kids) {
  el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
}

const POLL_MS = 1000;          // /admin/models, /admin/qos, /admin/requests
const HISTORY_MS = 5000;       // /admin/history
const METRICS_MS = 2000;       // /metrics (optional: rates, latency, SLO)
const MISSING_RETRY_MS = 30000; // a route that answered 404 is asked again this rarely
const EVENT_ROWS_MAX = 500;    // rows kept in the events table
const EVENT_BATCH_MAX = 100;   // events rendered per flush; more are sampled out
const EVENT_FLUSH_MS = 250;
const STREAM_SILENCE_MS = 15000; // no byte (not even a heartbeat) this long: reconnect

const state = {
  key: null,           // the admin key, only here
  locked: false,       // the login box is up: no polling, no stream
  view: 'devices',
  failures: 0,         // consecutive polls that could not reach the server
  models: [], devices: [], qos: null, history: null,
  missing: new Map(),  // route -> when it answered 404
  lastHistoryAt: 0, lastMetricsAt: 0, metricsOff: false,
  metrics: null,       // parsed /metrics: see parseMetrics
  rates: new Map(),    // counter key -> {value, at, rate}
  pending: new Map(),  // model -> action in flight
  actionNotes: new Map(), // model -> last action's result line
};

// ---------------------------------------------------------------- HTTP

// One request. Never throws: status 0 means the server could not be reached (or the request
// was aborted); `message` is the server's error.message when it sent one.
async function call(path, opts = {}) {
  const headers = {...(opts.headers || {})};
  const key = 'key' in opts ? opts.key : state.key;
  if (key) headers.Authorization = `Bearer ${key}`;
  const init = {method: opts.method || 'GET', headers, cache: 'no-store'};
  if (opts.json !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.json);
  } else if (opts.body !== undefined) {
    init.body = opts.body;
  }
  let response;
  let text = '';
  try {
    response = await fetch(path, init);
    text = await response.text();
  } catch (e) {
    return {status: 0, ok: false, data: null, text: '', message: 'server unreachable'};
  }
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  const err = data && typeof data === 'object' ? data.error : null;
  const message = err ? String(err.message ?? err) : (response.ok ? '' : `HTTP ${response.status}`);
  return {status: response.status, ok: response.ok, data, text, message,
    code: err ? err.code : null, headers: response.headers};
}

const isAuthFailure = (r) => r.status === 401 || r.status === 403;

// GET of an admin data route: the parsed body, or null (and the view says why). A 404 is
// remembered so that a server without the route is not asked every second.
async function adminGet(path) {
  const missingAt = state.missing.get(path);
  if (missingAt && Date.now() - missingAt < MISSING_RETRY_MS) return {missing: true};
  const r = await call(path);
  if (r.status === 404) state.missing.set(path, Date.now());
  else state.missing.delete(path);
  return r.status === 404 ? {missing: true} : r;
}

// ---------------------------------------------------------------- login

function showLogin(r) {
  // Several requests may be refused at once (polls, the stream): the first one tells the user.
  if (state.locked) return;
  const wasSet = state.key !== null;
  state.key = null;
  state.locked = true;
  clearData();
  $('login-overlay').hidden = false;
  $('login-message').textContent = r.status === 403 && !wasSet
    ? `The server refused: ${r.message}` : 'This server needs its admin key.';
  $('login-error').textContent = wasSet ? `The key was refused: ${r.message}` : '';
  setConn('login', 'login required');
  stopStream();
  $('login-key').focus();
}

function submitLogin(event) {
  event.preventDefault(); // form-action 'none': the form never navigates
  const input = $('login-key');
  state.key = input.value.trim() || null;
  input.value = '';
  state.locked = false;
  $('login-error').textContent = 'checking…';
  wake();
}

// A wrong key shows no data: every view is emptied while the login box is up.
function clearData() {
  state.models = [];
  state.devices = [];
  state.history = null;
  $('devices').replaceChildren();
  $('history').replaceChildren();
  $('gpu-note').textContent = '';
  $('history-note').textContent = '';
  for (const r of modelRows.values()) { r.row.remove(); r.detail.remove(); }
  modelRows.clear();
  $('requests-body').replaceChildren();
  $('requests-summary').textContent = '';
  $('pipelines').replaceChildren();
  $('events-body').replaceChildren();
  events.buffer = [];
  for (const id of ['chat-model', 'embed-model', 'classify-model']) $(id).replaceChildren();
  $('playground-kinds').textContent = '';
}

// ---------------------------------------------------------------- connection state

function setConn(kind, text) {
  const el = $('conn-status');
  el.textContent = text;
  el.className = `conn conn-${kind}`;
}

function markUp() {
  state.failures = 0;
  $('conn-banner').hidden = true;
  if (state.locked) return;
  setConn('live', 'live');
  $('login-overlay').hidden = true;
  $('login-error').textContent = '';
}

// Backoff 1, 2, 4, 8, 10, 10 ... seconds while the server is away.
function markDown() {
  state.failures += 1;
  const delay = Math.min(10000, 1000 * 2 ** (state.failures - 1));
  $('conn-banner').hidden = false;
  $('conn-banner').textContent =
    `server unreachable — reconnecting (try ${state.failures}, next in ${delay / 1000} s)`;
  setConn('down', 'reconnecting');
  return delay;
}

// ---------------------------------------------------------------- polling

let wakeUp = null;
function wake() { if (wakeUp) wakeUp(); }

// Sleeps `ms`, or less when something calls wake() (login, an action, a view change).
function sleepWakeable(ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { wakeUp = null; resolve(); }, ms);
    wakeUp = () => { clearTimeout(timer); wakeUp = null; resolve(); };
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One round: the routes every view needs, then what is due. false: the server is away.
async function pollOnce() {
  const [models, qos, requests] = await Promise.all(
    [call('/admin/models'), adminGet('/admin/qos'), adminGet('/admin/requests')]);
  if (models.status === 0) return false;
  if (isAuthFailure(models)) { showLogin(models); return true; }
  markUp();
  if (!models.ok) {
    $('models-note').textContent = `/admin/models: ${models.message}`;
    return true;
  }
  $('models-note').textContent = '';
  state.models = (models.data && models.data.data) || [];
  state.devices = devicesOf(models.data);
  state.qos = qos.ok ? qos.data : null;
  noteModelRates(state.models);
  renderAllModels();
  renderRequests(requests);
  const now = Date.now();
  if (now - state.lastMetricsAt >= METRICS_MS && !state.metricsOff) {
    state.lastMetricsAt = now;
    await pollMetrics();
  }
  if (now - state.lastHistoryAt >= HISTORY_MS) {
    state.lastHistoryAt = now;
    const history = await adminGet('/admin/history');
    if (!state.locked) showHistory(history); // no data behind the login box
  }
  if (state.view === 'pipelines') {
    const pipelines = await adminGet('/admin/pipelines');
    if (!state.locked) renderPipelines(pipelines);
  }
  return true;
}

async function pollLoop() {
  for (;;) {
    let delay = POLL_MS;
    // A hidden browser tab costs the server nothing; the login box waits for a key.
    if (document.visibilityState === 'visible' && !state.locked) {
      let up = false;
      try { up = await pollOnce(); } catch (e) { up = true; reportBug(e); }
      if (!up) delay = markDown();
    }
    await sleepWakeable(delay);
  }
}

// A bug of this page is shown, not thrown, so that one bad value never stops the polling.
function reportBug(e) {
  $('models-note').textContent = `console error: ${e && e.message}`;
}

// Older servers give one "device" object and no "devices" list.
function devicesOf(body) {
  if (Array.isArray(body.devices) && body.devices.length) return body.devices;
  return body.device ? [{kind: 'cpu', ...body.device}] : [];
}

// ---------------------------------------------------------------- rates and /metrics

// Per-second rate of a counter between two readings (kept until the next one).
function rateOf(key, value, at = Date.now()) {
  if (typeof value !== 'number') return null;
  const prev = state.rates.get(key);
  let rate = prev ? prev.rate : null;
  if (prev && at - prev.at >= 500) rate = value >= prev.value ? (value - prev.value) * 1000 / (at - prev.at) : null;
  if (!prev || at - prev.at >= 500) state.rates.set(key, {value, at, rate});
  return rate;
}

// The engines' counters, read once per /admin/models answer (not per render: a render between
// two polls would see the same value later and call it a rate of 0).
function noteModelRates(models, at = Date.now()) {
  for (const m of models) {
    const e = (m.pier || {}).engine;
    if (!e) continue;
    rateOf(`processed/${m.id}`, e.tokens_processed, at);
    rateOf(`finished/${m.id}`, e.requests_finished, at);
  }
}

const METRIC_LINE = /^(pier_generation_tokens_total|pier_embedding_texts_total|pier_tensor_items_total|pier_qos_slo_attainment_ratio|pier_time_to_first_token_seconds_bucket|pier_e2e_request_latency_seconds_bucket)\{([^}]*)\}\s+(\S+)/;

// The few /metrics lines the models table uses: {name: {model: value | [[le, count]] | {class: ratio}}}.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    const m = METRIC_LINE.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of m[2].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    const table = (out[m[1]] = out[m[1]] || {});
    const value = Number(m[3]);
    if (m[1].endsWith('_bucket')) (table[labels.model] = table[labels.model] || []).push([Number(labels.le), value]);
    else if (labels.class) (table[labels.model] = table[labels.model] || {})[labels.class] = value;
    else table[labels.model] = (table[labels.model] || 0) + value;
  }
  return out;
}

// A quantile from cumulative buckets [[le, count]], interpolated inside its bucket.
function quantile(buckets, q) {
  if (!buckets || !buckets.length) return null;
  buckets.sort((a, b) => a[0] - b[0]);
  const total = buckets[buckets.length - 1][1];
  if (!total) return null;
  let prevLe = 0;
  let prevCount = 0;
  for (const [le, count] of buckets) {
    if (count >= q * total) {
      if (!isFinite(le)) return prevLe;
      return prevLe + (le - prevLe) * (q * total - prevCount) / ((count - prevCount) || 1);
    }
    prevLe = le;
    prevCount = count;
  }
  return prevLe;
}

// /metrics is optional (it may have its own key): when refused, the table goes without it.
async function pollMetrics() {
  const r = await call('/metrics');
  if (r.status === 401 || r.status === 403 || r.status === 404) {
    state.metricsOff = true;
    state.metrics = null;
    return;
  }
  if (!r.ok) return;
  state.metrics = parseMetrics(r.text);
  const at = Date.now();
  for (const name of ['pier_generation_tokens_total', 'pier_embedding_texts_total', 'pier_tensor_items_total']) {
    for (const [model, value] of Object.entries(state.metrics[name] || {})) rateOf(`${name}/${model}`, value, at);
  }
}

// ---------------------------------------------------------------- devices view

function renderDevicesView() {
  const gpus = state.devices.filter((d) => d.kind === 'cuda' || d.kind === 'ledger' || d.gpu);
  $('gpu-note').textContent = gpus.length ? '' : 'no GPU on this server';
  renderDevices($('devices'), state.devices, state.models);
}

function showHistory(r) {
  if (r.missing) {
    $('history-note').textContent = 'history not available on this server (/admin/history: 404)';
    return;
  }
  if (isAuthFailure(r)) return showLogin(r);
  if (!r.ok) {
    $('history-note').textContent = `history: ${r.message}`;
    return;
  }
  state.history = r.data;
  const count = (r.data.samples || []).length;
  $('history-note').textContent = count ? `last ${Math.round((r.data.window_seconds || 600) / 60)} min, ` +
    `a sample every ${r.data.interval_seconds || '?'} s` : 'no samples yet';
  if (state.view === 'devices') renderHistory($('history'), state.history);
}

// ---------------------------------------------------------------- models view

const modelRows = new Map(); // id -> {row, detail, cells: {...}, buttons: {...}}
const COLUMNS = ['name', 'state', 'memory', 'runwait', 'queue', 'kv', 'rate', 'latency', 'slo', 'fallback', 'actions'];

// Rows are made once per model and updated in place, so a button is never replaced under a click.
function makeModelRow(id) {
  const cells = {};
  const row = h('tr', {'data-model': id});
  for (const c of COLUMNS) row.append(cells[c] = h('td', {class: `col-${c}`}));
  for (const c of ['memory', 'runwait', 'kv', 'rate']) cells[c].classList.add('num');
  const buttons = {};
  for (const action of ['load', 'unload', 'drain']) {
    buttons[action] = h('button', {type: 'button', class: `action action-${action}`,
      'data-model': id, 'data-action': action}, action);
    cells.actions.append(buttons[action]);
  }
  const note = h('div', {class: 'action-status', 'data-model': id});
  cells.actions.append(note);
  const detail = h('tr', {class: 'model-detail', 'data-detail-for': id}, h('td', {colspan: COLUMNS.length}));
  return {row, detail, cells, buttons, note};
}

function renderAllModels() {
  renderDevicesView();
  const body = $('models-body');
  const seen = new Set();
  for (const m of state.models) {
    seen.add(m.id);
    let r = modelRows.get(m.id);
    if (!r) {
      r = makeModelRow(m.id);
      modelRows.set(m.id, r);
      body.append(r.row, r.detail);
    }
    fillModelRow(r, m);
  }
  for (const [id, r] of modelRows) {
    if (!seen.has(id)) { r.row.remove(); r.detail.remove(); modelRows.delete(id); }
  }
  $('models-note').textContent = state.models.length ? '' : 'no models configured';
  renderPlaygroundModels();
}

const small = (...kids) => h('div', {class: 'small'}, ...kids);
const qosOf = (id) => ((state.qos && state.qos.models) || []).find((q) => q.model === id) || null;

function fillModelRow(r, m) {
  const p = m.pier || {};
  const e = p.engine || null;
  const c = r.cells;
  if (p.kind) knownKinds.set(m.id, p.kind);
  const kind = knownKinds.get(m.id); // an unloaded model's entry has none
  fill(c.name, h('b', {}, m.id), ' ', kind ? h('span', {class: `kind kind-${kind}`}, kind) : null,
    p.aliases && p.aliases.length ? small('aliases: ', p.aliases.join(', ')) : null,
    small(`${p.device || 'cpu'} · ${p.load || ''}`));
  fillState(c.state, p);
  c.memory.textContent = fmtBytes(p.memory && p.memory.committed_bytes);
  c.memory.title = ((p.memory && p.memory.owners) || []).map((o) => `${o.owner}: ${fmtBytes(o.committed_bytes)}`).join('\n');
  const b = p.batcher;
  c.runwait.textContent = e ? `${fmtNum(e.running)} / ${fmtNum(e.waiting)}`
    : b ? `${fmtNum(b.running_items)} / ${fmtNum(b.queued_items)}` : '—';
  fillQueue(c.queue, qosOf(m.id));
  fillKv(c.kv, e);
  fillRate(c.rate, m, p, e);
  fillLatency(c.latency, m.id);
  fillSlo(c.slo, m.id);
  fillFallback(c.fallback, m.id, p);
  fillButtons(r, m, p);
  fillDetail(r.detail, p);
}

function fillState(cell, p) {
  const st = String(p.state || 'unknown');
  cell.className = `col-state state state-${st.replace(/[^\w-]/g, '_')}`;
  const life = p.lifecycle || {};
  fill(cell, h('span', {class: 'state-name'}, st),
    p.reason ? h('div', {class: 'reason'}, p.reason) : null,
    small(`loads ${life.loads ?? 0} · failed ${life.load_failures ?? 0} · evicted ${life.evictions ?? 0}` +
      (life.last_load_seconds ? ` · last load ${life.last_load_seconds.toFixed(2)} s` : '')));
}

function fillQueue(cell, q) {
  if (!q || !q.queue) { fill(cell, '—'); return; }
  const parts = [];
  for (const [cls, v] of Object.entries(q.queue)) {
    if (!(v.waiting > 0)) continue;
    const wait = typeof v.predicted_wait_ms === 'number' ? ` (~${fmtNum(v.predicted_wait_ms)} ms)` : '';
    parts.push(small(`${cls} ${v.waiting}${wait}`));
  }
  fill(cell, ...(parts.length ? parts : ['empty']),
    q.admissions_per_s ? small(`${fmtNum(q.admissions_per_s, 1)} admitted/s`) : null);
}

function fillKv(cell, e) {
  if (!e || !e.kv_blocks_total) { cell.textContent = '—'; cell.title = ''; return; }
  const pct = 100 * e.kv_blocks_used / e.kv_blocks_total;
  cell.textContent = `${e.kv_blocks_used}/${e.kv_blocks_total} (${pct.toFixed(0)}%)`;
  cell.title = `KV blocks used ${e.kv_blocks_used} of ${e.kv_blocks_total} held (most ${fmtNum(e.kv_blocks_max)});` +
    ` ${fmtNum(e.kv_tokens_used)} tokens; ${fmtNum(e.preemptions)} preemptions`;
}

// An LLM's tokens/s from its engine's tokens_processed (prompt + generated tokens, counted as
// the engine runs them) between two polls: /metrics' pier_generation_tokens_total counts only
// at a request's end, so it reads 0 while long answers are being generated. Servers without
// that field, embedding and tensor models: texts/s or items/s from /metrics. Requests/s from
// the engine's requests_finished always.
function fillRate(cell, m, p, e) {
  const rateNow = (key) => { const r = state.rates.get(key); return r && r.rate !== null ? r.rate : null; };
  let rate = null;
  let unit = 'tok/s';
  let source = '';
  if (p.kind !== 'embed' && p.kind !== 'tensor' && e && typeof e.tokens_processed === 'number') {
    rate = rateNow(`processed/${m.id}`);
    source = 'prompt + generated tokens the engine ran per second, between the last two polls';
  } else {
    const counter = p.kind === 'embed' ? ['pier_embedding_texts_total', 'texts/s']
      : p.kind === 'tensor' ? ['pier_tensor_items_total', 'items/s'] : ['pier_generation_tokens_total', 'tok/s'];
    rate = rateNow(`${counter[0]}/${m.id}`);
    unit = counter[1];
    source = `from /metrics ${counter[0]} (counted when requests end)`;
  }
  const perSecond = e ? rateNow(`finished/${m.id}`) : null;
  fill(cell, rate !== null ? `${fmtNum(rate, 1)} ${unit}` : '—',
    perSecond !== null ? small(`${fmtNum(perSecond, 1)} req/s`) : null);
  cell.title = source;
}

function fillLatency(cell, id) {
  const mt = state.metrics;
  const ms = (buckets, q) => { const v = quantile(buckets, q); return v === null ? '—' : fmtNum(v * 1000); };
  if (!mt) { fill(cell, state.metricsOff ? 'needs /metrics' : '—'); return; }
  const ttft = (mt.pier_time_to_first_token_seconds_bucket || {})[id];
  const e2e = (mt.pier_e2e_request_latency_seconds_bucket || {})[id];
  fill(cell, small(`TTFT ${ms(ttft, 0.5)} / ${ms(ttft, 0.95)} ms`), small(`E2E ${ms(e2e, 0.5)} / ${ms(e2e, 0.95)} ms`));
  cell.title = 'since the server started';
}

// SLO attainment per class: /admin/qos when it gives it, else /metrics' pier_qos_slo_attainment_ratio.
function fillSlo(cell, id) {
  const q = qosOf(id);
  let byClass = q && (q.slo_attainment || q.slo);
  if (!byClass && q && q.queue) {
    const fromQueue = Object.entries(q.queue).filter(([, v]) => typeof v.slo_attainment === 'number');
    if (fromQueue.length) byClass = Object.fromEntries(fromQueue.map(([k, v]) => [k, v.slo_attainment]));
  }
  if (!byClass && state.metrics) byClass = (state.metrics.pier_qos_slo_attainment_ratio || {})[id];
  const entries = Object.entries(byClass || {}).filter(([, v]) => typeof v === 'number');
  fill(cell, ...(entries.length ? entries.map(([cls, v]) =>
    small(`${cls} ${(100 * v).toFixed(1)}%`)) : ['—']));
}

function fillFallback(cell, id, p) {
  const target = p.config && p.config.fallback;
  if (!target) { cell.textContent = '—'; return; }
  const active = p.fallback_active ?? events.fallback.get(id);
  fill(cell, `→ ${target}`, small(active === true ? 'active' : active === false ? 'off' : 'no event yet'));
  cell.classList.toggle('fallback-active', active === true);
}

function hasWorkers(p) {
  return (p.instances || []).some((i) => i.worker);
}

// Which actions a state allows; the one in flight stays visible with its progress text.
function fillButtons(r, m, p) {
  const st = p.state;
  const busy = state.pending.get(m.id);
  const show = {load: st === 'unloaded' || st === 'failed', unload: st === 'ready' || st === 'loading',
    drain: st === 'ready' && hasWorkers(p)};
  const progress = {load: 'loading…', unload: 'unloading…', drain: 'draining…'};
  for (const [action, button] of Object.entries(r.buttons)) {
    button.hidden = !(show[action] || busy === action);
    button.disabled = Boolean(busy);
    button.textContent = busy === action ? progress[action] : action;
  }
  const note = state.actionNotes.get(m.id);
  r.note.textContent = note ? note.text : '';
  r.note.className = `action-status ${note ? note.kind : ''}`;
}

// The detail row: each instance, its worker process (pid, restarts, last failure, resident vs
// granted) and a tensor model's batcher.
function fillDetail(detail, p) {
  const lines = [];
  (p.instances || []).forEach((inst, i) => {
    const w = inst.worker;
    // Numbered from 1, as the server's events and drain answers name them.
    const parts = [`instance ${i + 1}: running ${inst.running ?? 0}, waiting ${inst.waiting ?? 0}, ` +
      `KV blocks ${inst.kv_blocks_used ?? 0}, finished ${inst.requests_finished ?? 0}`];
    if (w) {
      parts.push(` · worker ${w.state ?? '—'} pid ${w.pid ?? '—'} · restarts ${w.restarts ?? 0}` +
        ` · resident ${fmtBytes(w.rss_bytes)} / granted ${fmtBytes(w.granted_bytes)}` +
        (w.kv_lent_bytes ? ` · KV lent ${fmtBytes(w.kv_lent_bytes)}` : '') +
        (w.binding && w.binding.description ? ` · ${w.binding.description}` : ''));
    }
    const line = h('div', {class: `instance${w && w.restarts ? ' restarted' : ''}`, 'data-instance': i + 1}, ...parts);
    if (w && w.granted_bytes) line.append(' ', usageMeter(w.rss_bytes, w.granted_bytes));
    if (w && w.last_failure) line.append(h('div', {class: 'reason'}, `last failure: ${w.last_failure}`));
    lines.push(line);
  });
  const b = p.batcher;
  if (b) {
    lines.push(h('div', {class: 'instance'}, `batcher: queued ${fmtNum(b.queued_items)} · running ${fmtNum(b.running_items)} · ` +
      `batches ${fmtNum(b.batches)} · items ${fmtNum(b.items)} · requests ${fmtNum(b.requests)} · expired ${fmtNum(b.expired)}`));
  }
  detail.hidden = lines.length === 0;
  fill(detail.firstChild, ...lines);
}

// Resident memory against the grant (a worker far past it is leaking or under-granted).
function usageMeter(used, granted) {
  const meter = h('span', {class: 'meter', title: `resident ${fmtBytes(used)} of ${fmtBytes(granted)} granted`});
  // Red only well past the grant: a worker runs a few MiB over it routinely.
  const fill = h('span', {class: used > 1.1 * granted ? 'meter-fill over' : 'meter-fill'});
  fill.style.width = Math.min(100, 100 * (used || 0) / granted) + '%';
  meter.append(fill);
  return meter;
}

// ---------------------------------------------------------------- requests view

function renderRequests(r) {
  const body = $('requests-body');
  if (r.missing) {
    body.replaceChildren();
    $('requests-note').textContent = 'live requests not available on this server (/admin/requests: 404)';
    return;
  }
  if (!r.ok) { $('requests-note').textContent = `requests: ${r.message}`; return; }
  const list = [...((r.data && r.data.data) || [])];
  list.sort((a, b) => String(a.model).localeCompare(String(b.model)) || b.age_seconds - a.age_seconds);
  fill(body, ...list.map((q) => h('tr', {'data-request-id': q.id, 'data-model': q.model,
    class: `req-${q.state}${q.age_seconds > 30 ? ' slow' : ''}`},
  h('td', {class: 'mono'}, q.id === '' || q.id === null || q.id === undefined ? '—' : q.id), h('td', {}, q.model), h('td', {}, q.route), h('td', {}, q.tenant),
  h('td', {}, q.class), h('td', {}, q.state), h('td', {class: 'num'}, fmtNum(q.age_seconds, 1)),
  h('td', {class: 'num'}, fmtNum(q.tokens)), h('td', {}, q.stage || ''))));
  const perModel = new Map();
  for (const q of list) {
    const s = perModel.get(q.model) || {running: 0, queued: 0};
    s[q.state === 'running' ? 'running' : 'queued'] += 1;
    perModel.set(q.model, s);
  }
  $('requests-summary').textContent = [...perModel].map(([m, s]) => `${m}: ${s.running} running, ${s.queued} queued`).join(' · ');
  $('requests-note').textContent = (list.length ? '' : 'no requests in flight') +
    (r.data && r.data.truncated ? ' (list truncated by the server)' : '');
}

// ---------------------------------------------------------------- pipelines view

function renderPipelines(r) {
  const box = $('pipelines');
  if (r.missing) { box.replaceChildren(); $('pipelines-note').textContent = 'pipelines not available on this server'; return; }
  if (!r.ok) { $('pipelines-note').textContent = `pipelines: ${r.message}`; return; }
  const list = (r.data && r.data.data) || [];
  $('pipelines-note').textContent = list.length ? '' : 'no pipelines configured';
  fill(box, ...list.map((pl) => {
    const stages = h('div', {class: 'stages'});
    (pl.stages || []).forEach((s, i) => {
      if (i) stages.append(h('span', {class: 'arrow'}, '→'));
      stages.append(h('div', {class: 'stage', 'data-step': s.step}, h('b', {}, s.step), small(s.kind),
        small(`waiting ${fmtNum(s.waiting)} · running ${fmtNum(s.running)}`),
        small(`batch ${s.batch_size_mean ? fmtNum(s.batch_size_mean, 1) : '—'} · queue ${fmtNum(s.queue_ms_mean, 1)} ms · compute ${fmtNum(s.compute_ms_mean, 1)} ms`),
        small(`requests ${fmtNum(s.requests)} · failures ${fmtNum(s.failures)}`)));
    });
    const names = (tensors) => (Array.isArray(tensors) ? tensors : []).map((t) => (typeof t === 'string' ? t : t.name)).join(', ');
    return h('div', {class: 'pipeline', 'data-pipeline': pl.id},
      h('h3', {}, pl.id, ' ', h('span', {class: 'figures'}, `${names(pl.inputs)} → ${names(pl.outputs)}`)),
      small(`waiting ${fmtNum(pl.waiting)} · inside ${fmtNum(pl.inside)}/${fmtNum(pl.max_inflight)} · ` +
        `requests ${fmtNum(pl.requests)} · failures ${fmtNum(pl.failures)} · refused ${fmtNum(pl.refused)} · ` +
        `cancelled ${fmtNum(pl.cancelled)} · held ${fmtBytes(pl.held_bytes)}`),
      stages);
  }));
}

// ---------------------------------------------------------------- actions

// The page's own confirmation dialog; resolves true on OK, false on Cancel or Escape.
function confirmDialog(text, okLabel) {
  return new Promise((resolve) => {
    const overlay = $('confirm-overlay');
    const listeners = new AbortController();
    const done = (answer) => { overlay.hidden = true; listeners.abort(); resolve(answer); };
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = okLabel;
    overlay.hidden = false;
    $('confirm-ok').addEventListener('click', () => done(true), {signal: listeners.signal});
    $('confirm-cancel').addEventListener('click', () => done(false), {signal: listeners.signal});
    document.addEventListener('keydown', (k) => { if (k.key === 'Escape') done(false); }, {signal: listeners.signal});
    $('confirm-ok').focus();
  });
}

function showResult(text, kind) {
  const el = $('action-result');
  el.hidden = false;
  el.textContent = text;
  el.className = `action-result result-${kind}`;
}

const ACTION_QUESTIONS = {
  load: (m) => `Load model “${m}”?`,
  unload: (m) => `Unload model “${m}”? Requests in flight get the unload grace, then end.`,
  drain: (m) => `Drain and restart the worker processes of “${m}”?`,
};

async function runAction(action, model) {
  if (!(await confirmDialog(ACTION_QUESTIONS[action](model), action))) return;
  state.pending.set(model, action);
  state.actionNotes.set(model, {text: `${action}…`, kind: 'progress'});
  showResult(`${action} ${model}…`, 'progress');
  renderAllModels();
  const r = await call(`/admin/models/${encodeURIComponent(model)}/${action}`, {method: 'POST'});
  state.pending.delete(model);
  if (isAuthFailure(r)) return showLogin(r);
  const data = r.data || {};
  const detail = data.pier ? ` (state ${data.pier.state})`
    : Array.isArray(data.draining) ? ` (instance ${data.draining.join(', ')} restarting)` : '';
  const text = r.ok ? `${action} ${model}: done${detail}`
    : `${action} ${model} failed: ${r.status ? r.message : 'server unreachable'}`;
  state.actionNotes.set(model, {text, kind: r.ok ? 'ok' : 'error'});
  showResult(text, r.ok ? 'ok' : 'error');
  renderAllModels();
  wake();
}

function summariseReload(data) {
  const list = (v) => (Array.isArray(v) ? v.map((x) => (typeof x === 'object' ? `${x.id}: ${x.reason}` : x)).join(', ') || 'none' : String(v));
  return ['added', 'removed', 'reloaded', 'unchanged', 'failed']
    .filter((k) => data && k in data).map((k) => `${k}: ${list(data[k])}`).join(' · ');
}

async function reloadConfig() {
  if (!(await confirmDialog('Re-read the configuration file and apply the difference?', 'reload'))) return;
  const button = $('reload-config');
  button.disabled = true;
  button.textContent = 'reloading…';
  showResult('reloading the configuration…', 'progress');
  const r = await call('/admin/reload', {method: 'POST'});
  button.disabled = false;
  button.textContent = 'Reload config';
  if (isAuthFailure(r)) return showLogin(r);
  showResult(r.ok ? `reload: ${summariseReload(r.data)}` : `reload failed: ${r.status ? r.message : 'server unreachable'}`,
    r.ok ? 'ok' : 'error');
  wake();
}

// ---------------------------------------------------------------- navigation and start

const VIEWS = ['devices', 'models', 'requests', 'events', 'pipelines', 'playground'];

function showView(name) {
  if (!VIEWS.includes(name)) name = 'devices';
  state.view = name;
  for (const v of VIEWS) {
    $(`view-${v}`).hidden = v !== name;
    $(`nav-${v}`).classList.toggle('active', v === name);
  }
  if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
  // A canvas drawn while hidden had no size: draw the history again now that it shows.
  if (name === 'devices' && state.history) renderHistory($('history'), state.history);
  wake();
}

function start() {
  for (const v of VIEWS) $(`nav-${v}`).addEventListener('click', () => showView(v));
  window.addEventListener('hashchange', () => showView(location.hash.slice(1)));
  $('login').addEventListener('submit', submitLogin);
  $('reload-config').addEventListener('click', reloadConfig);
  // One listener for every action button, whichever row it is in.
  $('models-body').addEventListener('click', (e) => {
    const button = e.target.closest('button[data-action]');
    if (button && !button.disabled) runAction(button.dataset.action, button.dataset.model);
  });
  $('chat-send').addEventListener('click', sendChat);
  $('embed-send').addEventListener('click', sendEmbed);
  $('classify-send').addEventListener('click', sendClassify);
  for (const id of ['chat-model', 'embed-model', 'classify-model']) {
    $(id).addEventListener('change', (e) => { e.target.dataset.chosen = e.target.value; });
  }
  $('playground-auth').addEventListener('submit', (e) => e.preventDefault());
  document.addEventListener('visibilitychange', wake);
  window.addEventListener('resize', () => state.history && state.view === 'devices' &&
    renderHistory($('history'), state.history));
  showView(location.hash.slice(1) || 'devices');
  setInterval(flushEvents, EVENT_FLUSH_MS);
  pollLoop();
  followEvents();
}

// Every script is in (deferred scripts run before DOMContentLoaded): events.js and
// playground.js define what start() wires up.
document.addEventListener('DOMContentLoaded', start);
