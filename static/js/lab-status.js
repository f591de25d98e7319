// Chapter 3's add-on, on the widget's lab: the same jobs watched five ways at once, each a real client.
// Plain polling and ETag polling are fetch loops in this page (the next request waits for the last
// answer); the long-poll is one held request for all the watched jobs (a browser opens at most six
// connections to a host); WebSocket push is the widget's own socket; webhooks are signed POSTs the
// lab's delivery thread makes to the lab's built-in receiver, whose arrivals come back as events.
// Every count and delay below is measured here or by the server; the model's arithmetic sits beside it.

import { onLab } from './lab-addon.js';
import { h, setAttr, setText } from './widget/util.js';

const root = document.getElementById('ch3-lab');
const q = (role) => root.querySelector(`[data-role="${role}"]`);
const METHODS = [
  { id: 'poll', label: 'Polling' },
  { id: 'etag', label: 'Polling with ETag' },
  { id: 'long', label: 'Long-poll (held ≤ 25 s)' },
  { id: 'ws', label: 'WebSocket push' },
  { id: 'hook', label: 'Webhook (built-in receiver)' },
];
const TERMINAL = { 'job.succeeded': 'done', 'job.dead_lettered': 'dlq', 'job.lost': 'lost' };
const FINAL = new Set(['done', 'dlq', 'lost']);
const LONG_WAIT_S = 25;
const enc = new TextEncoder();

let ctx = null; // {lab, api}
let round = null; // the jobs being watched now, and what each method has spent and learned
// the numbers model's chapter 3 figures at the lesson's inputs, rendered into the page by the server
const model = JSON.parse(q('lesson-model').textContent);
let recent = []; // events since the lab opened, so a round created after its uploads still sees them
let offset = { ms: 0, rtt: Infinity }; // server clock − this page's clock, from the smallest-RTT answer
const serverNow = () => Date.now() + offset.ms;

const fmt = (n, d = 1) => (n == null || !Number.isFinite(n) ? '–'
  : Number(n).toLocaleString('en-GB', { maximumFractionDigits: d }));

function showError(res) {
  const d = (res && res.data) || {};
  setText(q('error'), res && !res.ok ? `${d.error || `HTTP ${res.status}`}: ${d.detail ? JSON.stringify(d.detail) : ''}` : '');
}

function newRound(ids, interval) {
  const stats = Object.fromEntries(METHODS.map((m) => [m.id,
    { requests: 0, bytes: 0, notModified: 0, refused: 0, learned: new Map() }]));
  return { ids, interval, stats, jobs: new Map(ids.map((id) => [id, { enq: null, done: null, state: 'queued', moves: [] }])),
    stop: false, longAbort: new AbortController() };
}

/** One real GET of the status path; counts what it cost this page (headers as fetch sees them + body). */
async function statusGet(m, path, tag, signal) {
  const headers = { Authorization: `Bearer ${ctx.lab.token}` };
  if (tag) headers['If-None-Match'] = tag;
  const sent = Date.now();
  const res = await fetch(path, { headers, credentials: 'same-origin', cache: 'no-store', signal });
  const text = await res.text();
  const got = Date.now();
  const st = round.stats[m];
  st.requests += 1;
  let hbytes = 15; // "HTTP/1.1 200 OK\r\n"
  res.headers.forEach((v, k) => { hbytes += k.length + v.length + 4; });
  st.bytes += hbytes + enc.encode(text).length;
  if (res.status === 304) st.notModified += 1;
  if (res.status === 429 || res.status === 503) st.refused += 1;
  const server = parseFloat(res.headers.get('Lab-Server-Time'));
  if (Number.isFinite(server) && got - sent < offset.rtt) offset = { ms: server * 1000 - (sent + got) / 2, rtt: got - sent };
  return { res, data: text && res.ok ? JSON.parse(text) : null, at: serverNow() };
}

function learn(m, jobId, state, at) {
  const r = round;
  if (!r || !FINAL.has(state) || r.stats[m].learned.has(jobId)) return;
  r.stats[m].learned.set(jobId, at);
  render();
}

