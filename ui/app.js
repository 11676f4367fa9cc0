// app.js — the dashboard's entry: sign-in (a token kept in sessionStorage
// for this tab only) and the hash router.  Every view's URL can be shared:
// #/jobs?state=&kind=&op=&target=&label=, #/jobs/ID,
// #/jobs/ID/iterations/SEQ?attempt=, #/compare?ids=A,B, #/batches,
// #/batches/ID, #/library, #/fleet.
import { token, whoami } from './api.js';
import { h, status } from './dom.js';
import { jobsView, jobView, iterationView, compareView, batchesView, batchView, libraryView, fleetView } from './views.js';

const main = document.getElementById('main');
let current = null;

export function parseHash(hash) {
  const raw = (hash || '').replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const params = Object.fromEntries(new URLSearchParams(q < 0 ? '' : raw.slice(q + 1)));
  return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), params };
}

function pick(route) {
  const [a, , c] = route.parts;
  const n = route.parts.length;
  if (a === 'jobs' && n === 1) return jobsView;
  if (a === 'jobs' && n === 2) return jobView;
  if (a === 'jobs' && n === 4 && c === 'iterations') return iterationView;
  if (a === 'compare') return compareView;
  if (a === 'batches' && n === 1) return batchesView;
  if (a === 'batches' && n === 2) return batchView;
  if (a === 'library') return libraryView;
  if (a === 'fleet') return fleetView;
  return null;
}

function signIn(message) {
  document.getElementById('signout').hidden = true;
  const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true, size: 60 });
  const form = h('form', { id: 'signin', class: 'signin' },
    h('h1', {}, 'Sign in'),
    h('p', {}, 'Paste a kforge API token (', h('code', {}, 'kforge-api token create'),
      '). It stays in this browser tab only and goes to this server alone, as the Authorization header of each call.'),
    h('label', { for: 'token' }, 'Token '), input, ' ', h('button', { type: 'submit' }, 'Sign in'),
    message ? h('p', { class: 'error', role: 'alert' }, message) : null);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    token.set(input.value.trim());
    try {
      await whoami();
      route();
    } catch (e) {
      token.clear();
      main.replaceChildren(signIn(e.status === 401 ? 'That token was refused (401).'
        : e.status === 403 ? 'That is a worker token; the dashboard takes a user or admin token (403).' : e.message));
    }
  });
  return form;
}

async function route() {
  if (current) current.abort();
  const ctl = current = new AbortController();
  main.replaceChildren();
  delete main.dataset.ready;
  status('');
  if (!token.get()) {
    main.append(signIn());
    document.getElementById('token').focus();
    return;
  }
  let who;
  try {
    who = await whoami(ctl.signal);
  } catch (e) {
    if (ctl.signal.aborted) return;
    token.clear();
    main.replaceChildren(signIn(e.status === 401 ? 'The token was refused (401); sign in again.' : e.message));
    return;
  }
  if (ctl.signal.aborted) return;
  const out = document.getElementById('signout');
  out.hidden = false;
  out.textContent = `Sign out ${who.name} (${who.role})`;
  const r = parseHash(location.hash);
  if (r.parts.length === 0) { location.replace('#/jobs'); return; }
  const view = pick(r);
  for (const a of document.querySelectorAll('#nav a'))
    a.setAttribute('aria-current', a.getAttribute('href') === '#/' + r.parts[0] ? 'page' : 'false');
  if (!view) { main.append(h('p', { class: 'error' }, 'No such view: ' + location.hash)); return; }
  view(main, r, ctl.signal);
  main.focus({ preventScroll: true });
}

document.getElementById('signout').addEventListener('click', () => { token.clear(); route(); });
window.addEventListener('hashchange', route);
// Leaving the page closes its streams at once: a stream left open holds one
// of the browser's six connections to this host until the page is gone
// (a page kept in the back/forward cache keeps it), so a few reloads in a
// row would otherwise leave the next one waiting for a connection.
window.addEventListener('pagehide', () => { if (current) current.abort(); });
route();
