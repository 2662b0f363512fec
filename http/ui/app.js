// outboxd web UI: polls the JSON API about once a second (not while the tab is hidden) and draws
// each order as its saga pipeline. Every server string reaches the page as text (createTextNode,
// textContent or a whitelisted attribute), never as HTML: an order's customer is user input.
'use strict';

const POLL_MS = 1000;
const CONSISTENCY_EVERY = 5; // polls: the check reads orders and the whole ledger
const CONSISTENCY_WINDOW = 1000; // the newest orders a periodic check reads ("Check now": 100 000)
const ORDER_LIMIT = 20;
const MAX_ATTEMPTS = 1000; // attempt rows kept per timeline, as the API lists at most
const TOKEN_KEY = 'outboxd.adminToken';
const PIPELINE_EVENT = 'OrderCreated'; // the event whose fan-out an order card draws
const TERMINAL = new Set(['DELIVERED', 'FAILED', 'CANCELLED']);
const EVENT_DONE = new Set(['PROCESSED', 'DEAD']);
const DLQ_DONE = new Set(['PROCESSED', 'FAILED']);
const STATUS_CHOICES = [400, 404, 409, 422, 429, 500, 502, 503, 504];
const STATE_TEXT = {
  waiting: 'waiting', inflight: 'in flight', success: 'success', retrying: 'retrying',
  failed: 'failed', skipped: 'skipped', reverted: 'reverted',
};
// Attributes el() may set. Event-handler attributes, href/src and style are deliberately absent.
const SAFE_ATTRS = new Set([
  'type', 'name', 'value', 'min', 'max', 'step', 'title', 'role', 'aria-label', 'aria-invalid',
  'disabled', 'placeholder', 'datetime', 'inputmode', 'autocomplete', 'colspan', 'for', 'id',
]);

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  timelines: new Map(), // order id -> {updatedAt, data}
  cards: new Map(), // order id -> {sig, el}
  knobInputs: new Map(), // knob name -> {field -> input}
  polls: 0,
  timer: null,
  polling: false,
  auditId: null,
  auditSig: '',
  auditData: null, // the open audit's timeline, brought up to date on each poll
  dlqSig: '',
  fanout: null, // event type -> [{destination, revertible}], from GET /api/outbox/fanout
  fanoutSig: '',
};

const $ = (selector, root = document) => root.querySelector(selector);

// Invisible format characters in server text (bidi overrides, embeddings and isolates, zero-width
// characters, soft hyphens, variation selectors, line and paragraph separators, Hangul fillers,
// tag characters) are shown as their code points: "\u202eNIMDA x" would read as "x ADMIN", and
// two customer ids differing by a zero-width space would look the same.
const INVISIBLE = /[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u2028-\u202E\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0\u{E0000}-\u{E007F}]/gu;
const shown = (v) => String(v).replace(INVISIBLE,
  (c) => `⟨U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`);

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = shown(v);
    else if (k === 'on') for (const [type, fn] of Object.entries(v)) node.addEventListener(type, fn);
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) node.dataset[dk] = String(dv);
    else if (SAFE_ATTRS.has(k)) node.setAttribute(k, v === true ? '' : String(v));
    else throw new Error(`el: attribute ${k} is not on the safe list`);
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(shown(c)));
  }
  return node;
}

// A CSS class fragment from server data: only known-safe characters survive.
function token(s) {
  return String(s).replace(/[^A-Za-z0-9_-]/g, '_');
}

function parseTime(s) {
  if (!s) return null;
  // PostgreSQL text ("2026-01-01 12:00:00.123+00") and ISO both parse once normalised.
  const iso = String(s).replace(' ', 'T').replace(/([+-]\d\d)$/, '$1:00');
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? null : d;
}

function pad(n, w = 2) {
  return String(n).padStart(w, '0');
}

function clock(s, millis = false) {
  const d = parseTime(s);
  if (!d) return s ? String(s) : '';
  const t = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return millis ? `${t}.${pad(d.getMilliseconds(), 3)}` : t;
}

function timeEl(s, millis = false) {
  return el('time', { datetime: s || undefined, title: s || undefined, text: clock(s, millis) });
}

function money(amount, currency) {
  const n = Number(amount);
  return `${Number.isFinite(n) ? n.toFixed(2) : String(amount)} ${currency || ''}`.trim();
}

function json(value) {
  return JSON.stringify(value, null, 2);
}

class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

// Every request carries the token when one is entered; every state-changing one says it is JSON,
// also without a body (outboxd refuses a POST that a form of another site could have sent).
async function api(method, path, { body } = {}) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['Content-Type'] = 'application/json';
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  let res;
  try {
    res = await fetch(path, {
      method, headers, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, 'network', `outboxd is unreachable (${e.message})`);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const err = (data && data.error) || {};
    if (res.status === 401) {
      throw new ApiError(401, 'unauthorized', state.token
        ? 'The access token was refused (401). Check the "Access token" field at the top.'
        : 'This needs an access token (401). Enter it in the "Access token" field at the top.');
    }
    if (res.status === 403 && err.code === 'forbidden') {
      throw new ApiError(403, 'forbidden', `Not allowed (403): ${err.message || 'the token\'s role may not do this'}`);
    }
    throw new ApiError(res.status, err.code || `http_${res.status}`,
      err.message || `${method} ${path} answered HTTP ${res.status}`, err.details);
  }
  return data;
}

function notify(text, kind = 'info') {
  const box = $('#messages');
  const item = el('div', { class: `message ${kind}`, role: kind === 'error' ? 'alert' : 'status' },
    el('span', { text }),
    el('button', { type: 'button', class: 'link', 'aria-label': 'Dismiss', text: '×',
      on: { click: () => item.remove() } }));
  box.prepend(item);
  while (box.children.length > 4) box.lastChild.remove();
  setTimeout(() => item.remove(), kind === 'error' ? 12000 : 5000);
}

// Runs a user action with its button disabled; errors become messages.
async function act(button, fn, done) {
  if (button) button.disabled = true;
  try {
    await fn();
    if (done) notify(done, 'ok');
  } catch (e) {
    notify(e.message, 'error');
  } finally {
    if (button) button.disabled = false;
    refreshSoon();
  }
}

