// Chapter 5's add-on, on the widget's lab: a flaky client that resends with (or without) an
// Idempotency-Key using real fetches, the dedup store's window/memory and failure mode, the handler
// guards under a forced redelivery, and the lab's real outbox. Every figure comes from the API.

import { onLab } from './lab-addon.js';
import { h, setAttr, setText } from './widget/util.js';

const root = document.getElementById('ch5-lab');
const q = (role) => root.querySelector(`[data-role="${role}"]`);
const buttons = ['send-key', 'send-nokey', 'outage', 'redeliver'].map(q);
const RESEND_MS = 300;

let ctx = null; // {lab, api}
let sending = false;
let storeTimer = null;

const fmt = (n) => Number(n).toLocaleString('en-GB', { maximumFractionDigits: 1 });

function showError(res) {
  const d = (res && res.data) || {};
  setText(q('error'), res && !res.ok ? `${d.error || `HTTP ${res.status}`}: ${d.detail || ''}` : '');
}

/** One real POST; a "dropped" response is one the client never reads (the job may exist anyway). */
async function post(key) {
  const headers = { 'Content-Type': 'application/json', Authorization: `Bearer ${ctx.lab.token}` };
  if (key) headers['Idempotency-Key'] = key;
  const res = await fetch(`/api/labs/${ctx.lab.id}/jobs`, { method: 'POST', headers, credentials: 'same-origin',
    body: JSON.stringify({ sample: 'carphone_pristine' }) });
  return res;
}

async function flakySend(withKey) {
  if (!ctx || sending) return;
  sending = true;
  const drops = Math.max(0, Math.min(5, parseInt(root.querySelector('#ch5-drops').value, 10) || 0));
  const key = withKey ? crypto.randomUUID() : null;
  const log = q('client-log');
  log.replaceChildren();
  const jobs = new Set();
  for (let attempt = 1; attempt <= drops + 1; attempt += 1) {
    const res = await post(key);
    const tag = key ? `key ${key.slice(0, 8)}…` : 'no key';
    if (attempt <= drops) {
      // the server answered; the network lost it. The client cannot know a job was made.
      if (res.ok) jobs.add((await res.json()).job_id);
      log.append(h('li', { 'data-kind': 'lost' }, `send ${attempt} (${tag}): response lost on the network`));
      await new Promise((r) => setTimeout(r, RESEND_MS));
      continue;
    }
    const data = await res.json().catch(() => ({}));
    const replayed = res.headers.get('Idempotent-Replayed') === 'true';
    if (res.ok) jobs.add(data.job_id);
    log.append(h('li', { 'data-kind': replayed ? 'replay' : 'ok' },
      `send ${attempt} (${tag}): HTTP ${res.status}${res.ok ? ` job ${data.job_id}` : ` ${data.error || ''}`}`
      + (replayed ? ' — Idempotent-Replayed: true (the original answer)' : '')
      + (res.headers.get('Idempotency-Checked') === 'false' ? ' — unchecked: the store is down (fail open)' : '')));
  }
  setText(q('client-result'), `${drops + 1} sends → ${jobs.size} job${jobs.size === 1 ? '' : 's'} made on the server`);
  setAttr(q('client-result'), 'data-jobs', String(jobs.size));
  sending = false;
  refreshStore();
}

async function refreshStore() {
  if (!ctx) return;
  const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}/idempotency`);
  if (!res.ok) return;
  const s = res.data;
  setText(q('window'), `${fmt(s.fixed_vt_s)} s + ${fmt(s.transcode_p99_s)} s = ${fmt(s.worst_case_duplicate_gap_s)} s`
    + ` → keep keys ${fmt(s.window_s)} s`);
  setText(q('model-mem'), `${fmt(s.model_keys_in_window)} keys × ${s.model_key_bytes} B = ${fmt(s.model_key_store_mb)} MB`);
  setText(q('held'), `${s.keys_held} key${s.keys_held === 1 ? '' : 's'}, ${fmt(s.keys_held_bytes)} B`
    + (s.keys_held ? ` (${fmt(s.keys_held_bytes / s.keys_held)} B each)` : ''));
  setText(q('mode'), s.fail_mode === 'open' ? 'fail open: proceed unchecked' : 'fail closed: refuse with 503');
  setText(q('store'), s.store_down ? 'DOWN (outage fault)' : 'up');
  setAttr(q('store'), 'data-down', String(s.store_down));
}

function renderCounts(counts) {
  if (!counts) return;
  for (const td of root.querySelectorAll('[data-c]')) {
    const c = td.dataset.c;
    setText(td, String(c === 'runs' ? (counts.succeeded || 0) + (counts.duplicate_completions || 0) : counts[c] || 0));
  }
  setText(q('cost'), `${counts.idem_replayed || 0} replayed, ${counts.idem_conflicts || 0} in-progress 409s, `
    + `${counts.idem_unchecked || 0} let through unchecked, ${counts.idem_refused || 0} refused`);
}

async function refreshOutbox() {
  if (!ctx) return;
  const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}/outbox`);
  if (!res.ok) return;
  const list = q('outbox');
  const emails = res.data.emails;
  list.replaceChildren(...(emails.length ? emails.map((e) => h('li', {},
    `t=${fmt(e.t_sim)} s · job ${e.job_id} · attempt ${e.attempt} · “${e.subject}”`)) : [h('li', {}, 'empty')]));
  setAttr(list, 'data-count', String(emails.length));
}

async function forceRedelivery() {
  if (!ctx) return;
  const patch = await ctx.api('PATCH', `/api/labs/${ctx.lab.id}/settings`, { vt_seconds: 300, job_duration: 400,
    heartbeat: false, guard: 'off', max_attempts: 2, retry_policy: 'none' });
  showError(patch);
  if (!patch.ok) return;
  showError(await ctx.api('POST', `/api/labs/${ctx.lab.id}/jobs`, { sample: 'carphone_pristine' }));
}

q('send-key').addEventListener('click', () => flakySend(true));
q('send-nokey').addEventListener('click', () => flakySend(false));
q('redeliver').addEventListener('click', forceRedelivery);
q('outage').addEventListener('click', async () => {
  showError(await ctx.api('POST', `/api/labs/${ctx.lab.id}/faults`, { type: 'dedup_outage', duration_s: 600 }));
  refreshStore();
});

onLab({
  ready({ lab, api, snapshot }) {
    ctx = { lab, api };
    q('client-log').replaceChildren();
    setText(q('client-result'), '');
    setAttr(q('outbox-link'), 'href', `/api/labs/${lab.id}/outbox`);
    for (const b of buttons) b.disabled = false;
    renderCounts(snapshot && snapshot.counts);
    refreshStore();
    refreshOutbox();
    clearInterval(storeTimer);
    storeTimer = setInterval(refreshStore, 2000);
    setAttr(root, 'data-state', 'ready');
  },
  event(ev) {
    if (ev.type === 'email.sent') refreshOutbox();
  },
  snapshot(snap) {
    if (ctx) renderCounts(snap.counts);
  },
});
