// The pbx dashboard: reads GET /v1/events with the token in the
// Authorization header (never in a URL), keeps the state the stream
// describes, and renders it. Every value from the API is written with
// textContent, never as HTML.
'use strict';

const KEY = 'pbx-dashboard-token';
const state = { calls: new Map(), regs: new Map(), trunks: new Map(), bans: new Map(), scopes: [], restricted: false };
let lastID = '';
let controller = null;
let retry = 1000;

const $ = (id) => document.getElementById(id);

function setStatus(text, kind) {
  const el = $('status');
  el.textContent = text;
  el.className = kind || '';
}

function token() { return sessionStorage.getItem(KEY) || ''; }

function api(method, path) {
  return fetch(path, { method, headers: { Authorization: 'Bearer ' + token() }, cache: 'no-store' });
}

function regKey(r) { return r.tenant + '/' + r.username + '/' + r.contact; }

function applySnapshot(d) {
  state.calls = new Map((d.calls || []).map((c) => [c.id, c]));
  state.regs = new Map((d.registrations || []).map((r) => [regKey(r), r]));
  state.trunks = new Map((d.trunks || []).map((t) => [t.name, t]));
  state.bans = new Map((d.bans || []).map((b) => [b.ip, b]));
  if (d.token) {
    state.scopes = d.token.scopes || [];
    state.restricted = (d.token.tenants || []).length > 0;
  }
}

function apply(type, ev) {
  const d = ev.data || {};
  switch (type) {
    case 'snapshot': applySnapshot(d); break;
    case 'call.created': case 'call.ringing': case 'call.answered': case 'call.held': state.calls.set(d.id, d); break;
    case 'call.ended': state.calls.delete(d.id); break;
    case 'registration.added': case 'registration.refreshed': state.regs.set(regKey(d), d); break;
    case 'registration.removed': case 'registration.expired': state.regs.delete(regKey(d)); break;
    case 'trunk.state': state.trunks.set(d.name, d); break;
    case 'ban.added': state.bans.set(d.ip, d); break;
    case 'ban.lifted': state.bans.delete(d.ip); break;
    default: return; // counters, resync (a snapshot follows), unknown kinds
  }
  render();
}

