// views.js — one function per view.  Each takes (main, route, signal):
// route = {parts, params} from the URL's hash, signal aborts its fetches
// and streams when the person leaves the view.

import { api, qs, stream, isAdmin } from './api.js';
import { h, ns, pct, short, when, json, labels, status, confirmDialog, diffLines, diffBlock } from './dom.js';
import { outcome, curve, overlay, boundsBars, sparkline, traceTracks, timeline, PALETTE } from './charts.js';

const STATES = ['', 'queued', 'running', 'retrying', 'succeeded', 'failed', 'cancelled', 'dead'];
const KINDS = ['', 'generate', 'optimize', 'profile', 'validate', 'auto', 'diag'];
const ENDED = new Set(['succeeded', 'failed', 'cancelled', 'dead']);

const errorBox = (e) => h('p', { class: 'error', role: 'alert' }, String(e.message || e));
const section = (title, ...kids) => h('section', { 'aria-label': title }, h('h2', {}, title), ...kids);
const stateBadge = (st) => h('span', { class: `state state-${st}` }, st);
const link = (href, text) => h('a', { href }, text);

// Run a view's loader, turning an error into a message in place.
async function guard(main, signal, fn) {
  try {
    await fn();
  } catch (e) {
    if (signal.aborted) return;
    main.append(errorBox(e));
    status(String(e.message || e), true);
  }
}

// ---- Jobs: the live list ---------------------------------------------------

function jobRow(j, actions) {
  const op = (j.spec && j.spec.op) || (j.spec && j.spec.entry) || '—';
  const best = j.best || {};
  const tr = h('tr', { 'data-id': j.id },
    h('td', {}, h('input', { type: 'checkbox', class: 'pick', 'aria-label': `select ${short(j.id)} to compare`, value: j.id })),
    h('td', {}, link(`#/jobs/${j.id}`, short(j.id))),
    h('td', { class: 'c-state' }, stateBadge(j.state)),
    h('td', {}, j.kind), h('td', {}, op), h('td', {}, j.target), h('td', {}, j.backend || '—'),
    h('td', { class: 'num c-best' }, ns(best.latency_ns)),
    h('td', { class: 'num c-frac' }, pct(best.fraction_of_bound)),
    h('td', { class: 'c-owner' }, j.owner || '—'),
    h('td', {}, labels(j.labels)),
    h('td', {}, when(j.created_at)),
    h('td', { class: 'c-act' }, actions(j)));
  return tr;
}