function schedule(delay) {
  clearTimeout(state.timer);
  state.timer = document.hidden ? null : setTimeout(poll, delay);
}

function refreshSoon() {
  if (!state.polling) schedule(50);
}

async function poll() {
  state.timer = null;
  if (document.hidden) return;
  state.polling = true;
  // The fan-out comes first: the order cards are drawn from it. It is configuration, so it is read
  // once (again only after a failure).
  if (state.fanout === null) await refreshFanout().catch(() => {});
  const jobs = [refreshOrders(), refreshStats(), refreshDlq(), refreshKnobs(), refreshAudit()];
  if (state.fanout === null) jobs.push(refreshFanout());
  if (state.polls % CONSISTENCY_EVERY === 0) jobs.push(refreshConsistency());
  const results = await Promise.allSettled(jobs);
  const offline = results.find((r) => r.status === 'rejected' && r.reason.status === 0);
  const failed = results.find((r) => r.status === 'rejected');
  const locked = results.find((r) => r.status === 'rejected' && r.reason.status === 401);
  if (offline) setConnection('offline', offline.reason.message);
  else if (locked) setConnection('degraded', locked.reason.message);
  else if (failed) setConnection('degraded', failed.reason.message);
  else setConnection('live', `live · updated ${clock(new Date().toISOString())}`);
  state.polls += 1;
  state.polling = false;
  schedule(POLL_MS);
}

function setConnection(kind, text) {
  const c = $('#connection');
  c.className = `connection ${kind}`;
  c.textContent = kind === 'offline' ? `offline: ${text}` : text;
  if (kind === 'degraded') c.title = text;
}

document.addEventListener('visibilitychange', () => {
  if (document.hidden) {
    clearTimeout(state.timer);
    state.timer = null;
    setConnection('paused', 'paused while the tab is hidden');
  } else if (!state.polling) {
    poll();
  }
});

async function refreshFanout() {
  const { eventTypes } = await api('GET', '/api/outbox/fanout');
  const fanout = {};
  for (const [type, steps] of Object.entries(eventTypes || {})) {
    fanout[type] = (Array.isArray(steps) ? steps : []).map((s) => ({
      destination: String(s.destination), revertible: s.revertible === true,
    }));
  }
  state.fanout = fanout;
  state.fanoutSig = JSON.stringify(fanout);
}

// The forward steps of an order: the configured fan-out in call order, then any destination the
// attempts name that the configuration no longer has (it changed since), by fan-out position.
function forwardSteps(forward) {
  const steps = ((state.fanout && state.fanout[PIPELINE_EVENT]) || []).map((s) => ({ ...s }));
  const known = new Set(steps.map((s) => s.destination));
  for (const a of [...forward].sort((x, y) => x.fanoutOrder - y.fanoutOrder)) {
    if (known.has(a.destination)) continue;
    known.add(a.destination);
    steps.push({ destination: a.destination, revertible: false });
  }
  return steps;
}

async function refreshOrders() {
  const filter = $('#orders-filter').value;
  const query = `/api/orders?limit=${ORDER_LIMIT}${filter ? `&status=${encodeURIComponent(filter)}` : ''}`;
  const { orders } = await api('GET', query);
  await Promise.all(orders.map(async (o) => {
    const cached = state.timelines.get(o.id);
    if (cached && !timelineStale(cached, o)) return;
    try {
      state.timelines.set(o.id, { updatedAt: o.updatedAt, data: await fetchTimeline(o.id, cached && cached.data) });
    } catch (e) {
      if (e.status !== 404) throw e; // removed meanwhile: the next list drops it
    }
  }));
  const shown = new Set(orders.map((o) => o.id));
  for (const id of state.timelines.keys()) if (!shown.has(id)) state.timelines.delete(id);
  renderOrders(orders);
}

// Audit rows never change once written: a timeline already here is brought up to date with the
// rows written after its newest one, so an order retried for hours costs its new rows per poll,
// not its whole audit with every partner's answer again.
async function fetchTimeline(id, known) {
  const last = known && known.attempts.length ? known.attempts[known.attempts.length - 1].id : 0;
  const t = await api('GET', last ? `/api/orders/${id}?afterAttempt=${last}` : `/api/orders/${id}`);
  if (!last || t.attemptsTruncated) return t; // whole, or more new rows than one answer lists
  if (t.order.createdAt !== known.order.createdAt) return fetchTimeline(id, null); // another database
  const attempts = known.attempts.concat(t.attempts);
  const cut = Math.max(0, attempts.length - MAX_ATTEMPTS);
  return { ...t, attempts: attempts.slice(cut), attemptsTruncated: known.attemptsTruncated || cut > 0 };
}

// What a drawing of a timeline depends on, without serialising every attempt row again: rows
// are only ever added, so their count and newest id stand for them.
function timelineSig(t) {
  const last = t.attempts.length ? t.attempts[t.attempts.length - 1].id : 0;
  return JSON.stringify([t.order, t.events, t.deadLetters, t.attempts.length, last, !!t.attemptsTruncated]);
}

// A settled order's timeline only changes with its status, so it is not fetched again.
function timelineStale(cached, order) {
  const t = cached.data;
  if (cached.updatedAt !== order.updatedAt || t.order.status !== order.status) return true;
  if (['PENDING', 'CANCELLING', 'ATTENTION'].includes(order.status)) return true;
  return t.events.some((e) => !EVENT_DONE.has(e.status))
    || t.deadLetters.some((d) => !DLQ_DONE.has(d.status));
}

