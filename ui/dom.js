// dom.js — building DOM without innerHTML (every text the API returns is
// set as text, never parsed as markup), number formats, the confirmation
// dialog and a line diff.

const SVGNS = 'http://www.w3.org/2000/svg';

function put(el, attrs, kids) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of kids.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export const h = (tag, attrs, ...kids) => put(document.createElement(tag), attrs, kids);
export const s = (tag, attrs, ...kids) => put(document.createElementNS(SVGNS, tag), attrs, kids);

export function ns(v) {
  if (v === null || v === undefined || !isFinite(v)) return '—';
  if (v >= 1e9) return (v / 1e9).toFixed(3) + ' s';
  if (v >= 1e6) return (v / 1e6).toFixed(3) + ' ms';
  if (v >= 1e3) return (v / 1e3).toFixed(2) + ' µs';
  return Math.round(v) + ' ns';
}

export const pct = (v) => (v === null || v === undefined || !isFinite(v) ? '—' : (v * 100).toFixed(1) + '%');
// The last 8 hex digits of an id: kforge's ids are UUIDv7, whose first
// digits are the creation time, the same for ids made in the same instant.
export const short = (id) => (id ? String(id).slice(-8) : '—');
export const when = (t) => (t ? new Date(t).toLocaleString() : '—');
export const json = (v) => (v === null || v === undefined ? '—' : JSON.stringify(v));

export function labels(obj) {
  return Object.entries(obj || {}).map(([k, v]) => h('span', { class: 'tag' }, `${k}=${v}`));
}

export function status(text, isError) {
  const el = document.getElementById('status');
  el.textContent = text || '';
  el.className = isError ? 'error' : '';
}

// A confirmation in the page's own modal <dialog> (keyboard: Esc says no).
export function confirmDialog(text, yes) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-ok').textContent = yes || 'Yes';
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.returnValue = '';
    d.showModal();
  });
}

// A line diff of a against b as [[' '|'-'|'+', line], ...] (longest common
// subsequence); texts too large for the table get one replacing hunk
// between their common head and tail.
export function diffLines(a, b) {
  const x = (a || '').split('\n');
  const y = (b || '').split('\n');
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail);
  const ys = y.slice(head, y.length - tail);
  const out = x.slice(0, head).map((l) => [' ', l]);
  const n = xs.length;
  const m = ys.length;
  if (n * m > 4e6) {
    xs.forEach((l) => out.push(['-', l]));
    ys.forEach((l) => out.push(['+', l]));
  } else {
    const L = new Int32Array((n + 1) * (m + 1));
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        L[i * (m + 1) + j] = xs[i] === ys[j] ? L[(i + 1) * (m + 1) + j + 1] + 1
          : Math.max(L[(i + 1) * (m + 1) + j], L[i * (m + 1) + j + 1]);
    let i = 0;
    let j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && xs[i] === ys[j]) { out.push([' ', xs[i]]); i++; j++; }
      else if (j < m && (i === n || L[i * (m + 1) + j + 1] >= L[(i + 1) * (m + 1) + j])) { out.push(['+', ys[j]]); j++; }
      else { out.push(['-', xs[i]]); i++; }
    }
  }
  x.slice(x.length - tail).forEach((l) => out.push([' ', l]));
  return out;
}

// A <pre> of a diff: [[kind, line]] or a unified diff text.
export function diffBlock(d, label) {
  const rows = typeof d === 'string'
    ? d.split('\n').map((l) => [l[0] === '+' || l[0] === '-' || l[0] === '@' ? l[0] : ' ', l])
    : d.map(([k, l]) => [k, k + ' ' + l]);
  return h('pre', { class: 'diff', tabindex: 0, 'aria-label': label },
    rows.map(([k, l]) => h('span', { class: k === '+' ? 'add' : k === '-' ? 'del' : k === '@' ? 'hunk' : '' }, l + '\n')));
}