export async function jobsView(main, route, signal) {
  const p = route.params;
  const form = h('form', { class: 'filters', 'aria-label': 'filters' },
    h('label', {}, 'State ', h('select', { name: 'state' }, STATES.map((v) => h('option', { value: v, selected: p.state === v }, v || 'any')))),
    h('label', {}, 'Kind ', h('select', { name: 'kind' }, KINDS.map((v) => h('option', { value: v, selected: p.kind === v }, v || 'any')))),
    h('label', {}, 'Op ', h('input', { name: 'op', value: p.op || '', size: 10 })),
    h('label', {}, 'Target ', h('input', { name: 'target', value: p.target || '', size: 6 })),
    h('label', {}, 'Label ', h('input', { name: 'label', value: p.label || '', size: 14, placeholder: 'KEY=VALUE' })),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const f = Object.fromEntries(new FormData(form).entries());
    location.hash = '#/jobs' + qs(f);
  });
  const tbody = h('tbody');
  const live = h('span', { class: 'live', id: 'live' }, 'connecting…');
  const compareBtn = h('button', { type: 'button', id: 'compare-selected' }, 'Compare selected');
  compareBtn.addEventListener('click', () => {
    const ids = [...tbody.querySelectorAll('input.pick:checked')].map((c) => c.value);
    if (ids.length < 2 || ids.length > 4) { status('choose 2 to 4 jobs to compare', true); return; }
    location.hash = '#/compare' + qs({ ids: ids.join(',') });
  });
  const more = h('button', { type: 'button', hidden: true }, 'Older jobs');
  main.append(h('h1', {}, 'Jobs'), form,
    h('p', { class: 'bar' }, compareBtn, ' ', live),
    h('table', { class: 'grid', id: 'jobs' },
      h('caption', { class: 'sr' }, 'jobs, newest first'),
      h('thead', {}, h('tr', {}, ['', 'Job', 'State', 'Kind', 'Op', 'Target', 'Backend', 'Best', 'Of bound', 'Owner', 'Labels', 'Created', 'Actions']
        .map((c) => h('th', { scope: 'col' }, c)))),
      tbody), more);

  const query = { state: p.state, kind: p.kind, op: p.op, target: p.target, limit: 100 };
  if (p.label && p.label.includes('=')) {
    const i = p.label.indexOf('=');
    query['label.' + p.label.slice(0, i)] = p.label.slice(i + 1);
  }
  const rows = new Map();
  const matches = (j) => (!p.state || j.state === p.state) && (!p.kind || j.kind === p.kind) &&
    (!p.target || j.target === p.target) && (!p.op || (j.spec && j.spec.op) === p.op);

  const actions = (j) => {
    const out = [];
    if (!ENDED.has(j.state))
      out.push(h('button', { type: 'button', class: 'cancel', onclick: () => act(j, 'cancel') }, 'Cancel'));
    if (isAdmin() && (j.state === 'dead' || j.state === 'failed' || j.state === 'cancelled'))
      out.push(h('button', { type: 'button', class: 'requeue', onclick: () => act(j, 'requeue') }, 'Requeue'));
    return out;
  };
  async function act(j, what) {
    const ok = await confirmDialog(`${what === 'cancel' ? 'Cancel' : 'Requeue'} job ${j.id} (${j.kind}, ${j.state})?`,
      what === 'cancel' ? 'Cancel the job' : 'Requeue the job');
    if (!ok) return;
    try {
      await api(`/v1/jobs/${j.id}/${what}`, { method: 'POST' });
      status(`${what} asked for job ${short(j.id)}`);
    } catch (e) {
      status(e.status === 403 ? `${what}: only an admin token may do that` : e.message, true);
    }
  }
  function put(j, top) {
    const tr = jobRow(j, actions);
    const old = rows.get(j.id);
    rows.set(j.id, j);
    const cur = tbody.querySelector(`tr[data-id="${CSS.escape(j.id)}"]`);
    if (cur) cur.replaceWith(tr);
    else if (top) tbody.prepend(tr);
    else tbody.append(tr);
    return old;
  }

  let cursor = null;
  async function page() {
    const res = await api('/v1/jobs' + qs(Object.assign({}, query, { cursor })), { signal });
    for (const j of res.jobs) put(j, false);
    cursor = res.next_cursor;
    more.hidden = !cursor;
  }
  more.addEventListener('click', () => guard(main, signal, page));
  await guard(main, signal, async () => {
    await page();
    main.dataset.ready = 'true';
    performance.mark('kforge-jobs-rendered');
  });

  // A job new to the list: the list's first page is read again (at most
  // every 300 ms, however many jobs arrive), so new rows come in the light
  // shape, filtered by the server like the rest, newest on top.
  let headTimer = null;
  function refreshHead() {
    if (headTimer) return;
    headTimer = setTimeout(async () => {
      headTimer = null;
      try {
        const res = await api('/v1/jobs' + qs(Object.assign({}, query, { limit: 20 })), { signal });
        for (const j of res.jobs.slice().reverse()) if (!rows.has(j.id)) put(j, true);
      } catch (e) { if (!signal.aborted) status(e.message, true); }
    }, 300);
  }
  signal.addEventListener('abort', () => clearTimeout(headTimer), { once: true });

  // Live: every event the token may see.
  const streamQ = p.kind ? qs({ kind: p.kind }) : '';
  stream('/v1/stream' + streamQ, async (type, d) => {
    const j = rows.get(d.job_id);
    if (type === 'state') {
      if (j) {
        j.state = d.to || j.state;
        put(j, false);
        if (!matches(j)) tbody.querySelector(`tr[data-id="${CSS.escape(j.id)}"]`).classList.add('stale');
      } else {
        refreshHead();
      }
    } else if (type === 'iteration' && j && d.correct && d.latency_ns > 0 &&
               (!j.best || !(j.best.latency_ns <= d.latency_ns))) {
      j.best = { attempt: d.attempt, seq: d.seq, latency_ns: d.latency_ns, fraction_of_bound: d.fraction_of_bound };
      put(j, false);
    }
  }, signal, (st) => { live.textContent = st === 'live' ? '● live' : st; });
}