function renderOrders(orders) {
  const box = $('#orders');
  if (orders.length === 0) {
    state.cards.clear();
    box.replaceChildren(el('p', { class: 'muted empty', text: 'No orders yet: create one with the form.' }));
    return;
  }
  const wanted = [];
  for (const o of orders) {
    const cached = state.timelines.get(o.id);
    const data = cached ? cached.data : { order: o, events: [], attempts: [], deadLetters: [] };
    const sig = state.fanoutSig + timelineSig(data);
    let card = state.cards.get(o.id);
    if (!card || card.sig !== sig) {
      card = { sig, el: orderCard(data) };
      state.cards.set(o.id, card);
    }
    wanted.push(card.el);
  }
  for (const id of state.cards.keys()) if (!orders.some((o) => o.id === id)) state.cards.delete(id);
  // Unchanged cards stay where they are, so a click in progress on one is never interrupted.
  let ref = box.firstChild;
  for (const node of wanted) {
    if (node === ref) {
      ref = ref.nextSibling;
      continue;
    }
    box.insertBefore(node, ref);
  }
  while (ref) {
    const next = ref.nextSibling;
    ref.remove();
    ref = next;
  }
}

function orderCard(t) {
  const o = t.order;
  const card = el('article', { class: `order status-${token(o.status)}`, data: { orderId: o.id } },
    el('header', { class: 'order-head' },
      el('button', { type: 'button', class: 'order-id link', title: 'Open the audit timeline',
        text: `#${o.id}`, on: { click: () => openAudit(o.id) } }),
      el('span', { class: 'customer', title: 'customer', text: o.customerId }),
      el('span', { class: 'amount', text: money(o.totalAmount, o.currency) }),
      el('span', { class: 'ship-type', text: o.shippingType }),
      el('span', { class: `badge status-${token(o.status)}`, data: { status: o.status }, text: o.status }),
      el('span', { class: 'created muted' }, 'created ', timeEl(o.createdAt)),
      orderActions(o, t)),
    o.statusReason ? el('p', { class: 'reason' }, clip(o.statusReason, 240)) : null,
    pipelineRows(t));
  card.addEventListener('click', (e) => {
    if (!e.target.closest('button, input, select, a, summary')) openAudit(o.id);
  });
  return card;
}

function orderActions(o, t) {
  const box = el('div', { class: 'actions' });
  const button = (label, action, kind, fn, done) => {
    const b = el('button', { type: 'button', class: `small ${kind}`, data: { action }, text: label });
    b.addEventListener('click', () => act(b, fn, done));
    return b;
  };
  const s = o.status;
  if (s === 'CONFIRMED') {
    box.append(button('Ship', 'ship', '', () => api('PUT', `/api/orders/${o.id}/status`,
      { body: { status: 'SHIPPED' } }), `Order #${o.id} shipped`));
  }
  if (s === 'SHIPPED') {
    box.append(button('Deliver', 'deliver', '', () => api('PUT', `/api/orders/${o.id}/status`,
      { body: { status: 'DELIVERED' } }), `Order #${o.id} delivered`));
  }
  if (s === 'PENDING' || s === 'CONFIRMED') {
    box.append(button('Cancel', 'cancel', 'warn', () => api('POST', `/api/orders/${o.id}/cancel`,
      { body: { reason: 'cancelled from the web UI' } }), `Order #${o.id} is being cancelled`));
  }
  if (TERMINAL.has(s)) {
    box.append(button('Remove', 'remove', 'danger', async () => {
      await api('DELETE', `/api/orders/${o.id}`);
      if (state.auditId === o.id) $('#audit').close();
    }, `Order #${o.id} removed`));
  }
  for (const d of t.deadLetters) {
    if (d.status === 'FAILED') {
      box.append(button(`Redrive DLQ #${d.id}`, 'redrive', 'warn',
        () => api('POST', `/api/dlq/${d.id}/retry`), `Dead letter #${d.id} redriven`));
      // A revert that can never succeed (undone by hand, refused for good): the operator says so.
      box.append(button(`Resolve DLQ #${d.id} by hand`, 'resolve', 'danger', async () => {
        const reason = window.prompt(`Dead letter #${d.id}: what was done by hand about the step that failed? The steps still applied before it are then reverted, and the order leaves ATTENTION.`);
        if (reason === null || reason.trim() === '') throw new Error('Not resolved: a reason is needed');
        await api('POST', `/api/dlq/${d.id}/resolve`, { body: { reason: reason.trim() } });
      }, `Dead letter #${d.id} resolved by hand`));
    }
  }
  return box;
}

// The id the remote side returned, from a stored response body.
function returnedId(p) {
  if (!p || typeof p !== 'object') return null;
  if (p.transaction && p.transaction.id !== undefined) return String(p.transaction.id);
  for (const k of ['reservationId', 'shipmentId', 'processingId', 'refundId', 'notificationId',
    'transactionId', 'checkId']) {
    if (typeof p[k] === 'string' || typeof p[k] === 'number') return String(p[k]);
  }
  return null;
}

function byId(a, b) {
  return (a.id || 0) - (b.id || 0);
}

function last(list) {
  return list.length ? list[list.length - 1] : undefined;
}

function node(step, label, st, detail = {}) {
  const meta = [];
  if (detail.status !== undefined && detail.status !== null) meta.push(`HTTP ${detail.status}`);
  if (detail.durationMs !== undefined && detail.durationMs !== null) meta.push(`${detail.durationMs} ms`);
  if (detail.tries > 1) meta.push(`${detail.tries} tries`);
  return el('div', { class: `node state-${st}`, data: { step, state: st }, title: detail.error || undefined },
    el('span', { class: 'node-name', title: label, text: label }),
    el('span', { class: 'node-state', text: detail.stateText || STATE_TEXT[st] }),
    meta.length ? el('span', { class: 'node-meta', text: meta.join(' · ') }) : null,
    detail.id ? el('span', { class: 'node-id', title: detail.id, text: detail.id }) : null,
    detail.note ? el('span', { class: 'node-note', title: detail.note, text: detail.note }) : null);
}

function attemptDetail(rows, extra = {}) {
  const a = last(rows);
  if (!a) return extra;
  const ok = [...rows].reverse().find((r) => r.outcome === 'success') || a;
  return {
    status: a.responseStatus, durationMs: a.durationMs, tries: rows.length,
    id: returnedId(ok.responsePayload), error: a.errorMessage || undefined, ...extra,
  };
}

function runs(n) {
  return `${n} run${n === 1 ? '' : 's'}`;
}

