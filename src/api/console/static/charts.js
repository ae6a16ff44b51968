// Pier console: DOM helpers, number formats, the device bars and the history charts.
// Loaded before app.js; everything it offers is on the global `PierUi`.
// Rule of this file and app.js: server strings reach the page only as text nodes or attribute
// values (createElement + textContent / setAttribute), never as HTML, so a model called
// `<img src=x onerror=...>` shows as text; the CSP forbids inline script and style anyway.
'use strict';

const PierUi = (() => {
  // h('td', {class: 'num', 'data-model': id}, child, 'text', ...): one element. Children are
  // nodes or strings (strings become text nodes); null/undefined/false children are skipped.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) throw new Error('handlers go through addEventListener');
      if (k === 'class') el.className = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  const MiB = 1024 * 1024;
  const GiB = 1024 * MiB;

  function fmtBytes(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '—';
    if (Math.abs(n) >= 10 * GiB) return (n / GiB).toFixed(1) + ' GiB';
    if (Math.abs(n) >= GiB) return (n / GiB).toFixed(2) + ' GiB';
    return (n / MiB).toFixed(1) + ' MiB';
  }

  // Below this fmtBytes writes "0.0 MiB" (a pipeline's few KiB of tensors between steps, an
  // owner holding nothing): such owners are left out of the legends, not out of the bars.
  const LEGEND_MIN_BYTES = 0.05 * MiB;

  function fmtNum(n, digits = 0) {
    return typeof n === 'number' && isFinite(n) ? n.toFixed(digits) : '—';
  }

  // A model keeps its hue everywhere (bar, legend, chart): FNV-1a of its name, then murmur3's
  // final mix, since FNV's low bits alone gave similar names the same hue ("smol", "gemma").
  function hueOf(name) {
    let x = 0x811c9dc5;
    for (let i = 0; i < name.length; i++) {
      x ^= name.charCodeAt(i);
      x = Math.imul(x, 0x01000193) >>> 0;
    }
    x ^= x >>> 16;
    x = Math.imul(x, 0x85ebca6b) >>> 0;
    x ^= x >>> 13;
    x = Math.imul(x, 0xc2b2ae35) >>> 0;
    x ^= x >>> 16;
    return (x >>> 0) % 360;
  }

  // Parts of one model are shades of its hue: darkest for what it cannot give back.
  const PART_LIGHTNESS = {weights: 36, worker: 42, workspace: 50, kv: 62};

  function colourOf(model, part) {
    const l = PART_LIGHTNESS[part] ?? 72;
    return `hsl(${hueOf(model)}, 55%, ${l}%)`;
  }

  // An owner's model and part; the server names them, older servers only have "model/part".
  function ownerParts(o) {
    const name = String(o.owner ?? '');
    const slash = name.lastIndexOf('/');
    return {
      model: o.model ?? (slash > 0 ? name.slice(0, slash) : name),
      part: o.part ?? (slash > 0 ? name.slice(slash + 1) : ''),
    };
  }

  // The device's owners: its own list when the server gives one, else the models' owners that
  // live on it (the same objects, so data-bytes equals /admin/models' committed_bytes).
  function ownersOf(device, models) {
    if (Array.isArray(device.owners)) return device.owners;
    const list = [];
    for (const m of models) {
      const p = m.pier || {};
      if ((p.device ?? 'cpu') !== device.name) continue;
      for (const o of (p.memory && p.memory.owners) || []) list.push(o);
    }
    return list;
  }

  function ownerTitle(o, parts) {
    const lines = [o.owner, `model: ${parts.model}`, `part: ${parts.part || '—'}`,
      `committed: ${fmtBytes(o.committed_bytes)}`];
    if (typeof o.used_bytes === 'number') lines.push(`used: ${fmtBytes(o.used_bytes)}`);
    if (o.guaranteed_bytes) lines.push(`guaranteed: ${fmtBytes(o.guaranteed_bytes)}`);
    if (o.elastic_bytes) lines.push(`elastic (can be lent): ${fmtBytes(o.elastic_bytes)}`);
    return lines.join('\n');
  }

  // One owner's segment: ONE element carrying data-owner and data-bytes (tests compare them
  // with /admin/models); elastic KV shows as an inner lighter part of the same element.
  function ownerSegment(o, total) {
    const parts = ownerParts(o);
    const bytes = o.committed_bytes || 0;
    const seg = h('span', {
      class: `seg seg-owner part-${parts.part || 'other'}${bytes > 0 ? ' seg-held' : ''}`, 'data-owner': o.owner,
      'data-bytes': bytes, 'data-model': parts.model, 'data-part': parts.part,
      title: ownerTitle(o, parts)});
    seg.style.width = (100 * bytes / total) + '%';
    seg.style.backgroundColor = colourOf(parts.model, parts.part);
    if (o.elastic_bytes > 0 && bytes > 0) {
      const lent = h('span', {class: 'seg-elastic'});
      lent.style.width = Math.min(100, 100 * o.elastic_bytes / bytes) + '%';
      seg.append(lent);
    }
    return seg;
  }

  function plainSegment(kind, bytes, total, title) {
    const seg = h('span', {class: `seg seg-${kind}`, 'data-bytes': bytes, title});
    seg.style.width = (100 * bytes / total) + '%';
    return seg;
  }

  function gpuLine(gpu) {
    if (!gpu) return null;
    const parts = [];
    if (typeof gpu.utilization_percent === 'number') parts.push(`utilisation ${gpu.utilization_percent}%`);
    if (typeof gpu.memory_used_bytes === 'number') {
      parts.push(`memory ${fmtBytes(gpu.memory_used_bytes)} / ${fmtBytes(gpu.memory_total_bytes)}`);
    }
    if (typeof gpu.temperature_c === 'number') parts.push(`${gpu.temperature_c} °C`);
    return h('p', {class: 'gpu-figures'}, 'GPU (NVML): ' + parts.join(' · '));
  }

  // One device: heading with its figures, the bar (owners, reserve, free), a legend, the GPU.
  function deviceBlock(device, models) {
    const owners = ownersOf(device, models);
    const reserve = device.reserve_bytes || 0;
    const committed = device.committed_bytes ?? owners.reduce((s, o) => s + o.committed_bytes, 0);
    const free = device.free_bytes ?? Math.max(0, (device.budget_bytes || 0) - reserve - committed);
    const ownerSum = owners.reduce((s, o) => s + (o.committed_bytes || 0), 0);
    // The bar is as wide as its segments add up to, at least the budget: it never overflows.
    const total = Math.max(1, ownerSum + reserve + free, device.budget_bytes || 0);

    const bar = h('div', {class: 'device-bar', 'data-device': device.name});
    for (const o of owners) bar.append(ownerSegment(o, total));
    if (reserve > 0) bar.append(plainSegment('reserve', reserve, total, `reserve: ${fmtBytes(reserve)}`));
    bar.append(plainSegment('free', free, total, `free: ${fmtBytes(free)}`));

    const figures = [`${device.kind || 'device'}`, `budget ${fmtBytes(device.budget_bytes)}`,
      `committed ${fmtBytes(committed)}`, `free ${fmtBytes(free)}`];
    if (reserve) figures.push(`reserve ${fmtBytes(reserve)}`);
    if (typeof device.capacity_bytes === 'number') figures.push(`capacity ${fmtBytes(device.capacity_bytes)}`);
    if (typeof device.pressure_index === 'number') figures.push(`pressure ${device.pressure_index.toFixed(2)}`);
    const waiting = device.waiting_allocations;
    if (waiting) figures.push(`${waiting} allocation${waiting === 1 ? '' : 's'} waiting`);
    if (device.lent_bytes) figures.push(`KV lent ${fmtBytes(device.lent_bytes)}`);

    const legend = h('div', {class: 'legend'});
    // An owner holding (next to) nothing keeps its segment in the bar, which tests compare with
    // /admin/models, but a legend line of "0.0 MiB" only clutters.
    for (const o of owners.filter((x) => x.committed_bytes >= LEGEND_MIN_BYTES)) {
      const parts = ownerParts(o);
      const swatch = h('span', {class: 'swatch'});
      swatch.style.backgroundColor = colourOf(parts.model, parts.part);
      legend.append(h('span', {class: 'legend-item'}, swatch, `${o.owner} ${fmtBytes(o.committed_bytes)}`));
    }
    return h('div', {class: 'device', 'data-device': device.name},
      h('h3', {}, device.name, ' ', h('span', {class: 'figures'}, figures.join(' · '))),
      bar, legend, gpuLine(device.gpu));
  }

  function renderDevices(container, devices, models) {
    container.replaceChildren(...devices.map((d) => deviceBlock(d, models)));
  }

  // ---- History: a stacked area of bytes by model per device, and the pressure index. ----

  // The samples of one device: [{time, budget, pressure, models: {name: bytes}}].
  function seriesOf(history, deviceName) {
    const out = [];
    for (const s of history.samples || []) {
      const d = (s.devices || []).find((x) => x.name === deviceName);
      if (d) out.push({time: s.time, budget: d.budget_bytes, pressure: d.pressure_index, models: d.models || {}});
    }
    return out;
  }

  // Sizes the canvas to its CSS box times the pixel ratio, so lines stay sharp.
  function fitCanvas(canvas) {
    const ratio = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 600;
    const ht = canvas.clientHeight || 150;
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(ht * ratio);
    const ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    return {ctx, w, ht};
  }

  // The next round number at or above v (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten),
  // so that the axis reads 0.06 rather than 0.0575.
  function niceCeil(v) {
    const power = 10 ** Math.floor(Math.log10(v));
    const step = [1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].find((s) => s * power >= v * (1 - 1e-9));
    return step * power;
  }

  function drawHistory(canvas, series, windowSeconds) {
    const {ctx, w, ht} = fitCanvas(canvas);
    const pad = {l: 64, r: 58, t: 8, b: 18};
    const pw = w - pad.l - pad.r;
    const ph = ht - pad.t - pad.b;
    ctx.clearRect(0, 0, w, ht);
    ctx.font = '11px ui-monospace, monospace';
    if (series.length === 0) return;

    // Time: from the oldest sample (at most the window ago, at least a minute) to the newest.
    const now = series[series.length - 1].time;
    const start = Math.min(now - 60, Math.max(series[0].time, now - (windowSeconds || 600)));
    const names = modelNames(series);
    // Bytes: scaled to what the models hold, so that 500 MiB of a 22 GiB budget still shows; the
    // budget line is drawn only when it is on that scale.
    const held = Math.max(1, ...series.map((s) => Object.values(s.models).reduce((a, b) => a + b, 0)));
    const budget = Math.max(0, ...series.map((s) => s.budget || 0));
    const stackMax = budget && budget <= 1.5 * held ? budget : held * 1.15;
    // Pressure is usually a few hundredths: its axis is scaled to what was seen (a fixed 0..1
    // would flatten the line onto zero), with a floor so that noise at 0.001 stays small.
    const pMax = niceCeil(Math.max(0.05, 1.25 * Math.max(0, ...series.map((s) => s.pressure || 0))));
    const x = (t) => pad.l + pw * (t - start) / (now - start || 1);
    const y = (bytes) => pad.t + ph - ph * bytes / stackMax;

    // Stacked areas, bottom to top in name order (each model keeps its place).
    const base = series.map(() => 0);
    for (const name of names) {
      const top = series.map((s, i) => base[i] + (s.models[name] || 0));
      ctx.beginPath();
      series.forEach((s, i) => (i ? ctx.lineTo(x(s.time), y(top[i])) : ctx.moveTo(x(s.time), y(top[i]))));
      for (let i = series.length - 1; i >= 0; i--) ctx.lineTo(x(series[i].time), y(base[i]));
      ctx.closePath();
      ctx.fillStyle = colourOf(name, 'kv');
      ctx.fill();
      top.forEach((v, i) => { base[i] = v; });
    }
    // The budget as a dashed line (when on scale), the pressure index in red on its own axis (right).
    if (budget <= stackMax) {
      ctx.setLineDash([4, 3]);
      ctx.strokeStyle = '#555';
      ctx.beginPath();
      series.forEach((s, i) => (i ? ctx.lineTo(x(s.time), y(s.budget || 0)) : ctx.moveTo(x(s.time), y(s.budget || 0))));
      ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.strokeStyle = '#c0392b';
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    const yp = (p) => pad.t + ph - ph * (p || 0) / pMax;
    series.forEach((s, i) => (i ? ctx.lineTo(x(s.time), yp(s.pressure)) : ctx.moveTo(x(s.time), yp(s.pressure))));
    ctx.stroke();
    ctx.lineWidth = 1;

    // Axes' labels: bytes left, pressure right, minutes ago below.
    ctx.fillStyle = '#333';
    ctx.textAlign = 'right';
    ctx.fillText(fmtBytes(stackMax), pad.l - 4, pad.t + 9);
    ctx.fillText('0', pad.l - 4, pad.t + ph);
    ctx.textAlign = 'left';
    ctx.fillStyle = '#c0392b';
    const tick = (v) => String(Number(v.toPrecision(2)));
    ctx.fillText(tick(pMax), w - pad.r + 4, pad.t + 9);
    ctx.fillText(tick(pMax / 2), w - pad.r + 4, pad.t + ph / 2 + 4);
    ctx.fillText('0', w - pad.r + 4, pad.t + ph);
    // The right axis' name, written upwards along the edge.
    ctx.save();
    ctx.translate(w - 6, pad.t + ph / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'center';
    ctx.fillText('pressure', 0, 0);
    ctx.restore();
    ctx.fillStyle = '#333';
    ctx.textAlign = 'center';
    const span = now - start;
    const step = [15, 30, 60, 120, 300].find((st) => span / st <= 6) || 600;
    for (let ago = 0; ago <= span; ago += step) {
      const label = ago === 0 ? 'now' : ago < 120 ? `−${ago} s` : `−${ago / 60} min`;
      ctx.fillText(label, x(now - ago), ht - 4);
    }
    if (budget > stackMax) {
      ctx.textAlign = 'left';
      ctx.fillText(`budget ${fmtBytes(budget)} (off this scale)`, pad.l + 6, pad.t + 12);
    }
    ctx.strokeStyle = '#999';
    ctx.strokeRect(pad.l, pad.t, pw, ph);
  }

  // Every model of the samples, and those that held a legend's worth at some point in the window
  // (a pipeline's few KiB draw nothing visible on a scale of hundreds of MiB).
  function modelNames(series, minBytes = 0) {
    const names = new Set();
    for (const s of series) {
      for (const [name, bytes] of Object.entries(s.models)) if (bytes >= minBytes) names.add(name);
    }
    return [...names].sort();
  }

  function historyLegend(series) {
    const names = modelNames(series, LEGEND_MIN_BYTES);
    const legend = h('div', {class: 'legend'});
    for (const name of names) {
      const swatch = h('span', {class: 'swatch'});
      swatch.style.backgroundColor = colourOf(name, 'kv');
      legend.append(h('span', {class: 'legend-item'}, swatch, name));
    }
    legend.append(h('span', {class: 'legend-item legend-budget'}, '- - budget'),
      h('span', {class: 'legend-item legend-pressure'}, '— pressure index (right axis)'));
    return legend;
  }

  // One chart per device; canvases are kept between renders so only pixels change.
  function renderHistory(container, history) {
    const names = [...new Set((history.samples || []).flatMap((s) => (s.devices || []).map((d) => d.name)))];
    const wanted = new Set(names);
    for (const el of [...container.children]) if (!wanted.has(el.dataset.device)) el.remove();
    for (const name of names) {
      let block = [...container.children].find((el) => el.dataset.device === name);
      if (!block) {
        block = h('div', {class: 'history-chart', 'data-device': name},
          h('h4', {}, name), h('canvas', {class: 'chart'}), h('div', {class: 'legend'}));
        container.append(block);
      }
      const series = seriesOf(history, name);
      drawHistory(block.querySelector('canvas'), series, history.window_seconds);
      block.querySelector('.legend').replaceWith(historyLegend(series));
    }
  }

  return {h, fmtBytes, fmtNum, colourOf, renderDevices, renderHistory};
})();
