// Pier console (issue #47): the events view: follows /admin/events with fetch() and a streamed
// body (EventSource cannot send Authorization), parses SSE, renders in batches with sampling,
// and reconnects with ?after=. Shares app.js's globals (state, $, h, ...); loaded after it.
'use strict';

// ---------------------------------------------------------------- events

const events = {
  lastSeq: null, received: 0, dropped: 0, sampled: 0, sampledSinceFlush: 0,
  buffer: [],           // parsed, not yet rendered (at most EVENT_BATCH_MAX)
  controller: null,     // aborts the current stream
  failures: 0, lastByteAt: 0, lastWakeAt: 0,
  fallback: new Map(),  // model -> fallback active, from fallback_on/off
  dirty: true,
};

// An SSE parser: feed it decoded text; it calls onMessage({id, event, data}) per blank-line-ended
// message and ignores comments (": heartbeat" only proves the connection is alive).
function sseParser(onMessage) {
  let buf = '';
  let msg = {id: null, event: '', data: []};
  return (chunk) => {
    buf += chunk;
    let start = 0;
    for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n', start)) {
      let line = buf.slice(start, nl);
      start = nl + 1;
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (msg.data.length || msg.event) onMessage(msg);
        msg = {id: null, event: '', data: []};
        continue;
      }
      if (line[0] === ':') continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value[0] === ' ') value = value.slice(1);
      if (field === 'data') msg.data.push(value);
      else if (field === 'event') msg.event = value;
      else if (field === 'id') msg.id = value;
    }
    buf = buf.slice(start);
  };
}

function onSseMessage(msg) {
  let data = null;
  try { data = JSON.parse(msg.data.join('\n')); } catch (e) { data = {message: msg.data.join('\n')}; }
  if (msg.event === 'dropped') {
    events.dropped += Number(data.dropped) || 0;
    queueEvent({type: 'dropped', level: 'warning', message: data.message || `${data.dropped} events lost`});
    return;
  }
  const seq = Number(data.seq ?? msg.id);
  if (Number.isFinite(seq)) events.lastSeq = Math.max(events.lastSeq ?? 0, seq);
  events.received += 1;
  if (!data.type) data.type = msg.event || 'message';
  noteEffects(data);
  queueEvent(data);
}

// Keeps only the newest EVENT_BATCH_MAX between two flushes; the rest are counted as sampled out.
function queueEvent(e) {
  events.buffer.push(e);
  if (events.buffer.length > EVENT_BATCH_MAX) {
    events.buffer.shift();
    events.sampled += 1;
    events.sampledSinceFlush += 1;
  }
  events.dirty = true;
}

// Events that change what the other views show: note fallbacks, and poll again soon.
function noteEffects(e) {
  if (e.type === 'fallback_on') events.fallback.set(e.model, true);
  if (e.type === 'fallback_off') events.fallback.set(e.model, false);
  const refreshes = /^(model_|worker_|config_|admin_|kv_reclaim)/.test(e.type);
  if (refreshes && Date.now() - events.lastWakeAt > 1000) {
    events.lastWakeAt = Date.now();
    wake();
  }
}

function clock(seconds) {
  if (typeof seconds !== 'number') return '';
  const d = new Date(seconds * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function eventRow(e) {
  return h('tr', {class: `event level-${e.level || 'info'}`, 'data-type': e.type, 'data-seq': e.seq ?? ''},
    h('td', {class: 'mono'}, clock(e.time)), h('td', {class: 'num'}, e.seq ?? ''),
    h('td', {}, e.level || ''), h('td', {class: 'mono'}, e.type), h('td', {}, e.model || ''),
    h('td', {class: 'message'}, e.message || ''));
}

// Every EVENT_FLUSH_MS: the buffered events go in at the top, newest first, with a line saying how
// many were sampled out; the table keeps EVENT_ROWS_MAX rows.
function flushEvents() {
  if (!events.dirty) return;
  events.dirty = false;
  const body = $('events-body');
  const fragment = document.createDocumentFragment();
  if (events.sampledSinceFlush > 0) {
    fragment.append(h('tr', {class: 'sampled-row'},
      h('td', {colspan: 6}, `${events.sampledSinceFlush} events sampled out`)));
  }
  for (let i = events.buffer.length - 1; i >= 0; i--) fragment.append(eventRow(events.buffer[i]));
  body.prepend(fragment);
  while (body.rows.length > EVENT_ROWS_MAX) body.lastChild.remove();
  events.buffer = [];
  events.sampledSinceFlush = 0;
  $('events-received').textContent = events.received;
  $('events-dropped').textContent = events.dropped;
  $('events-sampled').textContent = events.sampled;
}

function setStreamState(text) {
  $('events-stream-state').textContent = text;
}

function stopStream() {
  if (events.controller) events.controller.abort();
}

// One connection to /admin/events, read until it ends; the outcome decides the next wait.
async function streamOnce(url) {
  const controller = new AbortController();
  events.controller = controller;
  const headers = {Accept: 'text/event-stream'};
  if (state.key) headers.Authorization = `Bearer ${state.key}`;
  let response;
  try {
    response = await fetch(url, {headers, signal: controller.signal, cache: 'no-store'});
  } catch (e) {
    return 'network';
  }
  if (!response.ok || !response.body) {
    const r = {status: response.status, message: `HTTP ${response.status}`};
    try { const body = await response.json(); r.message = body.error.message; } catch (e) { /* keep HTTP n */ }
    if (isAuthFailure(r)) { showLogin(r); return 'auth'; }
    return response.status === 404 ? 'missing' : 'error';
  }
  setStreamState('following /admin/events');
  events.failures = 0;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const feed = sseParser(onSseMessage);
  events.lastByteAt = Date.now();
  // Heartbeats arrive every ~5 s: silence past STREAM_SILENCE_MS means a dead connection.
  const watchdog = setInterval(() => {
    if (Date.now() - events.lastByteAt > STREAM_SILENCE_MS) controller.abort();
  }, 1000);
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return 'ended';
      events.lastByteAt = Date.now();
      feed(decoder.decode(value, {stream: true}));
    }
  } catch (e) {
    return controller.signal.aborted ? 'stalled' : 'network';
  } finally {
    clearInterval(watchdog);
  }
}

// A restarted server numbers its events from 1 again, so ?after=<our last seq> would hide them:
// when its next number is below ours, start over with a replay.
async function checkRestart() {
  const r = await call(`/admin/events?format=json&after=${events.lastSeq}`);
  if (r.ok && r.data && typeof r.data.next === 'number' && r.data.next < events.lastSeq) {
    events.lastSeq = null;
    queueEvent({type: 'stream_restart', level: 'warning', message: 'the server restarted: its events start again'});
  }
}

// Follows the stream forever: the last 100 events first, then ?after=<last seq> on reconnects.
async function followEvents() {
  for (;;) {
    if (state.locked || document.visibilityState !== 'visible') { await sleep(500); continue; }
    if (events.lastSeq !== null && events.failures > 0) await checkRestart();
    const url = events.lastSeq === null ? '/admin/events?replay=100' : `/admin/events?after=${events.lastSeq}`;
    const outcome = await streamOnce(url);
    let delay = 1000;
    if (outcome === 'missing') {
      setStreamState('events not available on this server (/admin/events: 404)');
      delay = MISSING_RETRY_MS;
    } else if (outcome !== 'auth') {
      events.failures += 1;
      delay = Math.min(10000, 1000 * 2 ** (events.failures - 1));
      setStreamState(`stream ${outcome}; reconnecting in ${delay / 1000} s`);
    }
    await sleep(delay);
  }
}
