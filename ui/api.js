// api.js — every call the dashboard makes: fetch() to the public /v1 routes
// with the token kept in sessionStorage, problem+json errors as ApiError, and
// Server-Sent Events read from a fetch() body (EventSource cannot send the
// Authorization header), reconnecting with Last-Event-ID.

const KEY = 'kforge.token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => { me = null; sessionStorage.setItem(KEY, t); },
  clear: () => { me = null; sessionStorage.removeItem(KEY); },
};

// Who the token is ({name, role} from GET /v1/whoami), asked once per token;
// the views offer admin-only controls (requeue, dead letters) to admins only.
let me = null;
export async function whoami(signal) {
  if (!me) me = await api('/v1/whoami', { signal });
  return me;
}
export const isAdmin = () => !!me && me.role === 'admin';

export class ApiError extends Error {
  constructor(status, problem, path) {
    const detail = problem && (problem.detail || problem.title);
    super(`${path}: ${status}${detail ? ' — ' + detail : ''}`);
    this.status = status;
    this.problem = problem;
  }
}

function headers(extra) {
  return Object.assign({ Authorization: 'Bearer ' + (token.get() || '') }, extra || {});
}

async function problemOf(res) {
  try {
    return await res.json();
  } catch (e) {
    return null;
  }
}

// JSON of a route; opts: method, body (an object, sent as JSON), signal, raw
// (the Response itself, for downloads).
export async function api(path, opts = {}) {
  const init = { method: opts.method || 'GET', headers: headers(), signal: opts.signal, cache: 'no-store' };
  if (opts.body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  const res = await fetch(path, init);
  if (!res.ok) throw new ApiError(res.status, await problemOf(res), path);
  if (opts.raw) return res;
  return res.status === 204 ? null : res.json();
}

// A query string of the non-empty members of obj.
export function qs(obj) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(obj)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  const s = p.toString();
  return s ? '?' + s : '';
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

// Feed one chunk of an event stream to the parser state st; calls
// onEvent(type, data, id) per complete event (data parsed as JSON when it
// is JSON, else the text; id is the event's own or null).  Lines end with
// LF (CRLF accepted); comments (": hb") are skipped; st.lastId is the last
// id seen, st.retry the last valid retry: hint.  Returns true after `end`
// (the rest stays in st.buf).  test_ui exercises it in the browser.
export function sseFeed(st, chunk, onEvent) {
  st.buf += chunk;
  let nl;
  while ((nl = st.buf.indexOf('\n')) >= 0) {
    let line = st.buf.slice(0, nl);
    st.buf = st.buf.slice(nl + 1);
    if (line.endsWith('\r')) line = line.slice(0, -1);
    if (line === '') {
      // An id moves Last-Event-ID even on a frame without data, as in
      // EventSource; the event itself is dispatched only with data.
      if (st.id !== null) st.lastId = st.id;
      if (st.data.length) {
        const type = st.event || 'message';
        let data;
        try {
          data = JSON.parse(st.data.join('\n'));
        } catch (e) {
          data = st.data.join('\n');
        }
        onEvent(type, data, st.id);
        if (type === 'end') return true;
      }
      st.event = '';
      st.data = [];
      st.id = null;
      continue;
    }
    if (line[0] === ':') continue;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let value = c < 0 ? '' : line.slice(c + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') st.event = value;
    else if (field === 'data') st.data.push(value);
    else if (field === 'id') st.id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) st.retry = Number(value);
  }
  return false;
}

// Follow an SSE route until signal aborts or the server sends `end`.
// onEvent(type, data, id); onStatus(text) reports "live", "reconnecting",
// or an error that ends it (a 4xx other than 429).
export async function stream(path, onEvent, signal, onStatus = () => {}) {
  const st = { buf: '', event: '', data: [], id: null, lastId: null, retry: 3000 };
  while (!signal.aborted) {
    try {
      const h = headers({ Accept: 'text/event-stream' });
      if (st.lastId !== null) h['Last-Event-ID'] = st.lastId;
      const res = await fetch(path, { headers: h, signal, cache: 'no-store' });
      if (!res.ok) throw new ApiError(res.status, await problemOf(res), path);
      onStatus('live');
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      // A frame the dropped connection cut short is discarded, not glued
      // to the first frame of the new one; lastId and retry carry over.
      Object.assign(st, { buf: '', event: '', data: [], id: null });
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        if (sseFeed(st, value, onEvent)) return;
      }
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && e.status < 500 && e.status !== 429) {
        onStatus('stopped: ' + e.message);
        return;
      }
    }
    onStatus('reconnecting');
    await sleep(st.retry, signal);
  }
}
