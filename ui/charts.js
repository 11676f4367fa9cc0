// charts.js — the pictures, drawn here (no library): the best-so-far curve
// with every evaluation (SVG), curves overlaid (SVG), the profile's bounds
// as bars (SVG), a sparkline (SVG) and the engine timeline of a trace.json
// (canvas, zoom and hover).

import { h, s, ns, pct } from './dom.js';

const W = 760;
const H = 260;
const M = { l: 70, r: 16, t: 12, b: 34 };
export const PALETTE = ['#1f5fa8', '#b44d12', '#2d7d46', '#7a3fb0'];

function scaleY(values) {
  const v = values.filter((x) => x !== null && x !== undefined && isFinite(x) && x > 0);
  let lo = v.length ? Math.min(...v) : 1;
  let hi = v.length ? Math.max(...v) : 2;
  if (hi === lo) { lo *= 0.9; hi *= 1.1; }
  const log = hi / lo > 20;
  const f = log ? Math.log : (x) => x;
  const a = f(lo);
  const b = f(hi);
  const y = (x) => M.t + (H - M.t - M.b) * (1 - (f(x) - a) / (b - a));
  const ticks = [];
  for (let i = 0; i <= 4; i++) ticks.push(log ? Math.exp(a + (b - a) * i / 4) : lo + (hi - lo) * i / 4);
  return { y, ticks, log };
}

function axes(svg, sy, nx, xlabel, xOf) {
  const base = H - M.b;
  svg.append(s('line', { x1: M.l, y1: base, x2: W - M.r, y2: base, class: 'axis' }));
  svg.append(s('line', { x1: M.l, y1: M.t, x2: M.l, y2: base, class: 'axis' }));
  for (const t of sy.ticks) {
    const y = sy.y(t);
    svg.append(s('line', { x1: M.l, y1: y, x2: W - M.r, y2: y, class: 'grid' }));
    svg.append(s('text', { x: M.l - 6, y: y + 4, 'text-anchor': 'end', class: 'tick' }, ns(t)));
  }
  const step = Math.max(1, Math.ceil(nx / 10));
  for (let i = 0; i < nx; i += step)
    svg.append(s('text', { x: xOf(i), y: base + 16, 'text-anchor': 'middle', class: 'tick' }, String(i)));
  svg.append(s('text', { x: (M.l + W - M.r) / 2, y: H - 4, 'text-anchor': 'middle', class: 'tick' }, xlabel));
}

// What became of one evaluation: correct; wrong (validation failed);
// unchecked (timed but not validated: the agent validates only a candidate
// faster than the best); rejected (no latency: did not compile or run).
export function outcome(it) {
  if (it.correct) return 'correct';
  const v = it.validation || {};
  if (v.status === 'fail' || v.pass === false) return 'wrong';
  return it.latency_ns > 0 ? 'unchecked' : 'rejected';
}

// The best-so-far curve of a job's iterations (in attempt, seq order), every
// evaluation marked: correct (dot), wrong (cross), timed but not validated
// (ring), rejected or not compiled (triangle on the axis).  onPick(it) when a mark is chosen.
export function curve(iters, onPick) {
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart curve', role: 'img' });
  const lat = iters.map((i) => i.latency_ns);
  const sy = scaleY(lat.concat(iters.map((i) => i.best_so_far_ns)));
  const n = iters.length;
  const xOf = (i) => M.l + (W - M.l - M.r) * (n <= 1 ? 0.5 : i / (n - 1));
  const ok = iters.filter((i) => i.correct && i.latency_ns > 0).length;
  svg.setAttribute('aria-label', `best-so-far latency over ${n} evaluations, ${ok} correct`);
  axes(svg, sy, n, 'evaluation (attempt, seq order)', xOf);
  let path = '';
  iters.forEach((it, i) => {
    if (it.best_so_far_ns > 0) path += `${path ? 'L' : 'M'}${xOf(i).toFixed(1)},${sy.y(it.best_so_far_ns).toFixed(1)}`;
    if (i > 0 && iters[i - 1].attempt !== it.attempt) path = path.replace(/L([^L]*)$/, 'M$1');
  });
  if (path) svg.append(s('path', { d: path, class: 'best' }));
  let marks = 0;
  iters.forEach((it, i) => {
    const x = xOf(i);
    const tip = `attempt ${it.attempt} seq ${it.seq} ${it.action || ''}: ${ns(it.latency_ns)}` +
      `${it.fraction_of_bound != null ? ', ' + pct(it.fraction_of_bound) + ' of bound' : ''}` +
      ` — ${outcome(it)}`;
    const o = outcome(it);
    let g;
    if (o === 'correct') {
      g = s('circle', { cx: x, cy: sy.y(it.latency_ns), r: 4, class: 'pt ok' });
    } else if (o === 'unchecked') {
      g = s('circle', { cx: x, cy: sy.y(it.latency_ns), r: 4, class: 'pt unchecked' });
    } else if (o === 'wrong' && it.latency_ns > 0) {
      const y = sy.y(it.latency_ns);
      g = s('path', { d: `M${x - 4},${y - 4}L${x + 4},${y + 4}M${x - 4},${y + 4}L${x + 4},${y - 4}`, class: 'pt wrong' });
    } else {
      const y = H - M.b;
      g = s('path', { d: `M${x},${y - 8}L${x - 5},${y}L${x + 5},${y}Z`, class: 'pt rejected' });
    }
    g.append(s('title', {}, tip));
    g.setAttribute('data-seq', it.seq);
    if (onPick) {
      // Each mark is reachable with Tab and opens its iteration with Enter.
      g.setAttribute('tabindex', '0');
      g.setAttribute('role', 'link');
      g.setAttribute('aria-label', tip);
      g.addEventListener('click', () => onPick(it));
      g.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); onPick(it); } });
    }
    svg.append(g);
    marks++;
  });
  svg.setAttribute('data-marks', marks);
  return svg;
}