// Long server text (error bodies) shortened for a table cell; the full text is in the title.
function clip(text, max = 160) {
  if (text === null || text === undefined) return null;
  const s = String(text);
  return s.length <= max ? s : el('span', { title: s, text: `${s.slice(0, max)}…` });
}

function eventState(e) {
  if (!e) return 'waiting';
  return { PENDING: e.attempts > 0 ? 'retrying' : 'waiting', PROCESSING: 'inflight', PROCESSED: 'success', DEAD: 'failed' }[e.status] || 'waiting';
}

function pipelineRows(t) {
  const attempts = [...t.attempts].sort(byId);
  const created = t.events.find((e) => e.eventType === 'OrderCreated');
  const forward = attempts.filter((a) => a.eventType === 'OrderCreated' && !a.destination.endsWith('.revert'));
  const reverts = attempts.filter((a) => a.destination.endsWith('.revert'));
  const revertedOk = new Set(reverts.filter((a) => a.outcome === 'success')
    .map((a) => a.destination.slice(0, -'.revert'.length)));
  const running = created && !EVENT_DONE.has(created.status);

  const nodes = [
    node('order', 'Order', 'success', { stateText: 'committed', id: `#${t.order.id}` }),
    node('outbox', 'Outbox', eventState(created), {
      stateText: created ? created.status.toLowerCase() : 'no event',
      note: created && created.attempts > 0 ? runs(created.attempts) : undefined,
      error: created && created.lastError ? created.lastError : undefined,
    }),
  ];
  let previousDone = true;
  const steps = forwardSteps(forward);
  for (const { destination: dest, revertible } of steps) {
    const rows = forward.filter((a) => a.destination === dest);
    const a = last(rows);
    const succeeded = rows.some((r) => r.outcome === 'success');
    let st;
    let stateText;
    if (succeeded) {
      st = revertedOk.has(dest) ? 'reverted' : 'success';
    } else if (a && a.outcome === 'skipped') {
      st = 'skipped';
    } else if (a) {
      if (a.outcome === 'retryable' && running) st = created.status === 'PROCESSING' ? 'inflight' : 'retrying';
      else st = 'failed';
      if (st === 'inflight') stateText = 'retry in flight';
    } else if (running && created.status === 'PROCESSING' && previousDone) {
      st = 'inflight';
    } else {
      st = 'waiting';
      if (!running && created) stateText = 'not called';
    }
    previousDone = succeeded || st === 'skipped';
    let label = dest;
    if (dest === 'billing') {
      const url = (a && a.endpointUrl) || '';
      label = url.includes('high-value') ? 'high-value' : url.includes('/billing') ? 'billing' : 'billing / high-value';
    }
    const extra = { stateText };
    if (dest === 'fraudCheck' && a && a.responsePayload && a.responsePayload.riskScore !== undefined) {
      extra.note = `risk ${a.responsePayload.riskScore}`;
    }
    if (a && a.outcome === 'skipped') extra.note = a.errorMessage || 'no route matched';
    const step = node(dest, label, st, attemptDetail(rows, extra));
    if (revertible) {
      step.classList.add('revertible');
      step.dataset.revertible = 'true';
    }
    nodes.push(step);
  }
  const rowsOut = [el('div', { class: 'pipeline forward', 'aria-label': 'forward steps' },
    el('span', { class: 'row-label', text: 'Forward' }), el('div', { class: 'nodes' }, nodes))];

  const cancellation = t.events.find((e) => e.eventType === '!OrderCreated');
  const compensating = t.deadLetters.some((d) => !DLQ_DONE.has(d.status))
    || (cancellation && !EVENT_DONE.has(cancellation.status));
  const canRevert = steps.some((s) => s.revertible);
  if (reverts.length || t.deadLetters.length || cancellation) {
    // Grouped by destination in order of the first attempt: the order the saga undid them in.
    const order = [];
    for (const a of reverts) if (!order.includes(a.destination)) order.push(a.destination);
    const revertNodes = order.map((dest) => {
      const rows = reverts.filter((a) => a.destination === dest);
      const a = last(rows);
      let st;
      if (rows.some((r) => r.outcome === 'success')) st = 'reverted';
      else if (a.outcome === 'skipped') st = 'skipped';
      else if (a.outcome === 'retryable' && compensating) st = 'retrying';
      else st = 'failed';
      const extra = a.outcome === 'skipped' ? { note: a.errorMessage || 'nothing to revert' } : {};
      return node(dest, dest, st, attemptDetail(rows, extra));
    });
    if (compensating) revertNodes.push(node('compensation', 'compensation', 'inflight', { stateText: 'in progress' }));
    const why = [];
    for (const d of t.deadLetters) why.push(`DLQ #${d.id} ${d.reason} · ${d.status}`);
    if (cancellation) why.push(`cancellation · ${cancellation.status}`);
    rowsOut.push(el('div', { class: 'pipeline revert-row', 'aria-label': 'compensation steps, newest first' },
      el('span', { class: 'row-label', text: 'Reverts (LIFO)' }),
      el('div', { class: 'nodes' }, revertNodes.length ? revertNodes : el('span', { class: 'muted',
        text: canRevert || !state.fanout ? 'nothing to revert' : 'nothing to revert: no step of this fan-out has a revert' })),
      el('span', { class: 'row-why muted', text: why.join(' · ') })));
  }

  const updates = t.events.filter((e) => e.eventType === 'OrderStatusUpdated');
  if (updates.length) {
    const notes = updates.map((e) => {
      const rows = attempts.filter((a) => a.eventId === e.id);
      // The status is in the payload of whichever destination the event went to.
      const payload = Object.values(e.payloads || {}).map((p) => p && p.payload).find((p) => p && p.newStatus);
      const to = payload && payload.newStatus ? payload.newStatus : 'status';
      return node(`notify-${token(to)}`, `→ ${to}`, eventState(e), attemptDetail(rows));
    });
    rowsOut.push(el('div', { class: 'pipeline notify-row', 'aria-label': 'notifications' },
      el('span', { class: 'row-label', text: 'Notifications' }), el('div', { class: 'nodes' }, notes)));
  }
  return rowsOut;
}