// ---- Job: one run ----------------------------------------------------------

async function allIterations(id, signal) {
  const out = [];
  let cursor = null;
  do {
    const res = await api(`/v1/jobs/${id}/iterations` + qs({ limit: 500, cursor }), { signal });
    out.push(...res.items);
    cursor = res.next_cursor;
  } while (cursor && out.length < 5000);
  return out;
}

function iterTable(id, iters) {
  return h('table', { class: 'grid', id: 'iterations' },
    h('thead', {}, h('tr', {}, ['Attempt', 'Seq', 'Action', 'Params', 'Latency', 'Of bound', 'Result', 'Reason', 'Findings']
      .map((c) => h('th', { scope: 'col' }, c)))),
    h('tbody', {}, iters.map((it) => h('tr', { class: `o-${outcome(it)}` },
      h('td', {}, it.attempt), h('td', {}, link(`#/jobs/${id}/iterations/${it.seq}?attempt=${it.attempt}`, String(it.seq))),
      h('td', {}, it.action || '—'), h('td', { class: 'mono' }, json(it.params)),
      h('td', { class: 'num' }, ns(it.latency_ns)), h('td', { class: 'num' }, pct(it.fraction_of_bound)),
      h('td', {}, outcome(it) === 'unchecked' ? 'not validated' : outcome(it)),
      h('td', {}, it.reason || ''),
      h('td', {}, (it.findings || []).map((f) => h('span', { class: 'tag', title: f.message || '' }, f.code)))))));
}

function kv(obj) {
  return h('dl', { class: 'kv' }, Object.entries(obj || {}).flatMap(([k, v]) =>
    [h('dt', {}, k), h('dd', { class: 'mono' }, typeof v === 'object' ? json(v) : String(v))]));
}