function duration(from) {
  const s = Math.max(0, Math.floor((Date.now() - Date.parse(from)) / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const pad = (n) => String(n).padStart(2, '0');
  return (h ? h + ':' + pad(m) : String(m)) + ':' + pad(r);
}

function cell(tr, text, cls) {
  const td = document.createElement('td');
  td.textContent = text == null ? '' : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function button(td, label, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = label;
  b.addEventListener('click', onClick);
  td.appendChild(b);
}

function fill(tableID, rows, columns, emptyText) {
  const body = $(tableID).tBodies[0];
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = document.createElement('tr');
    const td = cell(tr, emptyText, 'empty');
    td.colSpan = columns;
    body.appendChild(tr);
    return;
  }
  for (const build of rows) {
    const tr = document.createElement('tr');
    build(tr);
    body.appendChild(tr);
  }
}

function render() {
  const operate = state.scopes.includes('operate');
  const calls = [...state.calls.values()].sort((a, b) => a.started_at.localeCompare(b.started_at));
  fill('calls', calls.map((c) => (tr) => {
    tr.dataset.id = c.id;
    cell(tr, c.tenant);
    cell(tr, c.direction);
    cell(tr, c.from);
    cell(tr, c.to);
    const st = c.held ? 'held' : c.state;
    cell(tr, st, 'state-' + st);
    cell(tr, duration(c.answered_at || c.started_at), 'duration').dataset.since = c.answered_at || c.started_at;
    cell(tr, (c.legs || []).map((l) => l.target + ' (' + l.state + ')').join(', '));
    const td = cell(tr, '');
    if (operate) button(td, 'Hang up', () => act('POST', '/v1/calls/' + encodeURIComponent(c.id) + '/hangup'));
  }), 8, 'No calls in progress.');

  const regs = [...state.regs.values()].sort((a, b) => regKey(a).localeCompare(regKey(b)));
  fill('registrations', regs.map((r) => (tr) => {
    cell(tr, r.tenant); cell(tr, r.extension); cell(tr, r.username); cell(tr, r.contact);
    cell(tr, r.transport); cell(tr, r.user_agent); cell(tr, new Date(r.expires_at).toLocaleTimeString());
  }), 7, 'No phone is registered.');

  let up = 0, down = 0;
  const trunks = [...state.trunks.values()].sort((a, b) => a.name.localeCompare(b.name));
  fill('trunks', trunks.map((t) => (tr) => {
    const reg = t.registration || {};
    const st = reg.enabled ? reg.state : 'up';
    if (st === 'registered' || st === 'up') up++; else down++;
    cell(tr, t.name); cell(tr, t.tenant || 'shared'); cell(tr, t.host + ':' + t.port);
    cell(tr, st, 'state-' + st); cell(tr, reg.last_error || '');
  }), 5, 'No trunks.');

  const showBans = !state.restricted && state.scopes.includes('security:read');
  $('bans-section').hidden = !showBans;
  $('headline-bans').hidden = !showBans;
  const now = Date.now();
  const bans = [...state.bans.values()].filter((b) => Date.parse(b.until) > now).sort((a, b) => a.ip.localeCompare(b.ip));
  fill('bans', bans.map((b) => (tr) => {
    tr.dataset.ip = b.ip;
    cell(tr, b.ip); cell(tr, b.reason); cell(tr, new Date(b.since).toLocaleString());
    cell(tr, new Date(b.until).toLocaleString()); cell(tr, b.offences);
    const td = cell(tr, '');
    if (operate) button(td, 'Lift', () => act('DELETE', '/v1/security/bans/' + encodeURIComponent(b.ip)));
  }), 6, 'Nobody is banned.');

  $('n-calls').textContent = String(calls.length);
  $('n-regs').textContent = String(regs.length);
  $('n-trunks-up').textContent = String(up);
  $('n-trunks-down').textContent = String(down);
  $('n-bans').textContent = String(bans.length);
}

async function act(method, path) {
  try {
    const res = await api(method, path);
    if (!res.ok) setStatus(await problem(res), 'error');
  } catch (e) {
    setStatus('Request failed: ' + e.message, 'error');
  }
}

async function problem(res) {
  let msg = '';
  try { msg = (await res.json()).error.message; } catch (e) { /* not an envelope */ }
  switch (res.status) {
    case 401: return 'The token was not accepted (401): check it and connect again.';
    case 403: return 'This token may not do that (403)' + (msg ? ': ' + msg : '.');
    case 429: return 'Too many requests or streams for this token (429); retrying.';
    default: return 'The API answered ' + res.status + (msg ? ': ' + msg : '.');
  }
}

// parse feeds SSE text to onEvent and returns what is left of an
// incomplete event.
function parse(buf, onEvent) {
  let i;
  while ((i = buf.indexOf('\n\n')) >= 0) {
    const block = buf.slice(0, i);
    buf = buf.slice(i + 2);
    let type = '', id = '', data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) type = line.slice(7);
      else if (line.startsWith('id: ')) id = line.slice(4);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    if (!type) continue; // a heartbeat
    if (id) lastID = id;
    let ev = {};
    try { ev = JSON.parse(data); } catch (e) { continue; }
    onEvent(type, type === 'snapshot' || type === 'resync' ? { data: ev } : ev);
  }
  return buf;
}

async function connect() {
  if (controller) controller.abort();
  if (!token()) return;
  controller = new AbortController();
  const headers = { Authorization: 'Bearer ' + token(), Accept: 'text/event-stream' };
  if (lastID) headers['Last-Event-ID'] = lastID;
  let res;
  try {
    res = await fetch('/v1/events', { headers, cache: 'no-store', signal: controller.signal });
  } catch (e) {
    if (e.name === 'AbortError') return;
    return reconnect('Connection failed: ' + e.message);
  }
  if (!res.ok) {
    const msg = await problem(res);
    if (res.status === 401 || res.status === 403) {
      $('live').hidden = true;
      setStatus(msg, 'error');
      return;
    }
    return reconnect(msg);
  }
  $('live').hidden = false;
  $('logout').hidden = false;
  setStatus('Live.', 'ok');
  retry = 1000;
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf = parse(buf + dec.decode(value, { stream: true }), apply);
    }
  } catch (e) {
    if (e.name === 'AbortError') return;
  }
  reconnect('The stream ended; reconnecting.');
}

function reconnect(msg) {
  setStatus(msg, 'error');
  setTimeout(connect, retry);
  retry = Math.min(retry * 2, 30000);
}

function tick() {
  for (const td of document.querySelectorAll('td.duration')) td.textContent = duration(td.dataset.since);
}

document.addEventListener('DOMContentLoaded', () => {
  $('login').addEventListener('submit', (e) => {
    e.preventDefault();
    const t = $('token').value.trim();
    if (!t) return;
    sessionStorage.setItem(KEY, t);
    $('token').value = '';
    lastID = '';
    setStatus('Connecting…');
    connect();
  });
  $('logout').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    if (controller) controller.abort();
    $('live').hidden = true;
    $('logout').hidden = true;
    setStatus('Enter an API token to connect.');
  });
  setInterval(tick, 1000);
  if (token()) { setStatus('Connecting…'); connect(); }
});