async function pollLoop(m, jobId) {
  const r = round;
  const path = `/api/labs/${ctx.lab.id}/jobs/${jobId}/status?client=${m}`;
  let tag = null;
  while (!r.stop && !r.stats[m].learned.has(jobId)) {
    try {
      const { res, data, at } = await statusGet(m, path, m === 'etag' ? tag : null);
      if (r !== round) return;
      if (res.ok) {
        tag = res.headers.get('ETag');
        learn(m, jobId, data.status, at);
      }
    } catch { /* a network error is one more reason to ask again later */ }
    render();
    await new Promise((done) => setTimeout(done, r.interval * 1000));
  }
}

async function longPollLoop() {
  const r = round;
  const path = `/api/labs/${ctx.lab.id}/status?jobs=${r.ids.join(',')}&client=long`;
  let tag = null;
  while (!r.stop && r.stats.long.learned.size < r.ids.length) {
    try {
      const { res, data, at } = await statusGet('long', tag ? `${path}&wait=${LONG_WAIT_S}` : path, tag, r.longAbort.signal);
      if (r !== round) return;
      if (res.ok) {
        tag = res.headers.get('ETag');
        for (const j of data.jobs) learn('long', j.job_id, j.status, at);
      } else if (res.status !== 304) {
        await new Promise((done) => setTimeout(done, 1000 * (Number(res.headers.get('Retry-After')) || 1)));
      }
    } catch {
      if (r.stop) return;
      await new Promise((done) => setTimeout(done, 1000));
    }
    render();
  }
}

async function startRound() {
  if (!ctx) return;
  const n = Math.max(1, Math.min(10, parseInt(root.querySelector('#ch3-jobs').value, 10) || 5));
  const interval = Math.max(0.5, Math.min(30, Number(root.querySelector('#ch3-interval').value) || 2));
  if (round) { round.stop = true; round.longAbort.abort(); }
  q('start').disabled = true;
  const ids = [];
  for (let i = 0; i < n; i += 1) {
    const res = await ctx.api('POST', `/api/labs/${ctx.lab.id}/jobs`, { sample: 'carphone_pristine' });
    showError(res);
    if (!res.ok) break;
    ids.push(res.data.job_id);
  }
  q('start').disabled = false;
  if (!ids.length) return;
  round = newRound(ids, interval);
  for (const ev of recent) if (round.jobs.has(String(ev.job_id))) apply(ev);
  for (const id of ids) { pollLoop('poll', id); pollLoop('etag', id); }
  longPollLoop();
  setAttr(root, 'data-state', 'watching');
  render();
}

// ---- the WebSocket and webhook columns, and the state machine, come from the lab's events -----------

const MOVES = {
  'job.enqueued': () => ['', 'queued', 'new', 'enqueued'],
  'job.claimed': (ev) => ['queued', 'running', 'ok', `claimed by ${ev.worker_id}, attempt ${ev.attempt}`],
  'lease.expired': () => ['running', 'queued', 'warn', 'lease expired: redelivered'],
  'job.failed': (ev) => ['running', 'retrying', 'warn', `attempt ${ev.attempt} failed`],
  'job.retry_started': (ev) => ['retrying', 'queued', 'ok', `attempt ${ev.attempt} queued`],
  'job.succeeded': (ev) => ['running', 'done', 'ok', `attempt ${ev.attempt} acked`],
  'job.duplicate_blocked': (ev) => ['running', 'done', 'refused', `stale attempt ${ev.attempt} refused`],
  'job.duplicate_completed': (ev) => ['done', 'done', 'bad', `attempt ${ev.attempt} completed again: no CAS guard`],
  'job.claim_refused': (ev) => [ev.data.state, 'running', 'refused', `late delivery of attempt ${ev.attempt} refused`],
  'job.dead_lettered': () => ['running', 'dlq', 'warn', 'dead-lettered'],
  'job.lost': () => ['running', 'lost', 'bad', 'lost (acked early)'],
};

function onEvent(ev) {
  recent.push(ev);
  if (recent.length > 2000) recent = recent.slice(-1000);
  apply(ev);
}