async function download(sha, name) {
  const res = await api(`/v1/artifacts/${sha}`, { raw: true });
  const url = URL.createObjectURL(await res.blob());
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

export async function jobView(main, route, signal) {
  const id = route.parts[1];
  await guard(main, signal, async () => {
    const [job, iters, arts] = await Promise.all([
      api(`/v1/jobs/${id}`, { signal }), allIterations(id, signal), api(`/v1/jobs/${id}/artifacts`, { signal })]);
    const st = h('span', { id: 'job-state' }, stateBadge(job.state));
    const cancel = ENDED.has(job.state) ? null : h('button', { type: 'button', onclick: async () => {
      if (await confirmDialog(`Cancel job ${id}?`, 'Cancel the job')) {
        try { await api(`/v1/jobs/${id}/cancel`, { method: 'POST' }); status('cancel asked'); } catch (e) { status(e.message, true); }
      }
    } }, 'Cancel');
    const spec = job.spec || {};
    main.append(h('h1', {}, `Job ${short(id)} `, st, ' ', cancel),
      h('div', { class: 'cols' },
        kv({ id, kind: job.kind, op: spec.op || spec.entry || '—', target: job.target, backend: job.backend,
          shapes: spec.shapes, dtype: spec.dtype, attempt: `${job.attempt} of ${job.max_attempts}`,
          created: when(job.created_at), started: when(job.started_at), finished: when(job.finished_at),
          worker: job.worker_id || '—', labels: job.labels, last_error: job.last_error || '—',
          ...(job.waiting ? { waiting: job.waiting.reason } : {}) }),
        h('div', {}, h('h2', {}, 'Provenance'), kv(job.provenance))));

    const curveBox = h('div', { id: 'curve' });
    const drawCurve = () => curveBox.replaceChildren(curve(iters, (it) => {
      location.hash = `#/jobs/${id}/iterations/${it.seq}?attempt=${it.attempt}`;
    }));
    drawCurve();
    main.append(section('Best so far and every evaluation', curveBox,
      h('p', { class: 'legend' }, h('span', { class: 'key ok' }, '● correct'), h('span', { class: 'key wrong' }, '✕ wrong result'),
        h('span', { class: 'key unchecked' }, '○ timed, not validated (not faster)'),
        h('span', { class: 'key rejected' }, '▲ rejected / did not compile'), h('span', { class: 'key best' }, '— best so far'))));
    const tableBox = h('div', {}, iterTable(id, iters));
    main.append(section('Iterations', tableBox));

    // The best iteration: source against the attempt's first (the default), profile bounds.
    const best = iters.filter((i) => i.correct && i.latency_ns > 0).sort((a, b) => a.latency_ns - b.latency_ns || b.attempt - a.attempt || a.seq - b.seq)[0];
    if (best) {
      const first = iters.find((i) => i.attempt === best.attempt);
      const [bd, fd] = await Promise.all([
        api(`/v1/jobs/${id}/iterations/${best.seq}?attempt=${best.attempt}`, { signal }),
        first.seq === best.seq ? null : api(`/v1/jobs/${id}/iterations/${first.seq}?attempt=${first.attempt}`, { signal })]);
      main.append(section(`Best kernel (attempt ${best.attempt}, seq ${best.seq}: ${ns(best.latency_ns)})`,
        h('p', {}, 'Params: ', h('code', {}, json(best.params))),
        bd.source ? (fd && fd.source ? diffBlock(diffLines(fd.source, bd.source), 'best source, diff from the default kernel')
          : h('pre', { class: 'src', tabindex: 0 }, bd.source)) : h('p', { class: 'muted' }, 'source unknown')));
      main.append(section('Profile bounds', h('div', { id: 'bounds' }, boundsBars(Object.assign({}, best.profile, bd.profile || {})))));
    }

    // The engine timeline of the latest trace (the final set's first).
    const traces = (arts.items || []).filter((a) => a.name === 'trace.json');
    const trace = traces.find((a) => a.final) || traces[traces.length - 1];
    const tl = section('Engine timeline');
    main.append(tl);
    if (trace) {
      const doc = await api(`/v1/artifacts/${trace.sha256}`, { signal });
      tl.append(h('p', {}, `attempt ${trace.attempt}, seq ${trace.seq}${trace.final ? ' (final)' : ''} — `,
        h('button', { type: 'button', id: 'download-trace', onclick: () => download(trace.sha256, `trace-${short(id)}-${trace.seq}.json`).catch((e) => status(e.message, true)) },
          'Download trace.json'), ' (open it in Perfetto)'),
        h('div', { id: 'timeline' }, timeline(traceTracks(doc))));
    } else {
      tl.append(h('p', { class: 'muted' }, 'no trace yet'));
    }

    const log = h('ol', { id: 'events', class: 'events' });
    main.append(section('Events', log));
    main.dataset.ready = 'true';
    const addEvent = (type, d, eid) => log.append(h('li', {}, h('span', { class: 'muted' }, `#${eid ?? ''} ${when(d.at)} `),
      h('strong', {}, type === 'state' ? d.type || 'state' : type), ' ',
      type === 'state' ? `${d.from || ''} → ${d.to || ''} (attempt ${d.attempt ?? '—'})`
        : type === 'iteration' ? `seq ${d.seq}: ${ns(d.latency_ns)}${d.correct ? '' : ' (not correct)'}` : json(d)));
    const known = new Set(iters.map((i) => `${i.attempt}.${i.seq}`));
    stream(`/v1/jobs/${id}/stream`, (type, d, eid) => {
      if (type === 'end') { st.replaceChildren(stateBadge(d.state)); return; }
      addEvent(type, d, eid);
      if (type === 'state' && d.to) st.replaceChildren(stateBadge(d.to));
      if (type === 'iteration' && !known.has(`${d.attempt}.${d.seq}`)) {
        known.add(`${d.attempt}.${d.seq}`);
        iters.push({ attempt: d.attempt, seq: d.seq, params: d.params, latency_ns: d.latency_ns, correct: d.correct,
          fraction_of_bound: d.fraction_of_bound, best_so_far_ns: d.best_so_far_ns, action: '', findings: [] });
        drawCurve();
        tableBox.replaceChildren(iterTable(id, iters));
      }
    }, signal, () => {});
  });
}

export async function iterationView(main, route, signal) {
  const id = route.parts[1];
  const seq = route.parts[3];
  await guard(main, signal, async () => {
    const it = await api(`/v1/jobs/${id}/iterations/${seq}` + qs({ attempt: route.params.attempt }), { signal });
    main.append(h('h1', {}, `Job ${short(id)} · attempt ${it.attempt} · iteration ${it.seq}`),
      h('p', {}, link(`#/jobs/${id}`, '← back to the job')),
      kv({ action: it.action, reason: it.reason, params: it.params, latency: ns(it.latency_ns),
        'fraction of bound': pct(it.fraction_of_bound), correct: it.correct, validation: it.validation }),
      section('Findings', h('ul', {}, (it.findings || []).map((f) =>
        h('li', {}, h('strong', {}, f.code || f.kind || 'finding'), ` ${f.title || ''} — ${f.message || ''}`,
          f.cost_ns != null ? ` (costs about ${ns(f.cost_ns)})` : '')))),
      it.profile ? section('Profile bounds', boundsBars(it.profile)) : null,
      section('Change from the previous iteration', it.source_diff ? diffBlock(it.source_diff, 'source diff') : h('p', { class: 'muted' }, it.source_diff === '' ? 'source unchanged' : 'first iteration or unknown')),
      section('Source', it.source ? h('pre', { class: 'src', tabindex: 0 }, it.source) : h('p', { class: 'muted' }, 'unknown')));
    main.dataset.ready = 'true';
  });
}

// ---- Compare ---------------------------------------------------------------

export async function compareView(main, route, signal) {
  const ids = (route.params.ids || '').split(',').filter(Boolean);
  const form = h('form', { class: 'filters' }, h('label', {}, 'Job ids (2–4, comma-separated) ',
    h('input', { name: 'ids', value: ids.join(','), size: 80 })), h('button', { type: 'submit' }, 'Compare'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    location.hash = '#/compare' + qs({ ids: new FormData(form).get('ids').replace(/\s+/g, '') });
  });
  main.append(h('h1', {}, 'Compare'), form);
  if (ids.length < 2) { main.append(h('p', { class: 'muted' }, 'Pick 2 to 4 jobs in the Jobs view, or paste their ids.')); return; }
  await guard(main, signal, async () => {
    const c = await api('/v1/compare' + qs({ jobs: ids.join(',') }), { signal });
    const head = h('tr', {}, h('th', { scope: 'col' }, ''), c.jobs.map((j, k) =>
      h('th', { scope: 'col' }, h('span', { class: 'swatch', 'data-k': k }), link(`#/jobs/${j.id}`, short(j.id)))));
    const row = (label, f) => h('tr', {}, h('th', { scope: 'row' }, label), c.jobs.map((j) => h('td', {}, f(j))));
    main.append(h('div', { id: 'compare-curves' }, overlay(c.jobs.map((j) => ({ label: short(j.id), points: j.curve || [] })))),
      h('p', { class: 'legend' }, c.jobs.map((j, k) => h('span', { class: 'key', 'data-k': k }, `■ ${short(j.id)} `))),
      h('table', { class: 'grid', id: 'compare' }, h('thead', {}, head), h('tbody', {},
        row('state', (j) => stateBadge(j.state)), row('op', (j) => j.op || '—'), row('target', (j) => j.target),
        row('best', (j) => ns(j.best && j.best.latency_ns)), row('of bound', (j) => pct(j.best && j.best.fraction_of_bound)),
        row('findings', (j) => (j.findings || []).map((f) => h('span', { class: 'tag' }, f))))));
    const deltaRows = (obj, f) => Object.entries(obj || {}).map(([k, v]) => h('tr', {}, h('th', { scope: 'row' }, k), f(v)));
    const idHead = () => h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, ''), c.jobs.map((j) => h('th', { scope: 'col' }, short(j.id)))));
    main.append(section('Params that differ', Object.keys(c.params_differ || {}).length
      ? h('table', { class: 'grid' }, idHead(), h('tbody', {},
        deltaRows(c.params_differ, (v) => v.map((x) => h('td', { class: 'mono' }, json(x))))))
      : h('p', { class: 'muted' }, 'none: the best runs have the same params')));
    main.append(section('Profile deltas (against the first)', h('table', { class: 'grid' }, idHead(), h('tbody', {},
      deltaRows(c.profile_deltas, (v) => v.values.map((x, i) => h('td', { class: 'num' },
        `${x == null ? '—' : +x.toPrecision(6)}${i && v.delta[i] != null ? ` (${v.delta[i] > 0 ? '+' : ''}${+v.delta[i].toPrecision(4)})` : ''}`)))))));
    main.append(section('Findings only one run has', h('ul', {}, Object.entries(c.findings_only || {}).map(([k, v]) =>
      h('li', {}, `${short(k)}: `, v.length ? v.map((f) => h('span', { class: 'tag' }, f)) : 'none')))));
    main.append(section('Source against the first run', (c.source_diff || []).map((d, i) =>
      h('div', {}, h('h3', {}, short(c.jobs[i + 1].id)), d === null ? h('p', { class: 'muted' }, 'a source is unknown')
        : d === '' ? h('p', {}, 'same source') : diffBlock(d, 'source diff')))));
    main.querySelectorAll('[data-k]').forEach((el) => { el.style.color = PALETTE[el.dataset.k % PALETTE.length]; });
    main.dataset.ready = 'true';
  });
}