async function openAudit(id) {
  state.auditId = id;
  state.auditSig = '';
  state.auditData = null;
  $('#audit-title').textContent = `Order #${id}: audit timeline`;
  $('#audit-body').replaceChildren(el('p', { class: 'muted', text: 'loading…' }));
  const dialog = $('#audit');
  if (!dialog.open) dialog.showModal();
  try {
    await refreshAudit();
  } catch (e) {
    $('#audit-body').replaceChildren(el('p', { class: 'error-text', text: e.message }));
  }
}

async function refreshAudit() {
  const dialog = $('#audit');
  if (!dialog.open || state.auditId === null) return;
  const id = state.auditId;
  const t = await fetchTimeline(id, state.auditData);
  if (state.auditId !== id) return;
  state.auditData = t;
  const sig = timelineSig(t);
  if (sig === state.auditSig) return;
  state.auditSig = sig;
  const body = $('#audit-body');
  const open = new Set([...body.querySelectorAll('details[open]')].map((d) => d.dataset.key));
  body.replaceChildren(...auditView(t, open));
}

function table(headers, rows, cls) {
  return el('div', { class: 'table-wrap' }, el('table', { class: cls },
    el('thead', null, el('tr', null, headers.map((h) => el('th', { text: h })))),
    el('tbody', null, rows)));
}

function cell(value, cls) {
  return el('td', { class: cls }, value === null || value === undefined ? '—' : value);
}

function auditView(t, open) {
  const o = t.order;
  const facts = [['Customer', o.customerId], ['Amount', money(o.totalAmount, o.currency)],
    ['Shipping', o.shippingType], ['Status', o.status], ['Created', o.createdAt],
    ['Updated', o.updatedAt], ['Reason', o.statusReason || '—']];
  const summary = el('dl', { class: 'summary' }, facts.map(([k, v]) => el('div', { class: k === 'Reason' ? 'wide' : undefined },
    el('dt', { text: k }), el('dd', { class: k === 'Customer' ? 'customer' : undefined, text: v }))));

  const events = table(['Event', 'Type', 'Status', 'Runs', 'Last error', 'Created', 'Processed'],
    t.events.map((e) => el('tr', null, cell(`#${e.id}`), cell(e.eventType), cell(e.status),
      cell(e.attempts), cell(e.lastError, 'wrap'), cell(timeEl(e.createdAt, true)),
      cell(e.processedAt ? timeEl(e.processedAt, true) : null))), 'events');

  const dead = t.deadLetters.length
    ? table(['Dead letter', 'Reason', 'Status', 'Runs', 'Last error', 'Revert error'],
      t.deadLetters.map((d) => el('tr', null, cell(`#${d.id}`), cell(d.reason), cell(d.status),
        cell(d.attempts), cell(d.lastError, 'wrap'), cell(d.revertError, d.revertError ? 'wrap' : undefined))), 'dead-letters')
    : el('p', { class: 'muted', text: 'No dead letters.' });

  const attempts = [...t.attempts].sort(byId).map((a) => {
    const key = `attempt-${a.id}`;
    const details = el('details', { class: `attempt outcome-${token(a.outcome)}`, data: { key, destination: a.destination, outcome: a.outcome } },
      el('summary', null,
        el('span', { class: 'a-time' }, timeEl(a.publishedAt, true)),
        el('span', { class: 'a-dest', text: a.destination }),
        el('span', { class: 'a-try', text: `try ${a.attempt}` }),
        el('span', { class: 'a-method', text: a.httpMethod || '—' }),
        el('span', { class: 'a-url', text: a.endpointUrl || '—' }),
        el('span', { class: 'a-status', text: a.responseStatus !== null ? `HTTP ${a.responseStatus}` : a.outcome === 'skipped' ? '—' : 'no answer' }),
        el('span', { class: `a-outcome badge outcome-${token(a.outcome)}`, text: a.outcome }),
        el('span', { class: 'a-ms', text: a.durationMs === null ? '' : `${a.durationMs} ms` })),
      a.errorMessage ? el('p', { class: 'error-text', text: a.errorMessage }) : null,
      el('p', { class: 'muted small-text', text: `event #${a.eventId} ${a.eventType || ''} · Idempotency-Key ${a.idempotencyKey || '—'}` }),
      el('div', { class: 'payloads' },
        el('div', null, el('h4', { text: 'Request' }), el('pre', { text: a.requestPayload !== null ? json(a.requestPayload) : a.bodiesShortened ? '(over 16 KiB: not listed here; it is in the audit table)' : '(no body)' })),
        responseView(a)));
    if (open.has(key)) details.open = true;
    return details;
  });

  return [summary,
    el('h3', { text: t.attemptsTruncated ? `Attempts (the newest ${t.attempts.length})` : `Attempts (${t.attempts.length})` }),
    attempts.length ? el('div', { class: 'attempts' }, attempts) : el('p', { class: 'muted', text: 'No calls yet.' }),
    el('h3', { text: 'Events' }), events,
    el('h3', { text: 'Dead letters' }), dead];
}

// Bytes that are neither JSON nor text (a.responseBody, base64): a readable preview, invalid
// UTF-8 as U+FFFD and control characters as \xNN, under a visible mark. Text only, never HTML.
const PREVIEW_CHARS = 4096;