function apply(ev) {
  const r = round;
  if (!r || ev.job_id == null) return;
  const job = r.jobs.get(String(ev.job_id));
  if (!job) return;
  const s = r.stats.ws;
  s.pushed = (s.pushed || 0) + 1;
  s.bytes += enc.encode(JSON.stringify(ev)).length;
  if (ev.type === 'job.enqueued') job.enq = ev.t_real;
  if (MOVES[ev.type]) {
    const [from, to, outcome, why] = MOVES[ev.type](ev);
    job.moves.push({ from, to, outcome, why, t: ev.t_sim });
    if (outcome !== 'refused') job.state = to;
  }
  if (TERMINAL[ev.type] && job.done == null) {
    job.done = ev.t_real * 1000;
    learn('ws', String(ev.job_id), TERMINAL[ev.type], serverNow());
  }
  if (ev.type === 'webhook.received') {
    showArrival(ev);
    const hs = r.stats.hook;
    hs.requests += 1;
    hs.bytes += ev.data.bytes || 0;
    if (ev.data.status === 200 && !hs.learned.has(String(ev.job_id))) {
      hs.learned.set(String(ev.job_id), job.done != null ? job.done + ev.data.delay_ms : null);
      hs.delays = { ...(hs.delays || {}), [ev.job_id]: ev.data.delay_ms };
    }
  }
  if (ev.type === 'job.claim_refused' || ev.type === 'job.duplicate_blocked') {
    setText(q('refused'), `Job ${ev.job_id}: ${MOVES[ev.type](ev)[0]} → ${MOVES[ev.type](ev)[1]} refused by the `
      + 'compare-and-swap; the job is unchanged.');
    showHistory(String(ev.job_id));
  }
  render();
}

function showArrival(ev) {
  const d = ev.data;
  const list = q('arrivals');
  list.prepend(h('li', { 'data-status': String(d.status) }, `${d.msg.slice(-10)} · job ${ev.job_id} · ${d.kind} · `
    + `signature ${d.verified} · answered ${d.status}${d.status === 200 ? '' : ' (fail switch)'}`
    + `${d.duplicate ? ' · duplicate id' : ''} · ${fmt(d.delay_ms, 0)} ms after completion`));
  while (list.children.length > 8) list.lastChild.remove();
}

let loadTimer = null;

/** At most one tally read per 1.5 s, and always one after the last change (a trailing read). */
function refreshServerLoadSoon() {
  if (!loadTimer) loadTimer = setTimeout(() => { loadTimer = null; refreshServerLoad(); }, 1500);
}

/** The same requests as the status endpoint tallied them: body bytes only, which is where a 304 saves. */
async function refreshServerLoad() {
  if (!round) return;
  const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}/status-load`);
  if (!res.ok || !round) return;
  const c = res.data.clients;
  const part = (m, label) => `${label} ${c[m].requests} requests, ${fmt(c[m].bytes / 1000)} kB of bodies`
    + (c[m].not_modified ? ` (${c[m].not_modified} × 304)` : '');
  setText(q('server'), `The status endpoint counted: ${part('poll', 'polling')}; ${part('etag', 'ETag polling')}; `
    + `${part('long', 'long-poll')}. Long-polls held now: ${res.data.long_polls_held} of ${res.data.long_poll_cap}.`);
}

async function showHistory(jobId) {
  const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}/jobs/${jobId}?include=history`);
  if (!res.ok || !round || !round.jobs.has(jobId)) return;
  round.jobs.get(jobId).refusals = res.data.history.cas_refused;
  render();
}

async function lateDelivery() {
  if (!round) return;
  const done = [...round.jobs.entries()].filter(([, j]) => j.state === 'done').map(([id]) => id);
  if (!done.length) { setText(q('error'), 'No watched job is done yet: wait for one to finish.'); return; }
  showError(await ctx.api('POST', `/api/labs/${ctx.lab.id}/jobs/${done[done.length - 1]}/late-delivery`, {}));
}

// Registrations go one after another, in the order asked: the page's own one on load must not land after a
// learner's quick "fail the next N" and switch it off again (on the server, and in the line below)
let hookQueue = Promise.resolve();