// ---- Batches ---------------------------------------------------------------

const VERDICT_ORDER = ['regressed', 'failed', 'missing', 'pending', 'improved', 'new', 'unchanged'];

export async function batchesView(main, route, signal) {
  main.append(h('h1', {}, 'Batches'));
  await guard(main, signal, async () => {
    const res = await api('/v1/batches' + qs({ limit: 50 }), { signal });
    main.append(h('table', { class: 'grid', id: 'batches' },
      h('thead', {}, h('tr', {}, ['Batch', 'Name', 'State', 'Jobs', 'Progress', 'Created'].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, res.items.map((b) => h('tr', {},
        h('td', {}, link(`#/batches/${b.id}`, short(b.id))), h('td', {}, b.name || '—'), h('td', {}, b.state),
        h('td', { class: 'num' }, b.n_jobs),
        h('td', {}, h('progress', { max: 1, value: b.progress, 'aria-label': `progress of ${short(b.id)}` }), ` ${pct(b.progress)}`),
        h('td', {}, when(b.created_at)))))));
    if (!res.items.length) main.append(h('p', { class: 'muted' }, 'no batches yet'));
    main.dataset.ready = 'true';
  });
}

export async function batchView(main, route, signal) {
  const id = route.parts[1];
  await guard(main, signal, async () => {
    const [b, rep] = await Promise.all([api(`/v1/batches/${id}` + qs({ limit: 1000 }), { signal }),
      api(`/v1/batches/${id}/report` + qs({ baseline: route.params.baseline, threshold: route.params.threshold }), { signal })]);
    const prog = h('progress', { id: 'batch-progress', max: 1, value: b.progress, 'aria-label': 'batch progress' });
    const progText = h('span', {}, ` ${pct(b.progress)} — ${b.finished} of ${b.n_jobs} finished`);
    const counts = h('p', { id: 'batch-counts' }, Object.entries(b.counts).map(([k, v]) => h('span', { class: 'tag' }, `${k} ${v}`)));
    const pick = h('form', { class: 'filters', 'aria-label': 'report settings' },
      h('label', {}, 'Baseline batch ', h('input', { name: 'baseline', value: route.params.baseline || '', size: 38, placeholder: 'default: the previous run of this matrix' })),
      h('label', {}, 'Threshold ', h('input', { name: 'threshold', value: route.params.threshold || '', size: 6, placeholder: '0.03' })),
      h('button', { type: 'submit' }, 'Report'));
    pick.addEventListener('submit', (ev) => {
      ev.preventDefault();
      location.hash = `#/batches/${id}` + qs(Object.fromEntries(new FormData(pick).entries()));
    });
    main.append(h('h1', {}, `Batch ${b.name || short(id)}`), h('p', {}, prog, progText), counts,
      kv({ id, state: b.state, source: b.source, priority: b.priority, created: when(b.created_at), finished: when(b.finished_at) }));
    const entries = rep.entries.slice().sort((x, y) => VERDICT_ORDER.indexOf(x.verdict) - VERDICT_ORDER.indexOf(y.verdict) ||
      (y.ratio || 0) - (x.ratio || 0));
    main.append(section(`Report against ${rep.baseline ? short(rep.baseline) : 'no baseline'} (threshold ${pct(rep.threshold)})`,
      rep.baseline ? h('p', { id: 'report-baseline' }, 'Baseline batch ', link(`#/batches/${rep.baseline}`, rep.baseline)) : null, pick,
      h('p', {}, Object.entries(rep.summary).map(([k, v]) => h('span', { class: `tag verdict-${k}` }, `${k} ${v}`))),
      h('table', { class: 'grid', id: 'report' },
        h('thead', {}, h('tr', {}, ['Verdict', 'Op', 'Shape', 'Dtype', 'Target', 'Old', 'New', 'Ratio', 'Provenance changed', 'Job']
          .map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, entries.map((e) => h('tr', { class: `verdict-${e.verdict}` },
          h('td', {}, e.verdict), h('td', {}, e.op || '—'), h('td', {}, e.shape || '—'), h('td', {}, e.dtype || '—'),
          h('td', {}, e.target || '—'), h('td', { class: 'num' }, ns(e.old && e.old.latency_ns)),
          h('td', { class: 'num' }, ns(e.new && e.new.latency_ns)), h('td', { class: 'num' }, e.ratio != null ? e.ratio.toFixed(3) : '—'),
          h('td', {}, Object.keys(e.provenance_diff || {}).join(', ') || '—'),
          h('td', {}, e.new && e.new.job_id ? link(`#/jobs/${e.new.job_id}`, short(e.new.job_id)) : '—')))))));
    main.dataset.ready = 'true';
    if (b.state !== 'finished')
      stream(`/v1/batches/${id}/stream`, (type, d) => {
        if (type === 'batch') {
          prog.value = d.progress;
          progText.textContent = ` ${pct(d.progress)} of ${d.n_jobs} jobs`;
          counts.replaceChildren(...Object.entries(d.counts).map(([k, v]) => h('span', { class: 'tag' }, `${k} ${v}`)));
        } else if (type === 'end') {
          progText.textContent += ' — finished (reload for the final report)';
        }
      }, signal, () => {});
  });
}

// ---- Library ---------------------------------------------------------------

export async function libraryView(main, route, signal) {
  const p = route.params;
  const form = h('form', { class: 'filters' },
    ['op', 'target', 'dtype', 'backend'].map((k) => h('label', {}, `${k} `, h('input', { name: k, value: p[k] || '', size: 10 }))),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    location.hash = '#/library' + qs(Object.fromEntries(new FormData(form).entries()));
  });
  main.append(h('h1', {}, 'Library'), form);
  await guard(main, signal, async () => {
    const res = await api('/v1/library' + qs({ op: p.op, target: p.target, dtype: p.dtype, backend: p.backend, limit: 200 }), { signal });
    const items = res.items.slice().sort((a, b) => (a.op + JSON.stringify(a.shape) + a.dtype + a.target)
      .localeCompare(b.op + JSON.stringify(b.shape) + b.dtype + b.target));
    const sparks = new Map();
    main.append(h('table', { class: 'grid', id: 'library' },
      h('thead', {}, h('tr', {}, ['Op', 'Shape', 'Dtype', 'Target', 'Backend', 'Latency', 'Of bound', 'Params', 'History', 'Job', 'Updated']
        .map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, items.map((e) => {
        const cell = h('td', {});
        sparks.set(e.id, cell);
        return h('tr', {}, h('td', {}, e.op), h('td', { class: 'mono' }, json(e.shape)), h('td', {}, e.dtype), h('td', {}, e.target),
          h('td', {}, e.backend), h('td', { class: 'num' }, ns(e.latency_ns)), h('td', { class: 'num' }, pct(e.fraction_of_bound)),
          h('td', { class: 'mono' }, json(e.params)), cell, h('td', {}, link(`#/jobs/${e.job_id}`, short(e.job_id))),
          h('td', {}, when(e.updated_at)));
      }))));
    if (!items.length) main.append(h('p', { class: 'muted' }, 'the library is empty: it fills as generate and optimize jobs succeed'));
    main.dataset.ready = 'true';
    // History sparklines, four requests at a time.
    const queue = items.slice();
    const worker = async () => {
      for (let e = queue.shift(); e && !signal.aborted; e = queue.shift()) {
        try {
          const full = await api(`/v1/library/${encodeURIComponent(e.id)}`, { signal });
          const vals = (full.history || []).map((x) => x.new_latency_ns);
          sparks.get(e.id).append(sparkline(vals, `latency history of ${e.id}: ${vals.map(ns).join(', ')}`));
        } catch (err) { if (!signal.aborted) sparks.get(e.id).textContent = '—'; }
      }
    };
    await Promise.all([worker(), worker(), worker(), worker()]);
  });
}

// ---- Fleet -----------------------------------------------------------------

export async function fleetView(main, route, signal) {
  const box = h('div', { id: 'fleet' });
  main.append(h('h1', {}, 'Fleet'), h('p', { class: 'muted' }, 'Workers with a live heartbeat and the queue, refreshed every 5 s.'), box);
  const age = (t) => `${Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000))} s ago`;
  async function load() {
    const f = await api('/v1/workers', { signal });
    const parts = [
      h('h2', {}, `Workers (${f.workers.length})`),
      h('table', { class: 'grid', id: 'workers' },
        h('thead', {}, h('tr', {}, ['Worker', 'Host', 'Targets', 'Backends', 'Current job', 'Last heartbeat']
          .map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, f.workers.map((w) => h('tr', {},
          h('td', {}, w.id), h('td', {}, w.host || '—'), h('td', {}, (w.targets || []).join(', ')),
          h('td', {}, (w.backends || []).join(', ')),
          h('td', {}, w.job ? link(`#/jobs/${w.job}`, short(w.job)) : w.busy ? 'busy (another user\u2019s job)' : 'idle'),
          h('td', { title: w.last_heartbeat }, age(w.last_heartbeat)))))),
      h('h2', {}, 'Queue'),
      h('p', {}, `waiting ${f.waiting} · running ${f.active} · waiting to retry ${f.delayed}` + (f.dead != null ? ` · dead ${f.dead}` : '')),
      h('table', { class: 'grid', id: 'queues' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Target'), h('th', { scope: 'col' }, 'Waiting'))),
        h('tbody', {}, f.queues.map((q) => h('tr', {}, h('td', {}, q.target), h('td', { class: 'num' }, q.waiting))))),
      isAdmin() ? h('h2', {}, 'Dead letters') : null,
      isAdmin() && f.dead_letters
        ? h('table', { class: 'grid', id: 'dead' },
          h('thead', {}, h('tr', {}, ['Job', 'Kind', 'Target', 'Attempts', 'Died', 'Last error'].map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, f.dead_letters.map((d) => h('tr', {}, h('td', {}, link(`#/jobs/${d.job_id}`, short(d.job_id))),
            h('td', {}, d.kind || '—'), h('td', {}, d.target || '—'), h('td', { class: 'num' }, d.attempt ?? '—'),
            h('td', {}, when(d.died_at)), h('td', {}, d.last_error || '')))))
        : null,
    ];
    box.replaceChildren(...parts.filter(Boolean));
  }
  await guard(main, signal, async () => {
    await load();
    main.dataset.ready = 'true';
  });
  const timer = setInterval(() => load().catch((e) => { if (!signal.aborted) status(e.message, true); }), 5000);
  signal.addEventListener('abort', () => clearInterval(timer), { once: true });
}
