// Pier console (issue #47): the playground view: a chat, an embedding similarity, an image to a
// classifier, each with its timings. Shares app.js's globals; loaded after it.
'use strict';

// ---------------------------------------------------------------- playground

// The playground's key: the API key typed there, else the admin key.
const playKey = () => $('playground-key').value.trim() || state.key;

// Refills a <select> with these ids only when they changed, keeping what the user picked.
function fillSelect(select, ids) {
  const current = [...select.options].map((o) => o.value);
  if (current.join('\n') === ids.join('\n')) return;
  fill(select, ids.map((id) => h('option', {value: id}, id)));
  if (ids.includes(select.dataset.chosen)) select.value = select.dataset.chosen;
}

// An unloaded model's entry has no kind: the last one seen is remembered.
const knownKinds = new Map();

function renderPlaygroundModels() {
  const byKind = {generate: [], embed: [], tensor: []};
  // Ready models first, so that the default choice answers at once.
  const models = [...state.models].sort((a, b) => ((b.pier || {}).state === 'ready') - ((a.pier || {}).state === 'ready'));
  for (const m of models) {
    const p = m.pier || {};
    if (p.kind) knownKinds.set(m.id, p.kind);
    const kind = knownKinds.get(m.id) || 'unknown (never loaded)';
    (byKind[kind] = byKind[kind] || []).push(m.id);
  }
  $('playground-kinds').textContent = Object.entries(byKind)
    .map(([kind, ids]) => `${kind}: ${ids.length ? ids.join(', ') : '—'}`).join(' · ');
  fillSelect($('chat-model'), byKind.generate);
  fillSelect($('embed-model'), byKind.embed);
  fillSelect($('classify-model'), byKind.tensor);
  $('pg-classify').hidden = byKind.tensor.length === 0;
}

// Runs one playground request with the button disabled; shows elapsed ms or the error.
async function playgroundCall(prefix, path, opts, show) {
  const button = $(`${prefix}-send`);
  button.disabled = true;
  $(`${prefix}-meta`).textContent = 'waiting…';
  $(`${prefix}-output`).textContent = '';
  const started = performance.now();
  const r = await call(path, {...opts, key: playKey()});
  const ms = Math.round(performance.now() - started);
  button.disabled = false;
  if (!r.ok) {
    $(`${prefix}-meta`).textContent = `${ms} ms · HTTP ${r.status || 'unreachable'}`;
    $(`${prefix}-output`).textContent = r.message;
    return;
  }
  const fallback = r.headers && r.headers.get('X-Pier-Fallback');
  $(`${prefix}-meta`).textContent = [`${ms} ms`, show(r.data), fallback ? `fallback for ${fallback}` : '']
    .filter(Boolean).join(' · ');
}

function sendChat() {
  const model = $('chat-model').value;
  if (!model) { $('chat-meta').textContent = 'no generate model'; return; }
  playgroundCall('chat', '/v1/chat/completions', {method: 'POST', json: {model,
    messages: [{role: 'user', content: $('chat-input').value}],
    max_tokens: Number($('chat-max-tokens').value) || 64}}, (data) => {
    const choice = (data.choices || [])[0] || {};
    $('chat-output').textContent = (choice.message && choice.message.content) || '';
    const u = data.usage || {};
    return `model ${data.model} · prompt ${u.prompt_tokens ?? '—'} + completion ${u.completion_tokens ?? '—'} tokens` +
      ` · finish ${choice.finish_reason ?? '—'}`;
  });
}

function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return dot / (Math.sqrt(na * nb) || 1);
}

function sendEmbed() {
  const model = $('embed-model').value;
  if (!model) { $('embed-meta').textContent = 'no embedding model'; return; }
  playgroundCall('embed', '/v1/embeddings', {method: 'POST', json: {model, input: [$('embed-a').value, $('embed-b').value]}},
    (data) => {
      const [a, b] = (data.data || []).map((d) => d.embedding);
      $('embed-output').textContent = a && b ? `cosine similarity ${cosine(a, b).toFixed(4)}` : 'no vectors';
      return `${a ? a.length : 0} dimensions · ${(data.usage || {}).prompt_tokens ?? '?'} tokens`;
    });
}

// /v1/classify takes the image file itself as the body (Content-Type image/*).
function sendClassify() {
  const model = $('classify-model').value;
  const file = $('classify-file').files[0];
  if (!model || !file) { $('classify-meta').textContent = 'pick a model and an image'; return; }
  playgroundCall('classify', `/v1/classify?model=${encodeURIComponent(model)}&top_k=5`,
    {method: 'POST', body: file, headers: {'Content-Type': file.type || 'application/octet-stream'}}, (data) => {
      const classes = ((data.data || [])[0] || {}).classes || [];
      $('classify-output').textContent = classes.map((c) => `${c.label ?? c.class}  ${fmtNum(c.score, 4)}`).join('\n');
      const t = data.timing || {};
      return `decode ${fmtNum(t.decode_ms, 1)} ms · queue ${fmtNum(t.queue_ms, 1)} ms · compute ${fmtNum(t.compute_ms, 1)} ms`;
    });
}