function registerHook(failTimes) {
  hookQueue = hookQueue.catch(() => {}).then(async () => { // one that failed does not stop the next
    const res = await ctx.api('PUT', `/api/labs/${ctx.lab.id}/webhook`, { url: 'builtin', fail_times: failTimes });
    showError(res);
    setText(q('hook-state'), res.ok
      ? `registered: the built-in receiver${failTimes ? `, failing the next ${failTimes}` : ''}` : 'not registered');
  });
  return hookQueue;
}

// ---- rendering ------------------------------------------------------------------------------------

function delays(m) {
  const r = round;
  const out = [];
  for (const [id, at] of r.stats[m].learned) {
    const job = r.jobs.get(id);
    if (m === 'hook') { if (r.stats.hook.delays && r.stats.hook.delays[id] != null) out.push(r.stats.hook.delays[id]); continue; }
    if (job && job.done != null && at != null) out.push(Math.max(0, at - job.done));
  }
  return out;
}

const pct = (x) => `${fmt(Math.max(0, x) * 100, 0)}%`;

/** [the lesson's figures, the same formula on this run's W and P] for one method. */
function modelCells(m, W) {
  const P = round.interval;
  const lesson = {
    poll: `L/P = ${fmt(model.watched_jobs, 0)}/${fmt(model.poll_interval_s)} s = ${fmt(model.polls_per_s, 0)}/s: `
      + `${fmt(model.polls_per_completion)} per completion; learns P/2 = ${fmt(model.poll_mean_delay_to_learn_s)} s late`,
    etag: `the same ${fmt(model.polls_per_s, 0)}/s, ${pct(model.etag_unchanged_fraction)} answered 304`,
    long: `max(λ, L/25 s) = ${fmt(model.long_poll_requests_per_s, 0)}/s: `
      + `${fmt(model.long_poll_requests_per_s / model.completions_per_s)} per completion; learns within `
      + `${fmt(model.long_poll_delay_to_learn_s)} s (it re-checks every 500 ms)`,
    ws: `0 requests/s; ${fmt(model.websocket_connections, 0)} sockets ≈ ${fmt(model.websocket_memory_mb)} MB; learns at once`,
    hook: `λ = ${fmt(model.webhook_requests_per_s, 0)}/s: 1 per completion; learns at once`,
  }[m];
  const here = W == null ? 'waiting for a job to finish' : {
    poll: `W/P = ${fmt(W)} s / ${fmt(P)} s = ${fmt(W / P)} per job; P/2 = ${fmt(P * 500, 0)} ms late on average`,
    etag: `${fmt(W / P)} per job, 1 − P/W = ${pct(1 - P / W)} of them 304 (the lesson counts one change per job; `
      + 'here queued → running is a change too)',
    long: `max(1, W/25 s) = ${fmt(Math.max(1, W / LONG_WAIT_S))} per job, if each job had its own long-poll; `
      + 'this page holds one for all its jobs. No re-check timer: the server wakes on the event stream',
    ws: '0 requests: every change is pushed on the open socket',
    hook: '1 per job, plus 1 per failed try',
  }[m];
  return [lesson, here];
}