// Curves overlaid: series [{label, points: [[x, y|null], ...]}].
export function overlay(series) {
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart overlay', role: 'img',
    'aria-label': `best-so-far curves of ${series.length} runs` });
  const all = series.flatMap((c) => c.points.map((p) => p[1]));
  const sy = scaleY(all);
  const nx = Math.max(2, ...series.map((c) => c.points.length));
  const xOf = (i) => M.l + (W - M.l - M.r) * (i / (nx - 1));
  axes(svg, sy, nx, 'iteration', xOf);
  let marks = 0;
  series.forEach((c, k) => {
    let d = '';
    c.points.forEach((p, i) => {
      if (p[1] > 0) { d += `${d ? 'L' : 'M'}${xOf(i).toFixed(1)},${sy.y(p[1]).toFixed(1)}`; marks++; }
    });
    // Dashes from the second run on: identical curves stay told apart.
    if (d) svg.append(s('path', { d, class: 'series', stroke: PALETTE[k % PALETTE.length], 'stroke-dasharray': k ? `${8 - 2 * k} 4` : null }));
  });
  svg.setAttribute('data-marks', marks);
  return svg;
}

// Horizontal bars: [{label, value, max, text}].
export function bars(rows, title) {
  const bh = 22;
  const hh = rows.length * bh + 8;
  const svg = s('svg', { viewBox: `0 0 ${W} ${hh}`, class: 'chart bars', role: 'img', 'aria-label': title });
  rows.forEach((r, i) => {
    const y = 4 + i * bh;
    const frac = r.max > 0 ? Math.max(0, Math.min(1, r.value / r.max)) : 0;
    svg.append(s('text', { x: 170, y: y + 15, 'text-anchor': 'end', class: 'tick' }, r.label));
    svg.append(s('rect', { x: 178, y: y + 3, width: 440, height: bh - 8, class: 'track' }));
    svg.append(s('rect', { x: 178, y: y + 3, width: (440 * frac).toFixed(1), height: bh - 8, class: r.cls || 'bar' }));
    svg.append(s('text', { x: 626, y: y + 15, class: 'tick' }, r.text));
  });
  return svg;
}