function bytesPreview(body) {
  let bytes;
  try {
    bytes = Uint8Array.from(atob(body.data || ''), (c) => c.charCodeAt(0));
  } catch {
    return '(not decodable)';
  }
  const text = new TextDecoder('utf-8', { fatal: false }).decode(bytes);
  const shown = text.length > PREVIEW_CHARS ? `${text.slice(0, PREVIEW_CHARS)}…` : text;
  // eslint-disable-next-line no-control-regex
  return shown.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g,
    (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
}

function responseView(a) {
  const marks = [];
  let text = '(no body)';
  if (a.responsePayload !== null && a.responsePayload !== undefined) text = json(a.responsePayload);
  else if (a.responseText) text = a.responseText;
  else if (a.responseBody) {
    text = bytesPreview(a.responseBody);
    marks.push(el('span', { class: 'badge body-mark binary', text: `binary / not UTF-8 — ${a.responseBody.bytes} bytes, shown escaped` }));
  }
  if (a.responseTruncated) marks.push(el('span', { class: 'badge body-mark truncated', text: 'cut at the size limit' }));
  if (a.bodiesShortened) marks.push(el('span', { class: 'badge body-mark truncated', text: 'over 16 KiB: a JSON body is not listed, text and bytes only their start' }));
  return el('div', { class: 'response', data: { body: a.responseBody ? 'bytes' : a.responseText ? 'text' : a.responsePayload !== null ? 'json' : 'none' } },
    el('h4', null, 'Response', a.responseContentType ? el('span', { class: 'muted small-text content-type', text: ` · ${a.responseContentType}` }) : null),
    marks.length ? el('p', { class: 'body-marks' }, marks) : null,
    el('pre', { text }));
}

function tiles(entries) {
  return el('div', { class: 'tiles' }, entries.map(([label, value, cls]) =>
    el('div', { class: `tile ${cls || ''}`, data: { key: label } },
      el('span', { class: 'tile-value', text: value }), el('span', { class: 'tile-label', text: label }))));
}

async function refreshStats() {
  let s;
  try {
    s = await api('GET', '/api/outbox/stats');
  } catch (e) {
    if (e.status !== 404) throw e;
    for (const id of ['#stats-outbox', '#stats-dlq', '#stats-orders', '#stats-destinations']) {
      const h = $(id).firstElementChild;
      $(id).replaceChildren(h, el('p', { class: 'muted', text: 'not available (GET /api/outbox/stats answered 404)' }));
    }
    return;
  }
  const n = (m, k) => (m && typeof m[k] === 'number' ? m[k] : 0);
  const outbox = s.outbox || {};
  const age = s.oldestDueAgeSeconds;
  const pendingAge = s.oldestPendingAgeSeconds;
  const waits = age === null || age === undefined ? 'nothing due' : `oldest due event waits ${Number(age).toFixed(1)} s`;
  const undelivered = pendingAge === null || pendingAge === undefined ? '' : ` · oldest undelivered written ${Number(pendingAge).toFixed(1)} s ago`;
  $('#stats-outbox').replaceChildren(el('h2', { text: 'Outbox' }),
    tiles([['pending', n(outbox, 'PENDING')], ['processing', n(outbox, 'PROCESSING')],
      ['processed', n(outbox, 'PROCESSED')], ['dead', n(outbox, 'DEAD'), n(outbox, 'DEAD') ? 'bad' : '']]),
    el('p', { class: 'muted small-text', text: waits + undelivered }));
  const dl = s.deadLetters || {};
  const reasons = Object.entries(dl.byReason || {}).filter(([, v]) => v > 0);
  $('#stats-dlq').replaceChildren(el('h2', { text: 'Dead letters' }),
    tiles([['pending', n(dl.byStatus, 'PENDING')], ['processing', n(dl.byStatus, 'PROCESSING')],
      ['processed', n(dl.byStatus, 'PROCESSED')], ['failed', n(dl.byStatus, 'FAILED'), n(dl.byStatus, 'FAILED') ? 'bad' : '']]),
    el('p', { class: 'muted small-text', text: reasons.length ? reasons.map(([k, v]) => `${k} ${v}`).join(' · ') : 'no dead letters' }));
  const orders = Object.entries(s.orders || {});
  $('#stats-orders').replaceChildren(el('h2', { text: 'Orders' }),
    orders.length
      ? el('div', { class: 'chips' }, orders.map(([k, v]) => el('span', { class: `badge status-${token(k)}`, data: { status: k } }, `${k} `, el('b', { text: v }))))
      : el('p', { class: 'muted', text: 'none yet' }));
  renderDestinations(s.destinations || {});
}

// Each destination's circuit (closed / half-open / open, with the time left before a probe) and
// what it held back: the breaker and the limits, as this process sees them.
function renderDestinations(destinations) {
  const entries = Object.entries(destinations);
  const open = entries.filter(([, d]) => d.circuit !== 'closed').length;
  $('#stats-destinations').replaceChildren(el('h2', { text: 'Destinations' }),
    entries.length
      ? el('div', { class: 'chips' }, entries.map(([name, d]) => {
        const left = typeof d.opensAgainInSeconds === 'number' ? ` · probe in ${Math.ceil(d.opensAgainInSeconds)} s` : '';
        const title = `circuit ${d.circuit.replace('_', '-')}${left}; ${d.inFlight} in flight; ${d.held} held back`;
        return el('span', { class: `badge circuit-${token(d.circuit)}`, data: { destination: name, circuit: d.circuit }, title },
          `${name} `, el('b', { text: d.circuit === 'closed' ? '✓' : d.circuit.replace('_', '-') + left }));
      }))
      : el('p', { class: 'muted', text: 'no engine in this process' }),
    el('p', { class: 'muted small-text', text: open ? `${open} circuit(s) not closed: their events wait, spending no retries` : 'every circuit closed' }));
}

async function refreshConsistency(whole = false) {
  const box = $('#consistency');
  const check = el('button', { type: 'button', class: 'small', data: { action: 'check' }, text: 'Check now' });
  check.addEventListener('click', () => act(check, () => refreshConsistency(true)));
  let r;
  try {
    r = await api('GET', whole ? '/api/admin/consistency' : `/api/admin/consistency?limit=${CONSISTENCY_WINDOW}`);
  } catch (e) {
    box.replaceChildren(el('h2', { text: 'Consistency' }), el('p', { class: 'error-text', text: e.message }), check);
    if (e.status === 0) throw e;
    return;
  }
  const violations = Array.isArray(r.violations) ? r.violations : [];
  const found = typeof r.violationCount === 'number' ? r.violationCount : violations.length;
  box.replaceChildren(el('h2', { text: 'Consistency' }),
    tiles([['checked', r.checked], ['unchecked', r.unchecked],
      ['violations', found, found ? 'bad' : 'good']]),
    violations.length
      ? el('ul', { class: 'violations' }, violations.slice(0, 10).map((v) => el('li', null,
        el('b', { text: `#${v.orderId}` }), ' ', v.problem)))
      : el('p', { class: 'muted small-text', text: 'every checked order matches the simulator ledger' }),
    check);
  box.dataset.violations = String(found);
  box.dataset.checked = String(r.checked);
}

async function refreshDlq() {
  const { deadLetters } = await api('GET', '/api/dlq?limit=20');
  const sig = JSON.stringify(deadLetters);
  if (sig === state.dlqSig) return;
  state.dlqSig = sig;
  const box = $('#dlq');
  if (!deadLetters.length) {
    box.replaceChildren(el('p', { class: 'muted', text: 'Empty: nothing needed compensation yet.' }));
    return;
  }
  box.replaceChildren(table(['#', 'Order', 'Event', 'Reason', 'Status', 'Runs', 'Last error', 'Revert error', 'Failed at', ''],
    deadLetters.map((d) => {
      const retry = el('button', { type: 'button', class: 'small warn', data: { action: 'redrive' }, text: 'Retry',
        disabled: d.status !== 'FAILED', title: d.status === 'FAILED' ? 'Run the compensation again' : 'Only a FAILED dead letter can be retried' });
      retry.addEventListener('click', () => act(retry, () => api('POST', `/api/dlq/${d.id}/retry`), `Dead letter #${d.id} redriven`));
      const order = el('button', { type: 'button', class: 'link', text: `#${d.aggregateId}` });
      order.addEventListener('click', () => openAudit(Number(d.aggregateId)));
      return el('tr', { data: { dlqId: d.id, status: d.status } }, cell(String(d.id)), cell(order), cell(d.eventType),
        cell(d.reason), cell(el('span', { class: `badge dlq-${token(d.status)}`, text: d.status })), cell(d.attempts),
        cell(clip(d.lastError), 'wrap'), cell(clip(d.revertError), d.revertError ? 'wrap' : undefined),
        cell(timeEl(d.failedAt)), cell(retry));
    }), 'dlq-table'));
}

function percent(rate) {
  return Math.round(Number(rate) * 100);
}

async function putKnob(name, patch) {
  try {
    const config = await api('PUT', '/api/simulator/config', { body: { services: { [name]: patch } } });
    // Not forced: an answer to an earlier change must not overwrite a field being typed in.
    renderKnobs(config);
  } catch (e) {
    notify(e.message, 'error');
    refreshKnobs().catch(() => {});
  }
}

function knobRow(name) {
  const inputs = {};
  const send = (patch) => putKnob(name, patch);
  const number = (field, min, max, title) => {
    const i = el('input', { type: 'number', name: field, min, max, step: 1, title, inputmode: 'numeric' });
    inputs[field] = i;
    return i;
  };
  const slider = (field, label) => {
    const i = el('input', { type: 'range', name: field, min: 0, max: 100, step: 1, 'aria-label': `${name} ${label}` });
    const out = el('output', { class: 'pct' });
    i.addEventListener('input', () => { out.textContent = `${i.value}%`; });
    i.addEventListener('change', () => send({ [field]: Number(i.value) / 100 }));
    inputs[field] = i;
    inputs[`${field}Output`] = out;
    return [i, out];
  };
  const status = el('select', { name: 'failureStatus', 'aria-label': `${name} failure status` },
    STATUS_CHOICES.map((s) => el('option', { value: s, text: s })));
  status.addEventListener('change', () => send({ failureStatus: Number(status.value) }));
  inputs.failureStatus = status;

  const retryAfter = el('input', { type: 'text', name: 'retryAfter', placeholder: 'none', 'aria-label': `${name} Retry-After`, autocomplete: 'off' });
  retryAfter.addEventListener('change', () => {
    const v = retryAfter.value.trim();
    send({ retryAfter: v === '' ? null : /^\d+$/.test(v) ? Number(v) : v });
  });
  inputs.retryAfter = retryAfter;

  const latMin = number('latencyMin', 0, 60000, 'minimum latency (ms)');
  const latMax = number('latencyMax', 0, 60000, 'maximum latency (ms)');
  const sendLatency = () => {
    const lo = Math.max(0, Number(latMin.value) || 0);
    const hi = Math.max(lo, Number(latMax.value) || 0);
    send({ latencyMs: [lo, hi] });
  };
  latMin.addEventListener('change', sendLatency);
  latMax.addEventListener('change', sendLatency);
  const lateMs = number('lateMs', 0, 60000, 'late answer delay (ms)');
  lateMs.addEventListener('change', () => send({ lateMs: Number(lateMs.value) || 0 }));
  const failNext = number('failNext', 0, 1000000, 'fail the next N calls');
  failNext.addEventListener('change', () => send({ failNext: Number(failNext.value) || 0 }));

  state.knobInputs.set(name, inputs);
  return el('div', { class: 'knob', data: { knob: name } },
    el('div', { class: 'knob-line' },
      el('span', { class: 'knob-name', text: name }),
      el('label', { class: 'knob-status' }, 'answers ', status)),
    el('label', { class: 'knob-rate' }, el('span', { class: 'knob-rate-label', text: 'failures' }),
      slider('failureRate', 'failure rate')),
    el('div', { class: 'knob-line secondary' },
      el('label', null, 'fail next ', failNext),
      el('label', null, 'Retry-After ', retryAfter, ' s')),
    el('details', { class: 'knob-more', data: { key: name } },
      el('summary', { text: 'latency & late answers' }),
      el('div', { class: 'knob-line secondary' },
        el('label', null, 'latency ', latMin), el('span', { text: '–' }), el('label', null, latMax, ' ms')),
      el('div', { class: 'knob-line secondary' },
        el('label', { class: 'knob-rate' }, el('span', { class: 'knob-rate-label', text: 'late' }), slider('lateRate', 'late answer rate')),
        el('label', null, 'after ', lateMs, ' ms'))));
}

function setValue(input, value, force) {
  // Never fight the user: a field being edited keeps what they typed.
  if (!force && document.activeElement === input) return;
  const v = String(value);
  if (input.value !== v) input.value = v;
}

function renderKnobs(config, force = false) {
  const box = $('#knobs');
  const names = Object.keys(config.services || {});
  if (box.dataset.names !== names.join(',')) {
    state.knobInputs.clear();
    box.replaceChildren(...names.map(knobRow));
    box.dataset.names = names.join(',');
    force = true;
  }
  for (const name of names) {
    const k = config.services[name];
    const i = state.knobInputs.get(name);
    setValue(i.failureRate, percent(k.failureRate), force);
    i.failureRateOutput.textContent = `${percent(k.failureRate)}%`;
    if (![...i.failureStatus.options].some((o) => o.value === String(k.failureStatus))) {
      i.failureStatus.append(el('option', { value: k.failureStatus, text: k.failureStatus }));
    }
    setValue(i.failureStatus, k.failureStatus, force);
    setValue(i.retryAfter, k.retryAfter === null || k.retryAfter === undefined ? '' : k.retryAfter, force);
    const lat = Array.isArray(k.latencyMs) ? k.latencyMs : [k.latencyMs, k.latencyMs];
    setValue(i.latencyMin, lat[0], force);
    setValue(i.latencyMax, lat[1], force);
    setValue(i.lateRate, percent(k.lateRate), force);
    i.lateRateOutput.textContent = `${percent(k.lateRate)}%`;
    setValue(i.lateMs, k.lateMs, force);
    setValue(i.failNext, k.failNext, force);
    const row = box.querySelector(`[data-knob="${CSS.escape(name)}"]`);
    row.classList.toggle('broken', k.failureRate > 0 || k.failNext > 0);
  }
}

async function refreshKnobs() {
  try {
    renderKnobs(await api('GET', '/api/simulator/config'));
  } catch (e) {
    // No simulator in this process (simulator.enabled is false): its partners run in a process
    // of their own, with their knobs there. Not an error of this page's.
    if (e.status !== 404) throw e;
    simulatorElsewhere();
  }
}

function simulatorElsewhere() {
  const box = $('#knobs');
  if (box.dataset.names === '-') return;
  state.knobInputs.clear();
  box.dataset.names = '-';
  box.replaceChildren(el('p', {
    class: 'muted',
    text: 'This outboxd does not run the simulated services (simulator.enabled is false): they ' +
      'run in a process of their own, and so do their knobs, ledger and reset ' +
      '(GET/PUT /api/simulator/config there).',
  }));
  $('#sim-reset').hidden = true;
}

function parseItems(text) {
  const parts = text.split(',').map((s) => s.trim()).filter(Boolean);
  if (!parts.length) return undefined;
  return parts.map((p) => {
    const m = p.match(/^(.*?)\s*(?:[x×*:]\s*(\S+))?$/i);
    const sku = m[1].trim();
    if (m[2] === undefined) return { sku, quantity: 1 };
    // A quantity that is not a number goes to the server as typed: its message names the field.
    return { sku, quantity: /^-?\d+$/.test(m[2]) ? Number(m[2]) : m[2] };
  });
}

function parseAmount(text) {
  const t = text.trim();
  if (t === '') return undefined;
  return /^-?\d+(\.\d+)?$/.test(t) ? Number(t) : t;
}

function clearFieldErrors(form) {
  for (const slot of form.querySelectorAll('[data-error-for]')) slot.textContent = '';
  for (const input of form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
}

function showFieldErrors(form, details, fallback) {
  if (!Array.isArray(details) || details.length === 0) {
    form.querySelector('[data-error-for=""]').textContent = fallback;
    return;
  }
  for (const d of details) {
    const field = String(d.field || '');
    const root = field.split(/[.[]/)[0];
    const slot = form.querySelector(`[data-error-for="${CSS.escape(root)}"]`) || form.querySelector('[data-error-for=""]');
    const text = field ? `${field} ${d.message}` : String(d.message);
    slot.textContent = slot.textContent ? `${slot.textContent}; ${text}` : text;
    const input = form.elements.namedItem(root);
    if (input) input.setAttribute('aria-invalid', 'true');
  }
}

async function submitOrder(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const f = form.elements;
  clearFieldErrors(form);
  const body = {
    customerId: f.namedItem('customerId').value,
    totalAmount: parseAmount(f.namedItem('totalAmount').value),
    shippingType: f.namedItem('shippingType').value,
    items: parseItems(f.namedItem('items').value),
  };
  const submit = form.querySelector('button[type=submit]');
  submit.disabled = true;
  try {
    const o = await api('POST', '/api/orders', { body });
    notify(`Order #${o.id} created for ${o.customerId}`, 'ok');
  } catch (e) {
    if (e.status === 422) {
      showFieldErrors(form, e.details, e.message);
      notify('The order was not created: see the marked fields', 'error');
    } else {
      form.querySelector('[data-error-for=""]').textContent = e.message;
      notify(e.message, 'error');
    }
  } finally {
    submit.disabled = false;
    refreshSoon();
  }
}

function start() {
  const tokenInput = $('#admin-token');
  tokenInput.value = state.token;
  tokenInput.addEventListener('input', () => {
    state.token = tokenInput.value.trim();
    if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
    else sessionStorage.removeItem(TOKEN_KEY);
    state.fanout = null; // read again with the new token
    refreshSoon();
  });
  $('#token-form').addEventListener('submit', (e) => e.preventDefault());
  $('#create-form').addEventListener('submit', submitOrder);
  $('#orders-filter').addEventListener('change', () => refreshSoon());
  const reset = $('#sim-reset');
  reset.addEventListener('click', () => act(reset, async () => {
    await api('POST', '/api/simulator/reset');
    renderKnobs(await api('GET', '/api/simulator/config'), true);
  }, 'Simulator reset: initial knobs, empty ledger, no idempotency keys'));
  const dialog = $('#audit');
  $('#audit-close').addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => { state.auditId = null; state.auditSig = ''; state.auditData = null; });
  // A click on the backdrop (outside the dialog box) closes it too.
  dialog.addEventListener('click', (e) => { if (e.target === dialog) dialog.close(); });
  poll();
}

start();