function render() {
  const r = round;
  if (!r) return;
  const lives = [...r.jobs.values()].filter((j) => j.enq != null && j.done != null).map((j) => j.done / 1000 - j.enq);
  const lifetime = lives.length ? lives.reduce((a, b) => a + b, 0) / lives.length : null;
  const finished = [...r.jobs.values()].filter((j) => FINAL.has(j.state)).length;
  setText(q('round'), `Watching ${r.ids.length} job${r.ids.length === 1 ? '' : 's'} (${r.ids.join(', ')}), `
    + `polling every ${fmt(r.interval)} s: ${finished} finished`
    + (lifetime != null ? `; a job spends W ≈ ${fmt(lifetime)} s from upload to done` : ''));
  setText(q('clock'), Number.isFinite(offset.rtt) ? `Delays use the server's clock: this page reads it from the `
    + `quickest status answer (round trip ${fmt(offset.rtt, 0)} ms, so ± ${fmt(offset.rtt / 2, 0)} ms).` : '');
  for (const m of METHODS) {
    const row = root.querySelector(`tr[data-method="${m.id}"]`);
    const st = r.stats[m.id];
    const d = delays(m.id);
    const mean = d.length ? d.reduce((a, b) => a + b, 0) / d.length : null;
    const cells = {
      requests: m.id === 'ws' ? `0 (${st.pushed || 0} pushed)` : `${st.requests}${st.refused ? ` (${st.refused} refused)` : ''}`,
      bytes: fmt(st.bytes, 0),
      notModified: m.id === 'poll' || m.id === 'etag' || m.id === 'long' ? String(st.notModified) : '–',
      learned: `${st.learned.size} / ${r.ids.length}`,
      mean: mean == null ? '–' : fmt(mean, 0),
      worst: d.length ? fmt(Math.max(...d), 0) : '–',
      perJob: m.id === 'ws' ? '0' : st.learned.size ? fmt(st.requests / st.learned.size) : '–',
    };
    for (const [k, v] of Object.entries(cells)) setText(row.querySelector(`[data-c="${k}"]`), v);
    const [lesson, here] = modelCells(m.id, lifetime);
    const mrow = root.querySelector(`tr[data-model="${m.id}"]`);
    setText(mrow.querySelector('[data-c="lesson"]'), lesson);
    setText(mrow.querySelector('[data-c="here"]'), here);
    setAttr(row, 'data-requests', String(st.requests));
    setAttr(row, 'data-learned', String(st.learned.size));
    setAttr(row, 'data-not-modified', String(st.notModified));
    setAttr(row, 'data-mean-ms', mean == null ? null : String(Math.round(mean)));
  }
  renderMachine(r);
  refreshServerLoadSoon();
  const all = METHODS.every((m) => r.stats[m.id].learned.size === r.ids.length);
  setAttr(root, 'data-learned-all', String(all));
  if (all) setAttr(root, 'data-state', 'done'); // the round is over: every watcher knows (a step reads its rows now)
}

function renderMachine(r) {
  const list = q('machine');
  const key = [...r.jobs.values()].map((j) => `${j.moves.length}:${(j.refusals || []).length}`).join('|');
  if (list.dataset.key === key) return;
  list.dataset.key = key;
  list.replaceChildren(...[...r.jobs.entries()].map(([id, j]) => h('li', { 'data-job': id },
    h('span', { class: 'ch3-job' }, `job ${id}`),
    h('ol', { class: 'ch3-moves' }, ...j.moves.map((mv) => h('li', { 'data-outcome': mv.outcome,
      title: `t=${Math.round(mv.t)} s` },
    `${mv.from ? `${mv.from} → ` : '→ '}${mv.to} `,
    h('strong', {}, { new: '●', ok: '✓ CAS', warn: '↺', refused: '✗ REFUSED', bad: '⚠' }[mv.outcome]),
    ` (${mv.why})`))),
    (j.refusals || []).length ? h('p', { class: 'ch3-refusals' },
      `Server history: ${j.refusals.map((c) => c.reason).join('; ')}`) : null)));
}

setText(q('model-line'), `Lesson model: ${fmt(model.watched_jobs, 0)} watched jobs, ${fmt(model.completions_per_s, 0)} `
  + `completions/s, polling every ${fmt(model.poll_interval_s)} s.`);

q('start').addEventListener('click', startRound);
q('late').addEventListener('click', lateDelivery);
q('fail').addEventListener('click', () => registerHook(Math.max(0, Math.min(10,
  parseInt(root.querySelector('#ch3-fails').value, 10) || 0))));

onLab({
  ready({ lab, api }) {
    if (round) { round.stop = true; round.longAbort.abort(); }
    round = null;
    recent = [];
    ctx = { lab, api };
    q('arrivals').replaceChildren();
    setText(q('server'), '');
    setText(q('refused'), '');
    setAttr(q('hook-link'), 'href', `/api/labs/${lab.id}/webhook`);
    for (const b of root.querySelectorAll('button')) b.disabled = Boolean(lab.viewer);
    if (lab.viewer) setText(q('hook-state'), 'view only: the lab owner uploads, registers and switches');
    else registerHook(0);
    setAttr(root, 'data-state', 'ready');
  },
  event: onEvent,
});