// A sparkline of values (oldest first), for a table cell.
export function sparkline(values, label) {
  const w = 120;
  const hh = 24;
  const svg = s('svg', { viewBox: `0 0 ${w} ${hh}`, class: 'spark', role: 'img', 'aria-label': label });
  const v = values.filter((x) => x > 0);
  if (v.length === 0) return svg;
  const lo = Math.min(...v);
  const hi = Math.max(...v);
  const x = (i) => (v.length === 1 ? w / 2 : 2 + (w - 4) * i / (v.length - 1));
  const y = (val) => (hi === lo ? hh / 2 : 2 + (hh - 4) * (1 - (val - lo) / (hi - lo)));
  svg.append(s('path', { d: v.map((val, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(val).toFixed(1)}`).join(''), class: 'sparkline' }));
  svg.append(s('circle', { cx: x(v.length - 1), cy: y(v[v.length - 1]), r: 2.5, class: 'pt ok' }));
  return svg;
}

// The profile's bounds against the latency: each bound is a floor on the
// time; the bar says how close the kernel runs to it.
export function boundsBars(profile) {
  const b = profile.bounds || {};
  const total = profile.total_time_ns || profile.latency_ns || (profile.summary && profile.summary.total_time * 1e9);
  const rows = [];
  const add = (label, v) => { if (v > 0 && total > 0) rows.push({ label, value: v, max: total, text: `${ns(v)} (${pct(v / total)})` }); };
  if (total > 0) rows.push({ label: 'latency', value: total, max: total, text: ns(total), cls: 'bar total' });
  add('compute bound', b.compute_ns);
  add('memory bound', b.memory_ns);
  add('necessary I/O', b.necessary_io_ns);
  add(`pipeline (${b.pipeline_engine || 'engine'})`, b.pipeline_ns);
  if (!rows.length || rows.length === 1) add('floor', profile.floor_ns);
  const sum = profile.summary || profile;
  for (const [k, label] of [['tensor_engine_active_time_percent', 'TensorE active'],
    ['vector_engine_active_time_percent', 'VectorE active'], ['scalar_engine_active_time_percent', 'ScalarE active'],
    ['gpsimd_engine_active_time_percent', 'GpSimd active'], ['dma_active_time_percent', 'DMA active'],
    ['mfu_estimated_percent', 'MFU'], ['mbu_estimated_percent', 'MBU']])
    if (typeof sum[k] === 'number') rows.push({ label, value: sum[k], max: 100, text: sum[k].toFixed(1) + '%', cls: 'bar pct' });
  return bars(rows, 'profile bounds and engine activity');
}

const ENGINE_COLOURS = { tensor: '#1f5fa8', vector: '#2d7d46', scalar: '#a16207', gpsimd: '#7a3fb0', sync: '#4b5563' };
const engineColour = (name) => ENGINE_COLOURS[name] || (String(name).startsWith('dma') ? '#b44d12' : '#4b5563');

// Parse a Chrome trace (trace.json) into tracks: [{name, events: [{ts, dur,
// name, args}]}] sorted by sort_index, events by start (µs).
export function traceTracks(doc) {
  const names = new Map();
  const order = new Map();
  const byTid = new Map();
  for (const e of (doc && doc.traceEvents) || []) {
    if (e.ph === 'M' && e.name === 'thread_name') names.set(e.tid, e.args && e.args.name);
    else if (e.ph === 'M' && e.name === 'thread_sort_index') order.set(e.tid, e.args && e.args.sort_index);
    else if (e.ph === 'X') {
      if (!byTid.has(e.tid)) byTid.set(e.tid, []);
      byTid.get(e.tid).push({ ts: +e.ts, dur: +e.dur || 0, name: e.name, args: e.args || {} });
    }
  }
  const tracks = [...byTid.entries()].map(([tid, events]) => ({
    tid, name: names.get(tid) || `track ${tid}`, order: order.has(tid) ? order.get(tid) : tid,
    events: events.sort((a, b) => a.ts - b.ts),
  }));
  return tracks.sort((a, b) => a.order - b.order);
}

// The engine timeline: one row per track, zoom (wheel, buttons, + and -
// keys), pan (drag, arrow keys), hover naming the instruction and its
// source line.  Returns the element; its canvas carries data-rows and
// data-drawn (rectangles painted last).
export function timeline(tracks) {
  const rowH = 20;
  const gutter = 92;
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const t of tracks) for (const e of t.events) { t0 = Math.min(t0, e.ts); t1 = Math.max(t1, e.ts + e.dur); }
  if (!isFinite(t0)) { t0 = 0; t1 = 1; }
  const full = [t0, t1 > t0 ? t1 : t0 + 1];
  let view = full.slice();
  const canvas = h('canvas', { class: 'timeline', tabindex: 0, role: 'img',
    'aria-label': `engine timeline: ${tracks.length} tracks; + and - zoom, arrows pan, 0 resets` });
  const tip = h('div', { class: 'tip', role: 'tooltip', hidden: true });
  const range = h('span', { class: 'muted' });
  const wrap = h('div', { class: 'timeline-wrap' }, canvas, tip);

  function width() { return Math.max(600, wrap.clientWidth || 1000); }
  function draw() {
    const w = width();
    const hh = tracks.length * rowH + 24;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(hh * dpr);
    canvas.style.width = w + 'px';
    canvas.style.height = hh + 'px';
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = '#ffffff';
    g.fillRect(0, 0, w, hh);
    g.font = '12px system-ui, sans-serif';
    const span = view[1] - view[0];
    const px = (w - gutter - 8) / span;
    let drawn = 0;
    tracks.forEach((t, r) => {
      const y = r * rowH;
      g.fillStyle = r % 2 ? '#f3f4f6' : '#ffffff';
      g.fillRect(0, y, w, rowH);
      g.fillStyle = '#111827';
      g.fillText(t.name, 6, y + 14);
      g.fillStyle = engineColour(t.name);
      for (const e of t.events) {
        if (e.ts + e.dur < view[0] || e.ts > view[1]) continue;
        const x = gutter + (e.ts - view[0]) * px;
        g.fillRect(Math.max(gutter, x), y + 3, Math.max(1, e.dur * px), rowH - 6);
        drawn++;
      }
    });
    g.fillStyle = '#374151';
    const base = tracks.length * rowH + 16;
    for (let i = 0; i <= 4; i++) {
      const tt = view[0] + span * i / 4;
      g.fillText(`${tt.toFixed(2)} µs`, Math.min(w - 70, gutter + (w - gutter - 8) * i / 4), base);
    }
    canvas.dataset.rows = String(tracks.length);
    canvas.dataset.drawn = String(drawn);
    range.textContent = `showing ${view[0].toFixed(2)}–${view[1].toFixed(2)} µs of ${full[1].toFixed(2)} µs`;
  }
  function zoom(f, at) {
    const c = at === undefined ? (view[0] + view[1]) / 2 : at;
    let a = c - (c - view[0]) * f;
    let b = c + (view[1] - c) * f;
    const min = 1e-3;
    if (b - a < min) { a = c - min / 2; b = c + min / 2; }
    view = [Math.max(full[0], a), Math.min(full[1], b)];
    draw();
  }
  function pan(dt) {
    const span = view[1] - view[0];
    const a = Math.max(full[0], Math.min(full[1] - span, view[0] + dt));
    view = [a, a + span];
    draw();
  }
  const timeAt = (x) => view[0] + (x - gutter) * (view[1] - view[0]) / (width() - gutter - 8);
  canvas.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const rect = canvas.getBoundingClientRect();
    zoom(ev.deltaY < 0 ? 0.8 : 1.25, timeAt(ev.clientX - rect.left));
  }, { passive: false });
  canvas.addEventListener('keydown', (ev) => {
    const span = view[1] - view[0];
    if (ev.key === '+' || ev.key === '=') zoom(0.8);
    else if (ev.key === '-') zoom(1.25);
    else if (ev.key === '0') { view = full.slice(); draw(); }
    else if (ev.key === 'ArrowLeft') pan(-span / 10);
    else if (ev.key === 'ArrowRight') pan(span / 10);
    else return;
    ev.preventDefault();
  });
  let drag = null;
  canvas.addEventListener('mousedown', (ev) => { drag = { x: ev.clientX, v: view.slice() }; });
  window.addEventListener('mouseup', () => { drag = null; });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  canvas.addEventListener('mousemove', (ev) => {
    const rect = canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left;
    const y = ev.clientY - rect.top;
    if (drag) {
      const per = (drag.v[1] - drag.v[0]) / (width() - gutter - 8);
      view = drag.v.slice();
      pan(-(ev.clientX - drag.x) * per);
      return;
    }
    const t = tracks[Math.floor(y / rowH)];
    const e = t && x > gutter ? hit(t.events, timeAt(x), 3 * (view[1] - view[0]) / (width() - gutter)) : null;
    if (!e) { tip.hidden = true; return; }
    const a = e.args;
    tip.replaceChildren(
      h('strong', {}, e.name), ` on ${t.name}`, h('br'),
      `#${a.index ?? '?'} at ${e.ts.toFixed(3)} µs for ${(e.dur * 1000).toFixed(0)} ns`, h('br'),
      `source: ${a.nki_source_location || 'unknown'}`,
      a.wait_cause || a.wait ? h('span', {}, h('br'), `waited: ${a.wait_cause || a.wait} ${a.wait_ns != null ? a.wait_ns + ' ns' : ''}`) : null,
      a.bytes ? h('span', {}, h('br'), `${a.bytes} bytes`) : null);
    tip.hidden = false;
    tip.style.left = Math.min(x + 12, width() - 260) + 'px';
    tip.style.top = (y + 14) + 'px';
  });
  const btn = (label, fn) => h('button', { type: 'button', onclick: fn }, label);
  const controls = h('div', { class: 'controls' },
    btn('Zoom in', () => zoom(0.5)), btn('Zoom out', () => zoom(2)), btn('Reset', () => { view = full.slice(); draw(); }), ' ', range);
  const el = h('div', {}, controls, wrap);
  requestAnimationFrame(draw);
  window.addEventListener('resize', draw);
  el.redraw = draw;
  return el;
}

// The event of sorted events under time t (within slack), or null.
function hit(events, t, slack) {
  let lo = 0;
  let hi = events.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (events[mid].ts <= t) lo = mid; else hi = mid - 1;
  }
  for (const i of [lo, lo + 1, lo - 1]) {
    const e = events[i];
    if (e && t >= e.ts - slack && t <= e.ts + e.dur + slack) return e;
  }
  return null;
}
