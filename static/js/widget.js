// Async Work Lab: the live widget on every chapter page (issue 5).
//
// One component, configured by the chapter's preset (`data-preset` on #lab-widget). Everything it
// shows comes from the real lab: the settings schema, presets and event vocabulary from
// /api/meta; state from the snapshot (GET /api/labs/{lab}) plus every event pushed over the
// WebSocket. Model = last snapshot ⊕ events after its last_event_id, so a reload or reconnect
// rebuilds the same numbers; regions are updated in place (keyed), never wiped under the learner.
//
// Plain ES modules, no build step, no CDN.

import {
  errorText, fmtDur, fmtNum, fmtSetting, fmtT, h, idCmp, narrate, nearestIndex, niceStops, setAttr,
  setText, throttled,
} from './widget-util.js';
import { Scrubber } from './widget-scrubber.js';
import { Timeline } from './widget-timeline.js';

// the chapter's widget (#lab-widget), or the two runs of a compare page (data-lab + data-view)
for (const root of document.querySelectorAll('.lw[data-preset]')) boot(root);

// ---------------------------------------------------------------------------------------------
// constants

const RATE_WINDOW = 600; // simulated seconds for the redelivery-rate readout
const EVENTS_MAX = 20000; // same cap as the server's stream
const LOG_SHOW = 150;
const JOBS_SHOWN = 25; // rows of the jobs list in the DOM; a search asks the API for older matches
const ANNOUNCE_MS = 2000;
const KILLABLE = ['busy', 'idle', 'draining', 'rewiring']; // worker states with a live process to SIGKILL
const GAUGES = new Set(['queued', 'running', 'retrying', 'done', 'dlq', 'lost']);
const QUIET = new Set(['job.progress', 'lease.extended']); // no snapshot re-fetch for these
const ANNOUNCE = new Set(['job.enqueued', 'job.claimed', 'lease.expired', 'job.redelivered',
  'job.succeeded', 'job.failed', 'job.retry_scheduled', 'job.dead_lettered', 'job.replayed',
  'job.duplicate_blocked', 'job.duplicate_completed', 'job.lost', 'worker.killed', 'worker.died',
  'fault.started', 'fault.ended', 'breaker.opened', 'breaker.closed', 'clock.paused',
  'clock.resumed', 'clock.stepped']);
const IMPORTANT = new Set([...ANNOUNCE].filter((t) => !['job.enqueued', 'job.claimed'].includes(t)));
const SAMPLES = [
  ['bigbuckbunny', 'Big Buck Bunny (animation)'],
  ['bikes', 'Bikes (street scene)'],
  ['carphone_pristine', 'Car phone (small, talking head)'],
  ['poison', 'Poison: a truncated MP4 that never decodes'],
];
const FAULT_TEXT = {
  storage_outage: ['Storage outage', 'Saving outputs fails for a while: attempts fail and are retried.'],
  poison: ['Poison pill', 'Enqueue a job whose handler crashes the process running it, every time.'],
  slow: ['Slow jobs', 'Jobs started during the fault take three times as long.'],
  dedup_outage: ['Dedup store down', 'Idempotency keys cannot be checked: the lab fails open or closed (chapter 5).'],
};
const SPEED_STOPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
const STEP_CHOICES = [10, 30, 60, 300];
// the state a past moment is rebuilt into; the live values are put aside meanwhile
const MODEL_KEYS = ['settings', 'clock', 'counts', 'workers', 'jobs', 'breaker', 'faults', 'faultUntil', 'tl',
  'redeliveries', 'retries', 'deaths', 'dlq', 'history', 'found', 'snapId'];

// ---------------------------------------------------------------------------------------------

function boot(root) {
  const preset = root.dataset.preset || 'ch8';
  const params = new URLSearchParams(location.search);
  const compact = root.dataset.compact === 'yes'; // one run of a compare page: headline counts + timeline
  const urlSpeed = Number(params.get('speed')) || null;
  const reduceMotion = matchMedia('(prefers-reduced-motion: reduce)');
  const storeKey = `awl:lab:${preset}`;
  const q = (role) => root.querySelector(`[data-role="${role}"]`);

  const S = {
    meta: null, schema: new Map(), controls: new Set(), lab: null,
    settings: {}, clock: null, counts: {}, workers: new Map(), jobs: new Map(),
    breaker: { state: 'closed' }, faults: {}, snapId: null, lastId: null, events: [],
    tl: new Map(), redeliveries: [], retries: [], deaths: new Map(), faultUntil: {}, dlq: [], dlqFetchedFor: -1,
    log: [], logPending: 0, logRebuild: true, announceQueue: [], selectedJob: null,
    history: new Map(), found: new Map(), foundPrefix: new Map(), pausedForInspect: false, renderMs: [],
    past: null, // while viewing a past moment: {at, stash (the live model), buffer (live events held)}
    inspect: null, // the worker or lease whose internals are open: {kind: 'worker'|'lease', id}
  };
  const els = {};
  const api = makeApi(() => S.lab);
  const anonApi = makeApi(() => null);
  let timeline = null, scrubber = null;
  let swapping = null; // the reset or re-create in progress: a 404 meanwhile must not start another

  // ---- start-up --------------------------------------------------------------------------
  start().catch((e) => fatal(e.message || String(e)));

  async function start() {
    const metaRes = await api('GET', '/api/meta');
    if (!metaRes.ok) throw new Error(`could not load /api/meta: ${errorText(metaRes.data, metaRes.status)}`);
    S.meta = metaRes.data;
    for (const s of S.meta.settings) S.schema.set(s.name, s);
    const p = S.meta.presets[preset];
    if (!p) throw new Error(`unknown preset ${preset}`);
    S.controls = new Set(p.controls);
    setText(q('preset-title'), p.title);
    if (p.pipeline === false) root.dataset.pipeline = 'none'; // no job queue: widget.css hides its panels
    const snap = await openLab();
    buildUi();
    applySnapshot(snap);
    q('loading').hidden = true;
    q('body').hidden = false;
    root.dataset.state = 'ready';
    root.dataset.labId = S.lab.id;
    connectWs();
    setInterval(tick, 250);
    announceLoop();
    tick(true);
    announceLab(snap);
  }

  /**
   * Chapter add-ons (templates/_lab_<preset>.html + static/js/lab-<preset>.js) listen on #lab-widget:
   * `lab:ready` {lab, api, meta, snapshot} whenever the widget opens a lab (start, reset, expiry),
   * `lab:event` for every event in stream order, `lab:snapshot` for every snapshot applied. They reuse
   * the widget's lab and token instead of opening their own, so the page drives one real lab.
   */
  function emit(name, detail) {
    root.dispatchEvent(new CustomEvent(name, { detail }));
  }

  function announceLab(snapshot) {
    emit('lab:ready', { lab: S.lab, api, meta: S.meta, snapshot });
  }

  function fatal(msg) {
    const b = q('banner');
    b.replaceChildren(`The lab could not start: ${msg} `,
      h('button', { type: 'button', onclick: () => location.reload() }, 'Try again'));
    b.hidden = false;
    q('loading').hidden = true;
    root.dataset.state = 'error';
  }

  function banner(msg) {
    const b = q('banner');
    if (!msg) { b.hidden = true; return; }
    b.textContent = msg;
    b.hidden = false;
  }

  /** Resume this tab's lab for the preset (sessionStorage), else create one. Viewer links too. */
  async function openLab() {
    const viewLab = root.dataset.lab || params.get('lab'), viewToken = root.dataset.view || params.get('view');
    if (viewLab && viewToken) {
      S.lab = { id: viewLab, token: viewToken, viewer: true };
      const res = await api('GET', `/api/labs/${viewLab}`);
      if (res.ok) return res.data;
      throw new Error(`this read-only link no longer opens a lab (${errorText(res.data, res.status)})`);
    }
    let saved = null;
    try { saved = JSON.parse(sessionStorage.getItem(storeKey) || 'null'); } catch { saved = null; }
    if (saved && saved.id && saved.token) {
      S.lab = saved;
      const res = await api('GET', `/api/labs/${saved.id}`);
      if (res.ok) return res.data;
      if (![401, 403, 404].includes(res.status)) throw new Error(errorText(res.data, res.status));
    }
    return createLab();
  }

  /**
   * S.lab keeps pointing at the old lab until the new one exists: renders, ticks and in-flight
   * snapshot fetches run during the POST, and must never find S.lab null. The POST itself carries no
   * token (the old lab's has nothing to do with the new one).
   */
  async function createLab() {
    const body = { preset };
    if (urlSpeed) body.speed = urlSpeed;
    const res = await anonApi('POST', '/api/labs', body);
    if (res.status !== 201) throw new Error(errorText(res.data, res.status));
    const d = res.data;
    S.lab = { id: d.lab_id, token: d.token, view: d.view_token, ws: d.ws_url };
    try { sessionStorage.setItem(storeKey, JSON.stringify(S.lab)); } catch { /* private mode */ }
    const snap = await api('GET', `/api/labs/${d.lab_id}`);
    if (!snap.ok) throw new Error(errorText(snap.data, snap.status));
    return snap.data;
  }

  async function resetLab() {
    if (swapping) return;
    const btn = els.reset;
    btn.disabled = true;
    setText(els.resetStatus, 'resetting…');
    try {
      await swapLab(async () => {
        if (S.lab && !S.lab.viewer) await api('DELETE', `/api/labs/${S.lab.id}`);
      });
      setText(els.resetStatus, 'fresh lab started');
      updateShare();
    } catch (e) {
      setText(els.resetStatus, `reset failed: ${e.message}`);
    } finally {
      btn.disabled = false;
    }
  }

  /** Replace the lab with a fresh one of the same preset (reset, or the old one expired). One at a time. */
  function swapLab(before) {
    if (swapping) return swapping;
    swapping = (async () => {
      if (scrubber) scrubber.goLive();
      closeWs();
      await before();
      try { sessionStorage.removeItem(storeKey); } catch { /* ignore */ }
      clearModel();
      const snap = await createLab();
      applySnapshot(snap);
      root.dataset.labId = S.lab.id;
      connectWs();
      announceLab(snap);
    })().finally(() => { swapping = null; });
    return swapping;
  }

  function clearModel() {
    Object.assign(S, {
      counts: {}, workers: new Map(), jobs: new Map(), snapId: null, lastId: null, events: [],
      tl: new Map(), redeliveries: [], retries: [], deaths: new Map(), faultUntil: {}, dlq: [], dlqFetchedFor: -1,
      log: [], logPending: 0, logRebuild: true, announceQueue: [], selectedJob: null,
      history: new Map(), found: new Map(), foundPrefix: new Map(), pausedForInspect: false, inspect: null, heldJobs: null,
    });
    els.player.removeAttribute('src');
    els.player.load();
    q('player-wrap').hidden = true;
    renderDetail();
    renderAll();
  }

  // ---- HTTP ------------------------------------------------------------------------------
  function makeApi(getLab) {
    return async function call(method, path, body) {
      const headers = {};
      const lab = getLab();
      if (lab && lab.token) headers.Authorization = `Bearer ${lab.token}`;
      let payload;
      if (body instanceof FormData) payload = body;
      else if (body !== undefined) { headers['Content-Type'] = 'application/json'; payload = JSON.stringify(body); }
      let res;
      try {
        res = await fetch(path, { method, headers, body: payload, credentials: 'same-origin' });
      } catch {
        return { ok: false, status: 0, data: null };
      }
      let data = null;
      if ((res.headers.get('content-type') || '').includes('json')) data = await res.json().catch(() => null);
      return { ok: res.ok, status: res.status, data };
    };
  }

  const labPath = (p = '') => `/api/labs/${S.lab.id}${p}`;

  // ---- live stream -----------------------------------------------------------------------
  let ws = null, wsGen = 0, backoff = 500;

  function connectWs() {
    const gen = ++wsGen;
    const u = new URL(S.lab.ws || `/ws/labs/${S.lab.id}`, location.href);
    u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
    u.searchParams.set('after', S.lastId || '0');
    u.searchParams.set('token', S.lab.token);
    let sock;
    try { sock = new WebSocket(u); } catch { reconnectLater(gen); return; }
    ws = sock;
    sock.onopen = () => { if (gen === wsGen) { setConn('live'); backoff = 500; } };
    sock.onmessage = (m) => {
      if (gen !== wsGen) return;
      try { ingest(JSON.parse(m.data)); } catch (e) { console.error('bad event', e); }
    };
    sock.onclose = (e) => {
      if (gen !== wsGen) return;
      ws = null;
      setConn('reconnecting');
      reconnectLater(gen, e.code);
    };
  }

  function closeWs() {
    wsGen++;
    if (ws) { try { ws.close(); } catch { /* ignore */ } }
    ws = null;
  }

  async function reconnectLater(gen, code) {
    const delay = code === 1013 ? 150 : backoff; // 1013: server cut a too-slow socket
    backoff = Math.min(backoff * 2, 10000);
    // While the socket is down, catch up with one plain request (never stacked).
    const res = await api('GET', labPath(`/events?after=${encodeURIComponent(S.lastId || '0')}`));
    if (gen !== wsGen) return;
    if (res.ok) for (const ev of res.data.events) ingest(ev);
    else if (res.status === 404 && !S.lab.viewer) { await labVanished(); return; }
    setTimeout(() => { if (gen === wsGen) connectWs(); }, delay * (0.75 + Math.random() * 0.5));
  }

  function labVanished() {
    return swapLab(async () => banner('This lab was removed after being idle, so a fresh one was started.'));
  }

  function setConn(state) {
    const el = els.conn;
    el.dataset.conn = state;
    setText(el, { live: '● live', reconnecting: '○ reconnecting…', connecting: 'connecting…' }[state] || state);
  }

  /** One event, in stream order; ids at or below the last seen are ignored (no repeats). */
  function ingest(ev) {
    if (!ev || !ev.id || !ev.type) return;
    if (S.past) { holdLive(ev); return; }
    if (ev.job_id != null && ev.job_id === S.selectedJob) fetchHistorySoon();
    if (S.lastId && idCmp(ev.id, S.lastId) <= 0) return;
    S.lastId = ev.id;
    S.events.push(ev);
    if (S.events.length > EVENTS_MAX + 500) {
      S.events.splice(0, S.events.length - EVENTS_MAX);
      S.trimmed = true;
    }
    const live = !S.snapId || idCmp(ev.id, S.snapId) > 0;
    applyTimeline(ev);
    if (live) {
      applyModel(ev);
      if (!QUIET.has(ev.type)) refresh();
    }
    addLog(ev, live);
    root.dataset.lastEvent = ev.id; // the newest event applied (handy for tests and debugging)
    markDirty();
    emit('lab:event', ev);
  }

  const refresh = throttled(async () => {
    const lab = S.lab;
    if (!lab) return;
    if (S.past) return; // viewing the past: back to live fetches a fresh snapshot
    const res = await api('GET', labPath());
    if (S.lab !== lab || S.past) return; // the lab was swapped meanwhile: this answer is about the old one
    if (res.ok) applySnapshot(res.data);
    else if (res.status === 404 && !S.lab.viewer) await labVanished();
  }, 500);

  // ---- the past: any moment rebuilt from the event stream -----------------------------------
  // The live model is put aside untouched and a fresh one is folded from the first event up to the
  // chosen one with the same applyModel/applyTimeline the live view uses, so the past can never be
  // drawn differently from how it looked live. Live events meanwhile are held, then applied in order.
  function holdLive(ev) {
    const p = S.past;
    const last = p.buffer.length ? p.buffer[p.buffer.length - 1].id : S.lastId;
    if (last && idCmp(ev.id, last) <= 0) return;
    p.buffer.push(ev);
    markDirty();
  }

  function initialSettings() {
    const out = {};
    for (const [name, spec] of S.schema) out[name] = spec.default;
    return { ...out, ...((S.meta.presets[preset] || {}).settings || {}), speed: (S.past.stash.clock || {}).speed };
  }

  function resetPastModel() {
    const speed = (S.past.stash.clock || {}).speed || 20;
    Object.assign(S, {
      settings: initialSettings(), clock: { t: 0, speed, paused: true, at: performance.now() }, counts: {},
      workers: new Map(), jobs: new Map(), breaker: { state: 'closed' }, faults: {}, faultUntil: {}, tl: new Map(),
      redeliveries: [], retries: [], deaths: new Map(), dlq: [], history: new Map(), found: new Map(), snapId: null,
    });
    S.past.at = -1;
  }

  /** Show the lab as it stood just after event i (an index into S.events). */
  function seek(i) {
    if (!S.past) {
      const stash = {};
      for (const k of MODEL_KEYS) stash[k] = S[k];
      S.past = { stash, buffer: [], at: -1 };
      root.dataset.view = 'past';
      if (els.controls) els.controls.inert = true; // controls act on the live lab: not from the past
      resetPastModel();
    } else if (i < S.past.at) {
      resetPastModel();
    }
    for (let k = S.past.at + 1; k <= i; k++) {
      const ev = S.events[k];
      applyTimeline(ev);
      applyModel(ev);
      if (ev.type === 'lab.branched' && ev.data && ev.data.settings) S.settings = { ...ev.data.settings };
    }
    S.past.at = i;
    const ev = S.events[i];
    S.clock = { ...S.clock, t: ev.t_sim, paused: true, at: performance.now() };
    root.dataset.viewEvent = ev.id;
    syncControls();
    S.logRebuild = true;
    markDirty();
  }

  function goLive() {
    if (!S.past) return;
    const { stash, buffer } = S.past;
    for (const k of MODEL_KEYS) S[k] = stash[k];
    S.past = null;
    root.dataset.view = 'live';
    delete root.dataset.viewEvent;
    if (els.controls) els.controls.inert = false;
    for (const ev of buffer) ingest(ev);
    syncControls();
    S.logRebuild = true;
    refresh();
    markDirty();
  }

  const pastAt = () => (S.past ? S.events[S.past.at] : null);

  // ---- model -----------------------------------------------------------------------------
  function simNow() {
    const c = S.clock;
    if (!c) return 0;
    if (c.paused) return c.t;
    return c.t + ((performance.now() - c.at) / 1000) * c.speed;
  }

  function applySnapshot(snap) {
    if (S.past) return; // a late answer must not overwrite the past being viewed
    const prevSettings = S.settings;
    S.snapId = snap.last_event_id || '0';
    if (snap.events_trimmed > 0) S.trimmed = true; // the server's stream lost its oldest events
    S.settings = { ...snap.settings };
    S.counts = { ...snap.counts };
    S.breaker = snap.breaker || { state: 'closed' };
    S.faults = snap.faults || {};
    for (const [k, v] of Object.entries(S.faults)) {
      if (k.endsWith('_until')) S.faultUntil[k.slice(0, -6)] = Number(v);
    }
    const c = snap.clock;
    const now = performance.now();
    const local = simNow();
    if (!S.clock || c.paused !== S.clock.paused || c.speed !== S.clock.speed
        || Math.abs(local - c.t) > Math.max(2, c.speed * 0.5)) {
      S.clock = { t: c.t, speed: c.speed, paused: c.paused, at: now };
    }
    // issue 18, honest clock: the lab says when real work holds its clock under the asked speed
    S.slowed = c.slowed ? { running: c.effective, reason: c.slowed_reason } : null;
    S.workers = new Map(snap.workers.map((w) => [w.id, { ...w }]));
    S.jobs = new Map(snap.jobs.map((j) => [j.id, { ...j }]));
    for (const j of snap.jobs) mergeTimelineJob(j);
    // events the snapshot did not include yet
    if (S.lastId && idCmp(S.lastId, S.snapId) > 0) {
      const from = firstAfter(S.snapId);
      for (let i = from; i < S.events.length; i++) applyModel(S.events[i]);
    }
    if (prevSettings !== S.settings) syncControls();
    markDirty();
    emit('lab:snapshot', snap);
  }

  function firstAfter(id) {
    let lo = 0, hi = S.events.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (idCmp(S.events[mid].id, id) > 0) hi = mid; else lo = mid + 1;
    }
    return lo;
  }

  function gauge(st, d) {
    if (!st) return;
    if (st === 'retrying') {
      S.counts.retrying = (S.counts.retrying || 0) + d;
      S.counts.queued = (S.counts.queued || 0) + d;
    } else if (GAUGES.has(st)) {
      S.counts[st] = (S.counts[st] || 0) + d;
    }
  }

  function setJobState(job, st) {
    if (!job || job.state === st) return;
    gauge(job.state, -1);
    gauge(st, 1);
    job.state = st;
  }

  function workerIdle(ev) {
    const w = S.workers.get(ev.worker_id);
    if (w && w.state === 'busy' && w.job_id === ev.job_id && (w.attempt == null || w.attempt === ev.attempt)) {
      Object.assign(w, { state: 'idle', job_id: null, attempt: null, progress: null });
    }
  }

  /** Apply one live event to the snapshot-derived model (jobs, workers, counts, clock). */
  function applyModel(ev) {
    const d = ev.data || {};
    const counter = S.meta.events[ev.type] && S.meta.events[ev.type].counter;
    if (counter && !GAUGES.has(counter)) S.counts[counter] = (S.counts[counter] || 0) + 1;
    const job = ev.job_id != null ? S.jobs.get(ev.job_id) : null;
    const t = ev.t_sim;
    if (S.clock && !S.clock.paused && typeof t === 'number' && t > simNow() + 1) {
      S.clock = { ...S.clock, t, at: performance.now() };
    }
    if (ev.type === 'clock.slowed') S.slowed = { running: ev.data.running, reason: ev.data.reason };
    if (ev.type === 'clock.caught_up') S.slowed = null;
    switch (ev.type) {
      case 'job.enqueued': {
        if (!S.jobs.has(ev.job_id)) {
          const j = { id: ev.job_id, state: null, attempt: 1, attempts: [], outputs: {}, created_at: t,
            payload: { video_id: d.video_id, job_type: d.job_type, duration_s: d.duration_s } };
          S.jobs.set(ev.job_id, j);
          setJobState(j, 'queued');
        }
        break;
      }
      case 'job.claimed': {
        if (job) {
          setJobState(job, 'running');
          Object.assign(job, { attempt: ev.attempt, worker: ev.worker_id, lease_deadline: d.lease_deadline ?? undefined });
          if (!job.attempts.some((a) => a.attempt === ev.attempt)) {
            job.attempts.push({ attempt: ev.attempt, worker: ev.worker_id, start: t, outcome: 'running' });
          }
        }
        const w = S.workers.get(ev.worker_id);
        if (w) Object.assign(w, { state: 'busy', job_id: ev.job_id, attempt: ev.attempt, progress: 0 });
        break;
      }
      case 'lease.extended': if (job) job.lease_deadline = d.deadline; break;
      case 'lease.expired': if (job) delete job.lease_deadline; break;
      case 'job.redelivered': case 'job.retry_started': case 'job.replayed':
        if (job) { setJobState(job, 'queued'); job.attempt = ev.attempt ?? job.attempt; delete job.due; }
        break;
      case 'job.progress': {
        const w = S.workers.get(ev.worker_id);
        if (w && w.job_id === ev.job_id) w.progress = d.percent;
        break;
      }
      case 'job.succeeded': case 'job.duplicate_completed':
        if (job) { setJobState(job, 'done'); delete job.lease_deadline; }
        workerIdle(ev);
        break;
      case 'job.failed':
        if (job) { job.last_error = d.error; delete job.lease_deadline; }
        workerIdle(ev);
        break;
      case 'job.duplicate_blocked': workerIdle(ev); break;
      case 'job.retry_scheduled': if (job) { setJobState(job, 'retrying'); job.due = d.due; } break;
      case 'job.dead_lettered':
        if (job) { setJobState(job, 'dlq'); job.dlq_reason = d.reason; delete job.lease_deadline; }
        break;
      case 'job.lost': if (job) setJobState(job, 'lost'); break;
      case 'worker.started':
        S.workers.set(ev.worker_id, { ...(S.workers.get(ev.worker_id) || {}), id: ev.worker_id, state: 'idle',
          pid: d.pid, job_id: null, attempt: null, progress: null, fleet: d.fleet || null });
        break;
      case 'worker.killed': case 'worker.died': {
        const w = S.workers.get(ev.worker_id);
        if (w) Object.assign(w, { state: 'dead', pid: null, job_id: null, attempt: null, progress: null });
        break;
      }
      case 'worker.respawning': { const w = S.workers.get(ev.worker_id); if (w) w.state = 'respawning'; break; }
      case 'worker.booting':
        S.workers.set(ev.worker_id, { id: ev.worker_id, state: 'booting', pid: null, job_id: null, bootLag: d.lag });
        break;
      case 'worker.draining': { const w = S.workers.get(ev.worker_id); if (w) w.state = 'draining'; break; }
      case 'worker.rewiring': {
        const w = S.workers.get(ev.worker_id);
        if (w) Object.assign(w, { state: 'rewiring', serves: d.fleet });
        break;
      }
      case 'worker.stopped': S.workers.delete(ev.worker_id); break;
      case 'settings.changed':
        if (d.changes) {
          if ('speed' in d.changes && S.clock) S.clock = { ...S.clock, t: simNow(), at: performance.now(), speed: d.changes.speed };
          S.settings = { ...S.settings, ...d.changes };
          syncControls();
        }
        break;
      case 'clock.paused': case 'clock.stepped':
        S.clock = { ...S.clock, t, paused: true, at: performance.now() };
        break;
      case 'clock.resumed':
        S.clock = { ...S.clock, t, paused: false, at: performance.now() };
        break;
      case 'fault.started':
        if (d.duration) S.faultUntil[d.fault] = t + d.duration;
        break;
      case 'fault.ended': delete S.faultUntil[d.fault]; break;
      case 'breaker.opened': S.breaker = { state: 'open', opened_at: t }; break;
      case 'breaker.half_open': S.breaker = { ...S.breaker, state: 'half_open' }; break;
      case 'breaker.closed': S.breaker = { state: 'closed' }; break;
      default: break;
    }
  }

  // ---- timeline model (from every event, history included) --------------------------------
  function tlJob(id) {
    let j = S.tl.get(id);
    if (!j) { j = { id, created: null, video: '', attempts: new Map(), types: new Set(), workers: new Set() }; S.tl.set(id, j); }
    return j;
  }

  function tlAttempt(j, n) {
    let a = j.attempts.get(n);
    if (!a) { a = { n, outcome: null }; j.attempts.set(n, a); }
    return a;
  }

  function applyTimeline(ev) {
    const d = ev.data || {};
    const t = ev.t_sim;
    if (ev.type === 'job.retry_started') {
      S.retries.push(t);
      if (S.retries.length > 5000) S.retries.splice(0, 1000);
    }
    if (ev.type === 'job.redelivered') {
      S.redeliveries.push(t);
      if (S.redeliveries.length > 5000) S.redeliveries.splice(0, 1000);
    }
    if (ev.type === 'worker.killed' || ev.type === 'worker.died') {
      S.deaths.set(ev.worker_id, t);
      const jobId = ev.job_id ?? d.job_id;
      if (jobId != null && S.tl.has(jobId)) {
        const j = S.tl.get(jobId);
        j.types.add(ev.type);
        const a = [...j.attempts.values()].filter((x) => x.worker === ev.worker_id && x.end == null && x.start != null)
          .sort((x, y) => y.n - x.n)[0];
        if (a) Object.assign(a, { end: t, killedAt: t, deadAt: t, outcome: 'killed' });
      }
      return;
    }
    if (ev.job_id == null) return;
    const j = tlJob(ev.job_id);
    j.types.add(ev.type);
    if (ev.worker_id) j.workers.add(ev.worker_id);
    const a = ev.attempt != null ? tlAttempt(j, ev.attempt) : null;
    switch (ev.type) {
      case 'job.enqueued':
        Object.assign(j, { created: t, video: videoLabel(d.video_id), type: d.job_type, duration: d.duration_s,
          poison: !!d.poison });
        if (a) a.queuedAt = t;
        break;
      case 'job.claimed':
        Object.assign(a, { worker: ev.worker_id, start: t, outcome: 'running', leaseStart: t,
          deadline: d.lease_deadline ?? null });
        // A poison pill's handler os._exit()s its work horse right after the claim, and the stream
        // has no event for that; draw the crash where it happens (the lease runs on regardless).
        if (j.poison) Object.assign(a, { end: t, deadAt: t, outcome: 'crashed' });
        break;
      case 'lease.extended': if (a) Object.assign(a, { deadline: d.deadline, leaseStart: t, extended: (a.extended || 0) + 1 }); break;
      case 'lease.expired': if (a) Object.assign(a, { expiredAt: t, expiredDeadline: d.deadline ?? a.deadline }); break;
      case 'job.redelivered': Object.assign(a, { queuedAt: t, how: 'redelivered: the lease ran out' }); break;
      case 'job.retry_started': Object.assign(a, { queuedAt: t, how: 'retry after a failure' }); break;
      case 'job.replayed': Object.assign(a, { queuedAt: t, how: 'replayed from the DLQ' }); break;
      case 'job.succeeded': Object.assign(a, { end: t, outcome: 'succeeded' }); break;
      case 'job.failed': Object.assign(a, { end: t, outcome: 'failed', error: d.error }); break;
      case 'job.duplicate_blocked': Object.assign(a, { end: t, outcome: 'refused' }); break;
      case 'job.duplicate_completed': Object.assign(a, { end: t, outcome: 'duplicate' }); break;
      case 'job.lost': if (a) Object.assign(a, { outcome: 'lost', end: a.end ?? t }); break;
      case 'job.progress': if (a) a.progress = d.percent; break;
      default: break;
    }
  }

  const OUTCOME_FROM_SNAPSHOT = (o) => (!o ? 'running' : o.startsWith('refused') ? 'refused'
    : o === 'succeeded' ? 'succeeded' : o === 'failed' ? 'failed' : o === 'running' ? 'running' : o);

  /** Fill the timeline from a snapshot job: attempts the capped stream no longer holds. */
  function mergeTimelineJob(sj) {
    const j = tlJob(sj.id);
    if (j.created == null) j.created = sj.created_at ?? null;
    if (!j.video && sj.payload) j.video = videoLabel(sj.payload.video_id);
    if (sj.poison === '1' || sj.poison === true) j.poison = true;
    for (const rec of sj.attempts || []) {
      const a = tlAttempt(j, rec.attempt);
      if (a.start == null && rec.start != null) a.start = rec.start;
      if (!a.worker && rec.worker) a.worker = rec.worker;
      if (rec.worker) j.workers.add(rec.worker);
      if (a.end == null && rec.end != null) a.end = rec.end;
      if (!a.outcome || (a.outcome === 'running' && rec.outcome && rec.outcome !== 'running')) {
        a.outcome = OUTCOME_FROM_SNAPSHOT(rec.outcome);
      }
      if (j.poison && a.outcome === 'running' && a.start != null) Object.assign(a, { end: a.start, deadAt: a.start, outcome: 'crashed' });
    }
    const cur = j.attempts.get(sj.attempt);
    if (cur && sj.lease_deadline != null && cur.end == null && cur.expiredAt == null) cur.deadline = sj.lease_deadline;
  }

  // ---- UI construction ---------------------------------------------------------------------
  function buildUi() {
    els.conn = root.querySelector('[data-testid="conn-status"]');
    els.clock = q('clock');
    els.clockSub = q('clock-sub');
    els.clockP = root.querySelector('[data-testid="readout-clock"]');
    els.player = q('player');
    els.detail = q('detail');
    buildReadouts();
    buildScenarios();
    buildControls();
    buildLogFilters();
    if (S.controls.has('retry_policy')) buildRetryHistogram();
    timeline = new Timeline({ axis: q('tl-axis'), rows: q('tl-rows'), empty: q('tl-empty') },
      { onOpenJob: (id) => openJob(id, true) });
    scrubber = new Scrubber({ box: q('history'), banner: q('past-banner') }, {
      idBase: root.id, events: () => S.events, describe: (ev) => narrate(ev, S.meta, labelOf),
      trimmed: () => !!S.trimmed,
      onSeek: seek, onLive: goLive, canBranch: !compact, onBranchForm: branchForm,
    });
    const find = q('job-find');
    find.addEventListener('input', () => { markDirty(); findOlderSoon(); });
    if (S.controls.has('clock') && !S.lab.viewer) {
      const pref = h('input', { type: 'checkbox', testid: 'pause-while-inspecting' });
      pref.checked = localStorage.getItem(PAUSE_PREF) === '1';
      pref.addEventListener('change', () => localStorage.setItem(PAUSE_PREF, pref.checked ? '1' : '0'));
      find.closest('label').after(h('label', { class: 'lw-find' }, pref, ' pause while inspecting'));
    }
    buildHelp();
    if (S.controls.has('kill') && !S.lab.viewer) setText(q('workers-hint'), 'click a busy worker to kill it');
    if (S.lab.viewer && !compact) {
      root.classList.add('lw-viewer');
      banner(null);
      const b = q('banner');
      b.textContent = 'Read-only: you are watching the instructor’s lab. Every screen shows the same pipeline.';
      b.hidden = false;
      b.removeAttribute('role');
    }
    els.controls = q('controls');
    if (compact) root.classList.add('lw-compact');
    else document.addEventListener('keydown', onKey);
    reduceMotion.addEventListener?.('change', () => markDirty());
  }

  // Keyboard shortcuts. Never while typing: inputs, selects and editable text keep their keys; space
  // also leaves buttons, links and the log alone (there it clicks or scrolls).
  const SHORTCUTS = [
    ['Space', 'pause or resume the clock', 'clock'], ['S', 'step a paused clock', 'clock'],
    ['K', 'kill a busy worker', 'kill'], ['U', 'enqueue the chosen sample clip', null],
    ['R', 'reset the lab', null], ['?', 'show or hide this help', null], ['Esc', 'close this help or the open job', null],
  ];
  function buildHelp() {
    els.help = h('div', { class: 'lw-help', testid: 'shortcut-help', role: 'dialog', 'aria-label': 'Keyboard shortcuts', hidden: true },
      h('h3', {}, 'Keyboard shortcuts'),
      h('dl', {}, SHORTCUTS.filter(([, , c]) => !c || S.controls.has(c)).map(([k, what]) => [h('dt', {}, h('kbd', {}, k)), h('dd', {}, what)])),
      h('button', { type: 'button', class: 'lw-btn lw-small', onclick: () => toggleHelp(false) }, 'Close'));
    root.append(els.help);
  }
  function toggleHelp(show) {
    els.help.hidden = !show;
    if (show) els.help.querySelector('button').focus();
  }

  // a checkbox or slider takes no letters, so shortcuts still work there; a text box or select does
  const typing = (t) => Boolean(t.closest('textarea, select, [contenteditable]')
    || (t.matches('input') && !['checkbox', 'radio', 'range', 'button', 'submit', 'file'].includes(t.type)));

  function onKey(e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (!t.closest || typing(t)) return;
    const k = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    if (k === '?') { e.preventDefault(); toggleHelp(els.help.hidden); return; }
    if (k === 'Escape') {
      if (!els.help.hidden) toggleHelp(false);
      else if (S.inspect) closeInspect();
      else if (S.selectedJob) openJob(S.selectedJob);
      return;
    }
    if (k === 'Escape' && S.past && !S.inspect && !S.selectedJob) { scrubber.goLive(); return; }
    if (S.past) {
      if (k === ' ' && !t.closest('button, a, video, summary, details, [data-role="log"]')) {
        e.preventDefault();
        scrubber.togglePlay();
      }
      return; // kill, upload, step and reset act on the live lab: not from a past moment
    }
    if (S.lab.viewer) return;
    const clock = S.controls.has('clock');
    if (k === ' ' && clock && !t.closest('button, a, video, summary, details, [data-role="log"]')) {
      e.preventDefault();
      togglePause();
    } else if (k === 's' && clock && S.clock && S.clock.paused) {
      clockAction({ action: 'step', seconds: Number(root.querySelector('#lw-step').value) });
    } else if (k === 'k' && S.controls.has('kill')) {
      const busy = [...S.workers.values()].find((w) => w.state === 'busy');
      if (busy) killWorker(busy.id);
    } else if (k === 'u') {
      const sample = root.querySelector('#lw-sample');
      if (sample) enqueueSample(sample.value);
    } else if (k === 'r' && els.reset) {
      resetLab();
    }
  }

  function section(title, ...kids) {
    return h('section', { class: 'lw-ctl-section' }, h('h3', {}, title), ...kids);
  }

  function status(testid) {
    return h('p', { class: 'lw-status', testid, 'aria-live': 'polite' });
  }

  function buildReadouts() {
    const box = q('readouts');
    const tiles = [
      ['queued', 'Queue depth', 'waiting to be claimed'],
      ['active', 'Active workers', 'busy / alive'],
      ['done', 'Completed', 'jobs done'],
      ['redelivered', 'Redelivered', ''],
      ['duplicates', 'Duplicates blocked', 'stale attempts refused'],
      ['lost', 'Lost', 'acked early, then crashed'],
      ['dlq', 'DLQ depth', 'dead letters'],
    ];
    const c = S.controls;
    if (c.has('idempotent_outputs') || c.has('notify_guard')) {
      tiles.push(['outputs', 'Outputs written', 'files'], ['emails', 'Emails sent', 'completion emails'],
        ['dupdone', 'Completed twice', 'guard off']);
    }
    if (c.has('retry_policy') || c.has('faults')) tiles.push(['failed', 'Failed attempts', 'retries scheduled: 0']);
    els.readouts = {};
    const extra = h('div', { class: 'lw-readouts-extra' });
    tiles.forEach(([id, label, sub], i) => {
      const value = h('span', { class: 'lw-ro-value' }, '0');
      const subEl = h('span', { class: 'lw-ro-sub' }, sub);
      const tile = h('div', { class: `lw-ro lw-ro-${id}`, testid: `readout-${id}`, 'data-value': '0' },
        h('span', { class: 'lw-ro-label' }, label), value, subEl);
      els.readouts[id] = { tile, value, sub: subEl, last: null };
      if (id === 'redelivered') {
        const rate = h('span', { class: 'lw-ro-rate', testid: 'readout-redelivery-rate', 'data-value': '0' });
        const spark = h('span', { class: 'lw-spark', 'aria-hidden': 'true' },
          Array.from({ length: 10 }, () => h('span', { class: 'lw-spark-bar' })));
        tile.append(rate, spark);
        els.rate = rate;
        els.spark = [...spark.children];
        subEl.remove();
      }
      (i < 7 ? box : extra).append(tile);
    });
    if (extra.children.length) box.after(extra);
  }

  function buildScenarios() {
    const list = S.lab.viewer ? [] : S.meta.scenario_buttons[preset] || []; // app/scenarios.py BUTTONS
    const box = q('scenarios');
    if (!list.length) return;
    box.hidden = false;
    const hint = h('p', { class: 'lw-hint', testid: 'scenario-hint', 'aria-live': 'polite' },
      'Pick a scenario, predict what will happen, then watch.');
    box.append(h('span', { class: 'lw-scn-label' }, 'Scenarios'),
      ...list.map((s) => h('button', { type: 'button', class: 'lw-btn lw-scn', testid: `scenario-${s.id}`,
        onclick: (e) => runScenario(s, e.currentTarget, hint) }, s.label)), hint);
  }

  async function runScenario(s, btn, hint) {
    btn.disabled = true;
    setText(hint, s.hint);
    try {
      if (s.settings) {
        const res = await api('PATCH', labPath('/settings'), s.settings);
        if (!res.ok) { setText(hint, `Could not apply: ${errorText(res.data, res.status)}`); return; }
        S.settings = res.data.settings;
        syncControls();
      }
      if (s.fault) {
        const res = await api('POST', labPath('/faults'), s.fault);
        if (!res.ok) { setText(hint, `Could not start the fault: ${errorText(res.data, res.status)}`); return; }
      }
      for (let i = 0; s.enqueue && i < (s.count || 1); i++) {
        const res = await api('POST', labPath('/jobs'), s.enqueue);
        if (!res.ok) { setText(hint, `Could not enqueue: ${errorText(res.data, res.status)}`); return; }
      }
      if (s.kills) await rapidKills(s.kills, hint);
    } finally {
      btn.disabled = false;
    }
  }

  async function rapidKills(n, hint) {
    const busy = [...S.workers.values()].filter((w) => w.state === 'busy').map((w) => w.id);
    if (!busy.length) { setText(hint, 'No worker is busy: send some jobs first (try “Steady load”).'); return; }
    const done = [];
    for (const id of busy.slice(0, n)) {
      const res = await api('POST', labPath(`/workers/${id}/kill`), {});
      if (res.ok) done.push(`${id}${res.data.job_id ? ` (job ${res.data.job_id})` : ''}`);
    }
    setText(hint, `SIGKILLed ${done.join(', ') || 'nobody'}. Now watch the redelivery rate.`);
  }

  function buildControls() {
    const box = q('controls');
    if (S.lab.viewer) {
      box.append(section('Controls', h('p', { class: 'lw-doc' },
        'This is a read-only view. The instructor drives the lab; you watch it live.')));
      return;
    }
    const c = S.controls;
    if (c.has('upload')) box.append(buildUpload());
    if (c.has('kill') || c.has('faults')) box.append(buildBreak());
    const settingNames = [...c].filter((n) => S.schema.has(n) && n !== 'speed'); // speed lives in Clock
    if (settingNames.length) {
      els.fields = {};
      box.append(section('Settings', ...settingNames.map((n) => buildSetting(S.schema.get(n)))));
    }
    if (c.has('clock') || c.has('speed')) box.append(buildClock(c.has('clock')));
    box.append(buildLabSection());
    if (c.has('dlq')) buildDlqActions();
  }

  function buildUpload() {
    const file = h('input', { type: 'file', id: 'lw-file', class: 'lw-file', testid: 'upload-file',
      accept: 'video/mp4,video/webm,video/x-msvideo,video/*', 'aria-describedby': 'lw-file-doc' });
    const drop = h('div', { class: 'lw-drop', testid: 'drop-zone' },
      h('label', { for: 'lw-file' }, h('strong', {}, 'Upload a video'), ': drop it here or ',
        h('span', { class: 'lw-linkish' }, 'choose a file')),
      file,
      h('small', { id: 'lw-file-doc', class: 'lw-doc' }, 'MP4, WebM or AVI. The server checks the bytes, not the name.'));
    file.addEventListener('change', () => { if (file.files[0]) upload(file.files[0]).finally(() => { file.value = ''; }); });
    for (const type of ['dragenter', 'dragover']) {
      drop.addEventListener(type, (e) => { e.preventDefault(); drop.classList.add('lw-drag'); });
    }
    for (const type of ['dragleave', 'drop']) drop.addEventListener(type, () => drop.classList.remove('lw-drag'));
    drop.addEventListener('drop', (e) => {
      e.preventDefault();
      const f = e.dataTransfer && e.dataTransfer.files[0];
      if (f) upload(f);
    });
    const sample = h('select', { id: 'lw-sample', testid: 'sample-select' },
      SAMPLES.map(([v, label]) => h('option', { value: v }, label)));
    const send = h('button', { type: 'button', class: 'lw-btn lw-primary', testid: 'sample-submit',
      onclick: () => enqueueSample(sample.value) }, 'Enqueue it');
    els.uploadStatus = status('upload-status');
    els.uploadError = h('p', { class: 'field-error', testid: 'upload-error', role: 'alert' });
    const kids = [drop,
      h('label', { for: 'lw-sample', class: 'lw-block-label' }, 'or use a sample clip'),
      h('div', { class: 'lw-row lw-sample-row' }, sample, send),
      els.uploadStatus, els.uploadError];
    // Chapter 0: the same clip through an inline handler (the request waits for ffmpeg) and
    // through the queue (202 at once), both timed for real.
    if (S.controls.has('inline') || preset === 'ch0') kids.push(buildInline(sample));
    return section('Send work', ...kids);
  }

  function buildInline(sample) {
    const rows = {};
    const row = (id, label) => {
      const bar = h('span', { class: 'lw-cmp-fill' });
      const val = h('span', { class: 'lw-cmp-val', testid: `compare-${id}` }, '–');
      rows[id] = { bar, val, ms: null };
      return h('div', { class: 'lw-cmp-row' }, h('span', { class: 'lw-cmp-label' }, label),
        h('span', { class: 'lw-cmp-bar' }, bar), val);
    };
    const note = status('compare-status');
    const show = () => {
      const max = Math.max(1, ...Object.values(rows).map((r) => r.ms || 0));
      for (const r of Object.values(rows)) r.bar.style.width = r.ms == null ? '0' : `${Math.max(1, (r.ms / max) * 100)}%`;
    };
    const inlineBtn = h('button', { type: 'button', class: 'lw-btn', testid: 'inline-submit' }, 'Inline handler');
    const queueBtn = h('button', { type: 'button', class: 'lw-btn', testid: 'enqueue-submit' }, 'Enqueue handler');
    inlineBtn.addEventListener('click', async () => {
      inlineBtn.disabled = true;
      setText(rows.inline.val, 'waiting… the request is held while ffmpeg runs');
      const t0 = performance.now();
      const res = await api('POST', labPath('/inline'), { sample: sample.value });
      const ms = Math.round(performance.now() - t0);
      inlineBtn.disabled = false;
      if (res.ok) {
        rows.inline.ms = ms;
        setText(rows.inline.val, `${ms.toLocaleString('en')} ms until the response`);
        setText(note, `Inline: the browser waited ${fmtNum(ms / 1000)} s of real time for a 200. Every one of those seconds held a web thread.`);
      } else {
        setText(rows.inline.val, '–');
        setText(note, `${res.status}: ${errorText(res.data, res.status)}`);
      }
      show();
    });
    queueBtn.addEventListener('click', async () => {
      queueBtn.disabled = true;
      const t0 = performance.now();
      const res = await api('POST', labPath('/jobs'), { sample: sample.value });
      const ms = Math.round(performance.now() - t0);
      queueBtn.disabled = false;
      if (res.status === 202) {
        rows.queue.ms = ms;
        setText(rows.queue.val, `${ms.toLocaleString('en')} ms until the 202 (job ${res.data.job_id})`);
        setText(note, `Enqueue: 202 Accepted after ${ms} ms${res.data.enqueue_ms != null ? ` (${fmtNum(res.data.enqueue_ms)} ms of it on the server)` : ''}; job ${res.data.job_id} carries on in a worker.`);
      } else {
        setText(note, `${res.status}: ${errorText(res.data, res.status)}`);
      }
      show();
    });
    return h('div', { class: 'lw-compare', role: 'group', 'aria-labelledby': 'lw-cmp-h' },
      h('h4', { id: 'lw-cmp-h' }, 'Inline vs enqueue, timed for real'),
      h('p', { class: 'lw-doc' }, 'Predict both response times first. Uses the sample clip chosen above.'),
      h('div', { class: 'lw-row lw-wrap' }, inlineBtn, queueBtn),
      row('inline', 'inline'), row('queue', 'enqueue'), note);
  }

  async function upload(f) {
    const fd = new FormData();
    fd.append('file', f, f.name);
    await sendJob(fd, `“${f.name}” (${(f.size / 1e6).toFixed(1)} MB)`);
  }

  function enqueueSample(name) {
    return sendJob({ sample: name }, `sample “${name}”`);
  }

  async function sendJob(body, what) {
    setText(els.uploadError, '');
    setText(els.uploadStatus, `sending ${what}…`);
    const t0 = performance.now();
    const res = await api('POST', labPath('/jobs'), body);
    const ms = Math.round(performance.now() - t0);
    if (res.status === 202) {
      const dur = res.data.payload && res.data.payload.duration_s;
      const speed = S.clock ? S.clock.speed : 1;
      setText(els.uploadStatus, `202 Accepted in ${ms} ms → job ${res.data.job_id}. The work itself takes`
        + ` ${fmtDur(dur)} simulated (${fmtNum(dur / speed)} s real at ${fmtNum(speed)}×).`);
    } else {
      setText(els.uploadStatus, '');
      setText(els.uploadError, `${res.status || 'network'}: ${errorText(res.data, res.status)}`);
    }
  }

  function buildBreak() {
    const kids = [];
    if (S.controls.has('kill')) {
      els.killStatus = status('kill-status');
      kids.push(h('div', { class: 'lw-row' },
        h('button', { type: 'button', class: 'lw-btn lw-danger', testid: 'kill-random',
          onclick: () => killWorker('random') }, 'Kill a random busy worker'),
        h('small', { class: 'lw-doc' }, 'or click a busy worker card')), els.killStatus);
    }
    if (S.controls.has('faults')) {
      const dur = h('input', { type: 'number', id: 'lw-fault-dur', min: '1', max: '7200', value: '120',
        inputmode: 'numeric', testid: 'fault-duration', class: 'lw-num' });
      els.faultStatus = status('fault-status');
      kids.push(h('div', { class: 'lw-row' }, h('label', { for: 'lw-fault-dur' }, 'Fault lasts'), dur, 's'),
        h('div', { class: 'lw-row lw-wrap' }, S.meta.faults.map((f) => h('button', {
          type: 'button', class: 'lw-btn', testid: `fault-${f}`, title: (FAULT_TEXT[f] || [f, ''])[1],
          onclick: () => startFault(f, Number(dur.value)) }, (FAULT_TEXT[f] || [f])[0]))),
        els.faultStatus);
    }
    return section('Break it', ...kids);
  }

  async function killWorker(id) {
    const res = await api('POST', labPath(`/workers/${encodeURIComponent(id)}/kill`), {});
    const out = els.killStatus;
    if (res.ok) {
      const d = res.data;
      setText(out, `SIGKILL → ${d.worker} (pid ${d.pid}).${d.job_id ? ` Job ${d.job_id} is orphaned: only its lease can bring it back.` : ''}`);
    } else if (out) {
      setText(out, errorText(res.data, res.status));
    }
  }

  async function expireLease(jobId) {
    if (S.past) return; // the past is for looking: faults act on the live lab
    const res = await api('POST', labPath(`/jobs/${encodeURIComponent(jobId)}/lease/expire`), {});
    setText(q('lease-status'), res.ok
      ? `Lease on job ${jobId} cut short at t=${fmtT(Number(res.data.job.lease_deadline ?? simNow()))} s. `
        + 'Its worker does not know and keeps going; watch the message come back.'
      : errorText(res.data, res.status));
  }

  async function startFault(type, duration) {
    const body = { type };
    if (type !== 'poison') body.duration_s = duration;
    const res = await api('POST', labPath('/faults'), body);
    setText(els.faultStatus, res.ok
      ? (type === 'poison' ? `poison pill enqueued as job ${res.data.job_id}` : `${FAULT_TEXT[type][0]} until t=${fmtT(res.data.until)} s`)
      : errorText(res.data, res.status));
  }

  // Settings controls, built from the schema (label, doc, kind, min/max, choices, unit).
  function buildSetting(s) {
    const id = `lw-set-${s.name}`;
    const docId = `${id}-doc`, errId = `${id}-err`;
    const described = `${docId} ${errId}`;
    const err = h('p', { class: 'field-error', id: errId, testid: `error-${s.name}`, 'aria-live': 'polite' });
    const doc = h('p', { class: 'lw-doc', id: docId },
      s.doc.split('`').map((part, i) => (i % 2 ? h('code', {}, part) : part)));
    const f = { s, err, inputs: [] };
    els.fields[s.name] = f;
    let body;
    if (s.kind === 'bool') {
      const box = h('input', { type: 'checkbox', role: 'switch', id, testid: `setting-${s.name}`,
        'aria-describedby': described });
      const state = h('span', { class: 'lw-switch-state', 'aria-hidden': 'true' });
      box.addEventListener('change', () => patchSetting(s.name, box.checked));
      f.inputs = [box];
      f.set = (v) => { box.checked = !!v; setText(state, v ? 'on' : 'off'); };
      body = h('div', { class: 'lw-row' }, box, h('label', { for: id, class: 'lw-switch-label' }, s.label), state);
    } else if (s.kind === 'choice' && s.choices.length <= 3) {
      const radios = s.choices.map((c) => {
        const r = h('input', { type: 'radio', name: id, value: c, id: `${id}-${c}`, testid: `setting-${s.name}-${c}` });
        r.addEventListener('change', () => { if (r.checked) patchSetting(s.name, c); });
        return r;
      });
      f.inputs = radios;
      f.set = (v) => radios.forEach((r) => { r.checked = r.value === v; });
      return h('fieldset', { class: 'lw-field', 'data-setting': s.name, 'aria-describedby': described },
        h('legend', {}, s.label),
        h('div', { class: 'lw-row lw-wrap' }, radios.map((r) => h('label', { class: 'lw-radio', for: r.id }, r, r.value))),
        err, doc);
    } else if (s.kind === 'choice') {
      const sel = h('select', { id, testid: `setting-${s.name}`, 'aria-describedby': described },
        s.choices.map((c) => h('option', { value: c }, c.replace(/_/g, ' '))));
      sel.addEventListener('change', () => patchSetting(s.name, sel.value));
      f.inputs = [sel];
      f.set = (v) => { sel.value = v; };
      body = h('div', { class: 'lw-row' }, h('label', { for: id }, s.label), sel);
    } else {
      body = buildNumber(s, id, described, f);
    }
    const extra = s.name === 'vt_seconds' ? (els.vtHint = h('p', { class: 'lw-vt-hint', testid: 'vt-hint' })) : null;
    return h('div', { class: 'lw-field', 'data-setting': s.name }, body, err, extra, doc);
  }

  function buildNumber(s, id, described, f) {
    const linear = s.kind === 'int' && s.max - s.min <= 40;
    const stops = linear ? null : niceStops(s.min, s.max);
    const unit = s.unit ? ` ${s.unit}` : '';
    const range = h('input', { type: 'range', id, testid: `setting-${s.name}`, 'aria-describedby': described,
      min: linear ? s.min : 0, max: linear ? s.max : stops.length - 1, step: 1 });
    const num = h('input', { type: 'number', class: 'lw-num', testid: `setting-${s.name}-number`,
      'aria-label': `${s.label}${s.unit ? ` (${s.unit})` : ''}, exact value`, 'aria-describedby': described,
      step: s.kind === 'int' ? 1 : 'any', inputmode: 'decimal' });
    const fromRange = () => (linear ? Number(range.value) : stops[Number(range.value)]);
    const show = (v) => {
      range.setAttribute('aria-valuetext', `${fmtNum(v)}${unit}`);
      if (document.activeElement !== num) num.value = String(v);
    };
    range.addEventListener('input', () => { const v = fromRange(); show(v); updateVtHint(s.name === 'vt_seconds' ? v : undefined); });
    range.addEventListener('change', () => patchSetting(s.name, fromRange()));
    num.addEventListener('change', () => {
      const raw = num.value.trim();
      patchSetting(s.name, raw === '' ? raw : Number(raw));
    });
    f.inputs = [range, num];
    f.set = (v) => {
      range.value = String(linear ? v : nearestIndex(stops, v));
      range.setAttribute('aria-valuetext', `${fmtNum(v)}${unit}`);
      num.value = String(v);
    };
    return h('div', { class: 'lw-num-field' },
      h('label', { for: id }, s.label, s.unit ? h('small', {}, ` (${s.unit === '×' ? 'times' : s.unit})`) : null),
      h('div', { class: 'lw-row' }, range, num, s.unit ? h('span', { class: 'lw-unit', 'aria-hidden': 'true' }, s.unit) : null));
  }

  async function patchSetting(name, value) {
    const f = els.fields && els.fields[name];
    if (f) { setText(f.err, ''); f.inputs.forEach((i) => i.removeAttribute('aria-invalid')); }
    const res = await api('PATCH', labPath('/settings'), { [name]: value });
    if (res.ok) {
      S.settings = res.data.settings;
      syncControls(name);
      markDirty();
      return;
    }
    const msg = res.data && res.data.detail && typeof res.data.detail === 'object' && res.data.detail[name]
      ? res.data.detail[name] : errorText(res.data, res.status);
    if (f) {
      setText(f.err, `${f.s.label} ${msg}`);
      f.inputs.forEach((i) => i.setAttribute('aria-invalid', 'true'));
      // put the slider/switch back to the lab's real value; leave typed text for fixing
      const keep = f.inputs.find((i) => i.type === 'number');
      const typed = keep && keep.value;
      f.set(S.settings[name]);
      if (keep) keep.value = typed;
    }
  }

  /** Reflect the lab's settings in the controls, except the one the learner is touching. */
  function syncControls(justSet) {
    for (const [name, f] of Object.entries(els.fields || {})) {
      if (!(name in S.settings)) continue;
      const touching = f.inputs.some((i) => i === document.activeElement) && name !== justSet;
      if (touching || f.inputs.some((i) => i.getAttribute('aria-invalid'))) continue;
      f.set(S.settings[name]);
    }
    syncSpeed();
    updateVtHint();
  }

  function updateVtHint(vtDragging) {
    if (!els.vtHint) return;
    const vt = vtDragging ?? S.settings.vt_seconds;
    const dur = S.settings.job_duration;
    const hb = S.settings.heartbeat;
    let text;
    if (S.settings.ack_mode === 'early') text = `Ack early: the message is deleted on claim, so there is no lease at all.`;
    else if (hb) text = `Lease ${fmtNum(vt)} s, renewed every ${fmtNum(S.settings.heartbeat_interval)} s to +${fmtNum(S.settings.heartbeat_extend)} s while the worker lives: a ${fmtNum(dur)} s job keeps it.`;
    else if (vt < dur) text = `Lease ${fmtNum(vt)} s < job ${fmtNum(dur)} s: the lease runs out mid-job and the job is redelivered while still running.`;
    else text = `Lease ${fmtNum(vt)} s ≥ job ${fmtNum(dur)} s: it covers the job; a crash is noticed ${fmtNum(vt)} s after the claim.`;
    setText(els.vtHint, text);
    setAttr(els.vtHint, 'data-ok', (!hb && vt < dur && S.settings.ack_mode !== 'early') ? 'no' : 'yes');
  }

  function buildClock(full) {
    const kids = [];
    if (full) {
      els.pause = h('button', { type: 'button', class: 'lw-btn', testid: 'clock-pause', 'aria-pressed': 'false',
        onclick: togglePause }, 'Pause');
      const stepSel = h('select', { id: 'lw-step', testid: 'clock-step-size', 'aria-label': 'Step size' },
        STEP_CHOICES.map((v) => h('option', { value: v }, `${v} s`)));
      stepSel.value = '30';
      els.step = h('button', { type: 'button', class: 'lw-btn', testid: 'clock-step',
        onclick: () => clockAction({ action: 'step', seconds: Number(stepSel.value) }) }, 'Step');
      kids.push(h('div', { class: 'lw-row lw-wrap' }, els.pause, els.step, stepSel),
        h('p', { class: 'lw-doc' }, 'Space pauses and resumes, S steps a paused clock; press ? for every shortcut.'));
    }
    const range = h('input', { type: 'range', id: 'lw-speed', testid: 'speed-slider', min: 0,
      max: SPEED_STOPS.length - 1, step: 1 });
    const out = h('output', { for: 'lw-speed', class: 'lw-speed-out', testid: 'speed-value' });
    range.addEventListener('input', () => {
      const v = SPEED_STOPS[Number(range.value)];
      range.setAttribute('aria-valuetext', `${v} times`);
      setText(out, `${v}×`);
    });
    range.addEventListener('change', () => clockAction({ speed: SPEED_STOPS[Number(range.value)] }));
    els.speed = { range, out };
    els.clockStatus = status('clock-status');
    kids.push(h('label', { for: 'lw-speed', class: 'lw-block-label' }, 'Clock speed ', h('small', {}, '(simulated s per real s, log scale)')),
      h('div', { class: 'lw-row' }, range, out), els.clockStatus);
    return section('Clock', ...kids);
  }

  function syncSpeed() {
    if (!els.speed || !S.clock) return;
    const { range, out } = els.speed;
    const sp = S.settings.speed ?? S.clock.speed;
    if (document.activeElement !== range) {
      range.value = String(nearestIndex(SPEED_STOPS, sp));
      range.setAttribute('aria-valuetext', `${fmtNum(sp)} times`);
      setText(out, `${fmtNum(sp)}×`);
    }
  }

  function togglePause() {
    return clockAction({ action: S.clock && S.clock.paused ? 'resume' : 'pause' });
  }

  async function clockAction(body) {
    const res = await api('POST', labPath('/clock'), body);
    if (res.ok) {
      const c = res.data.clock;
      S.clock = { t: c.t, speed: c.speed, paused: c.paused, at: performance.now() };
      if (body.speed) S.settings = { ...S.settings, speed: c.speed };
      if (els.clockStatus) setText(els.clockStatus, '');
      syncSpeed();
      markDirty();
    } else {
      setText(els.clockStatus, errorText(res.data, res.status));
    }
  }

  function buildLabSection() {
    els.reset = h('button', { type: 'button', class: 'lw-btn', testid: 'reset-lab', onclick: resetLab }, 'Reset lab');
    els.resetStatus = status('reset-status');
    els.share = h('input', { type: 'text', readonly: true, class: 'lw-share', testid: 'share-url',
      'aria-label': 'Read-only link to this lab', onfocus: (e) => e.target.select() });
    const shareBox = h('details', { class: 'lw-share-box' },
      h('summary', {}, 'Show this lab on other screens'),
      h('p', { class: 'lw-doc' }, 'Anyone with this link watches this same lab live, read-only (for a class on a projector).'),
      els.share);
    updateShare();
    return section('Lab', h('div', { class: 'lw-row lw-wrap' }, els.reset,
      h('small', { class: 'lw-doc' }, 'Deletes this lab (workers, files, history) and starts a fresh one.')),
    els.resetStatus, shareBox);
  }

  // ---- try again from here: branch the run at the moment being viewed ------------------------
  function branchForm(ev) {
    const names = [...S.controls].filter((n) => S.schema.has(n) && n !== 'speed');
    const base = `${root.id}-br`;
    const fields = names.map((n) => {
      const spec = S.schema.get(n), v = S.settings[n], id = `${base}-${n}`;
      let input;
      if (spec.kind === 'bool') input = h('input', { type: 'checkbox', id, testid: `branch-${n}`, checked: !!v });
      else if (spec.kind === 'choice') {
        input = h('select', { id, testid: `branch-${n}` }, spec.choices.map((c) => h('option', { value: c }, c.replace(/_/g, ' '))));
        input.value = v;
      } else {
        input = h('input', { type: 'number', id, testid: `branch-${n}`, class: 'lw-num', min: spec.min, max: spec.max,
          step: spec.kind === 'int' ? 1 : 'any', value: String(v), inputmode: 'decimal' });
      }
      const read = () => (spec.kind === 'bool' ? input.checked : spec.kind === 'choice' ? input.value
        : input.value.trim() === '' ? '' : Number(input.value));
      return { n, spec, v, input, read,
        el: h('label', { class: 'lw-branch-field', for: id }, h('span', {}, `${spec.label}${spec.unit ? ` (${spec.unit})` : ''}`), input) };
    });
    const out = h('p', { class: 'lw-status', testid: 'branch-status', 'aria-live': 'polite' });
    const err = h('p', { class: 'field-error', testid: 'branch-error', role: 'alert' });
    const go = h('button', { type: 'submit', class: 'lw-btn lw-primary', testid: 'branch-submit' }, 'Try again from here');
    const form = h('form', { class: 'lw-branch-form', 'aria-labelledby': `${base}-h` },
      h('h4', { id: `${base}-h` }, `Try again from t=${fmtT(ev.t_sim)} s with different settings`),
      h('p', { class: 'lw-doc' }, 'A new lab starts from this moment: the jobs not yet done then are sent again, '
        + 'under these settings. Both runs then play side by side.'),
      h('div', { class: 'lw-branch-fields' }, fields.map((f) => f.el)), h('div', { class: 'lw-row' }, go), err, out);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const changes = {};
      for (const f of fields) { const v = f.read(); if (v !== f.v) changes[f.n] = v; }
      setText(err, '');
      go.disabled = true;
      setText(out, 'starting the branch…');
      const res = await api('POST', '/api/labs', { branch_of: S.lab.id, at_event: ev.id, settings: changes });
      go.disabled = false;
      if (res.status !== 201) {
        setText(out, '');
        setText(err, errorText(res.data, res.status));
        return;
      }
      const b = res.data;
      // the branch is this tab's lab too: keep its token (the compare page itself only needs view tokens)
      try { sessionStorage.setItem(`awl:owned:${b.lab_id}`, JSON.stringify({ id: b.lab_id, token: b.token, view: b.view_token })); } catch { /* private mode */ }
      const u = new URL('/compare', location.origin);
      u.searchParams.set('a', S.lab.id);
      u.searchParams.set('av', S.lab.view || S.lab.token);
      u.searchParams.set('b', b.lab_id);
      u.searchParams.set('bv', b.view_token);
      u.searchParams.set('back', location.pathname);
      const what = Object.entries(changes).map(([n, v]) => `${labelOf(n)} ${fmtSetting(v)}`).join(', ') || 'the same settings';
      setText(out, `Branch ${b.lab_id} started with ${what}: ${b.branch.seeded.length} unfinished job${b.branch.seeded.length === 1 ? '' : 's'} sent again. Opening both runs side by side…`);
      location.assign(u.href);
    });
    return form;
  }

  function updateShare() {
    if (!els.share || !S.lab || !S.lab.view) return;
    const u = new URL(location.pathname, location.origin);
    u.searchParams.set('lab', S.lab.id);
    u.searchParams.set('view', S.lab.view);
    els.share.value = u.href;
  }

  function buildDlqActions() {
    if (S.lab.viewer) return;
    const sel = h('select', { id: 'lw-dlq-reason', testid: 'dlq-reason' }, h('option', { value: '' }, 'every reason'));
    const btn = h('button', { type: 'button', class: 'lw-btn', testid: 'dlq-replay',
      onclick: async () => {
        btn.disabled = true;
        const res = await api('POST', labPath('/dlq/replay'), sel.value ? { reason: sel.value } : {});
        btn.disabled = false;
        setText(els.dlqStatus, res.ok
          ? (res.data.replayed.length ? `replayed job${res.data.replayed.length > 1 ? 's' : ''} ${res.data.replayed.join(', ')} with a fresh attempt budget` : 'nothing matched that reason')
          : errorText(res.data, res.status));
        fetchDlq(true);
      } }, 'Replay');
    els.dlqReason = sel;
    els.dlqStatus = status('dlq-status');
    q('dlq-actions').append(h('div', { class: 'lw-row lw-wrap' }, h('label', { for: 'lw-dlq-reason' }, 'Replay dead letters with'),
      sel, btn), els.dlqStatus);
  }

  async function fetchDlq(force) {
    const n = S.counts.dlq || 0;
    if (!force && n === S.dlqFetchedFor) return;
    S.dlqFetchedFor = n;
    const lab = S.lab;
    const res = await api('GET', labPath('/dlq'));
    if (res.ok && S.lab === lab) { S.dlq = res.data.dead_letters; markDirty(); }
  }

  // ---- rendering -------------------------------------------------------------------------
  let raf = 0;
  function markDirty() {
    if (!raf) raf = requestAnimationFrame(() => { raf = 0; renderAll(); });
  }

  let lastTick = 0;
  function tick(force) {
    const now = performance.now();
    const gap = reduceMotion.matches ? 1000 : 250;
    if (!force && (document.hidden || now - lastTick < gap - 20)) return;
    lastTick = now;
    markDirty();
  }

  // render cost, kept so a tool or test can read how long a frame's work takes (root.lwRenderStats())
  root.lwRenderStats = () => {
    const ms = [...S.renderMs].sort((a, b) => a - b);
    const pick = (p) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))];
    return { frames: ms.length, p50: pick(0.5), p95: pick(0.95), max: ms[ms.length - 1] };
  };
  root.lwRenderStats.reset = () => { S.renderMs = []; };

  function renderAll() {
    if (!S.meta || !els.readouts) return;
    const t0 = performance.now();
    renderFrame();
    S.renderMs.push(performance.now() - t0);
    if (S.renderMs.length > 600) S.renderMs.splice(0, S.renderMs.length - 600);
  }

  function renderFrame() {
    const now = simNow();
    scrubber.sync(S.past ? S.past.buffer.length : 0);
    renderClock(now);
    renderReadouts(now);
    renderWorkers(now);
    renderBroker(now);
    renderFaults(now);
    renderDlq();
    if (els.hist) renderRetryHistogram(now);
    timeline.render(timelineJobs(), now, (id) => (S.jobs.get(id) || {}).state);
    renderJobs();
    renderLog();
    if (S.selectedJob) { renderDetail(); renderCountdown(now); }
    renderInspect(now);
  }

  function renderClock(now) {
    setText(els.clock, `t = ${fmtT(now)} s`);
    const c = S.clock || {};
    const slow = S.slowed && !c.paused
      ? ` asked, running at ${fmtNum(S.slowed.running)}×: ${S.slowed.reason}` : '';
    setText(els.clockSub, `${c.paused ? '‖ paused' : '▶ running'} · ${fmtNum(c.speed)}×${slow}`);
    els.clockP.dataset.slowed = slow ? 'yes' : 'no';
    els.clockP.dataset.value = String(Math.round(now));
    els.clockP.dataset.paused = c.paused ? 'yes' : 'no';
    if (els.pause) {
      setText(els.pause, c.paused ? 'Resume' : 'Pause');
      setAttr(els.pause, 'aria-pressed', c.paused ? 'true' : 'false');
    }
  }

  function setReadout(id, value, display, sub) {
    const r = els.readouts[id];
    if (!r) return;
    setText(r.value, display ?? String(value));
    r.tile.dataset.value = String(value);
    if (sub != null) setText(r.sub, sub);
    if (r.last !== null && r.last !== value && !reduceMotion.matches && !S.past) { // a scrub is not news
      r.tile.classList.remove('lw-bump');
      void r.tile.offsetWidth; // restart the highlight
      r.tile.classList.add('lw-bump');
    }
    r.last = value;
  }

  function renderReadouts(now) {
    const c = S.counts;
    const ws = [...S.workers.values()].map(effective);
    const alive = ws.filter((w) => !['dead', 'respawning', 'booting'].includes(w.state)).length;
    const busy = ws.filter((w) => w.state === 'busy').length;
    setReadout('queued', c.queued || 0, null, c.retrying ? `${c.retrying} waiting to retry` : 'waiting to be claimed');
    setReadout('active', busy, `${busy} / ${alive}`, `busy / alive${ws.length > alive ? ` · ${ws.length - alive} down` : ''}`);
    setReadout('done', c.done || 0);
    setReadout('redelivered', c.redelivered || 0);
    setReadout('duplicates', c.duplicates_blocked || 0);
    setReadout('lost', c.lost || 0);
    setReadout('dlq', c.dlq || 0);
    setReadout('outputs', c.outputs_written || 0);
    setReadout('emails', c.emails_sent || 0, null, `${c.emails_suppressed || 0} suppressed as repeats`);
    setReadout('dupdone', c.duplicate_completions || 0);
    setReadout('failed', c.failed || 0, null, `retries scheduled: ${c.retries_scheduled || 0}`);
    els.readouts.lost.tile.dataset.alarm = c.lost ? 'yes' : 'no';
    if (els.readouts.dupdone) els.readouts.dupdone.tile.dataset.alarm = c.duplicate_completions ? 'yes' : 'no';
    // redeliveries in the last RATE_WINDOW simulated seconds, with a 10-bucket sparkline
    const from = now - RATE_WINDOW;
    const buckets = new Array(10).fill(0);
    let n = 0;
    for (let i = S.redeliveries.length - 1; i >= 0; i--) {
      const t = S.redeliveries[i];
      if (t <= from) break;
      if (t > now + 1) continue;
      n++;
      buckets[Math.min(9, Math.max(0, Math.floor((t - from) / (RATE_WINDOW / 10))))]++;
    }
    setText(els.rate, `${n} in the last ${RATE_WINDOW} s (${fmtNum((n / RATE_WINDOW) * 60)}/min)`);
    els.rate.dataset.value = String(n);
    const peak = Math.max(1, ...buckets);
    els.spark.forEach((b, i) => {
      b.style.height = `${buckets[i] ? 20 + (80 * buckets[i]) / peak : 4}%`;
      b.dataset.n = String(buckets[i]);
    });
  }

  function workerLabel(w, now) {
    switch (w.state) {
      case 'busy': return `busy: job ${w.job_id} · attempt ${w.attempt ?? '?'}`;
      case 'idle': return w.crashedJob != null ? `idle: poison job ${w.crashedJob} crashed its work horse` : 'idle: waiting for work';
      case 'dead': {
        const died = S.deaths.get(w.id);
        const left = died != null ? died + (S.settings.respawn_delay || 0) - now : null;
        return left != null && left > 0 ? `dead: respawns in ~${fmtDur(left)}` : 'dead: respawning soon';
      }
      case 'respawning': return 'respawning: new process starting';
      case 'booting': return `booting: takes jobs after its ${fmtDur(w.bootLag ?? S.settings.boot_lag)} boot lag`;
      case 'draining': return 'draining: finishes its job, takes no more';
      case 'rewiring': return `restarting: finishes its job, then serves ${w.serves ?? 'its new fleet'}`;
      default: return w.state;
    }
  }

  /** The API keeps a worker 'busy' after a poison pill kills its work horse; it is idle really. */
  function crashedOnPoison(w) {
    if (w.state !== 'busy' || w.job_id == null) return false;
    const tj = S.tl.get(w.job_id);
    const a = tj && tj.attempts.get(w.attempt);
    return !!(a && a.outcome === 'crashed');
  }

  function effective(w) {
    return crashedOnPoison(w) ? { ...w, state: 'idle', crashedJob: w.job_id } : w;
  }

  const workerEls = new Map();
  function renderWorkers(now) {
    const list = q('workers');
    const canKill = S.controls.has('kill') && !S.lab.viewer;
    const seen = new Set();
    const ordered = [...S.workers.values()].map(effective).sort((a, b) => Number(a.id.slice(1)) - Number(b.id.slice(1)));
    ordered.forEach((w, idx) => {
      seen.add(w.id);
      let e = workerEls.get(w.id);
      if (!e) {
        const name = h('span', { class: 'lw-w-name' }, w.id, h('span', { class: 'lw-w-fleet' }));
        const state = h('span', { class: 'lw-w-state' });
        const pid = h('span', { class: 'lw-w-pid' });
        const fill = h('span', { class: 'lw-w-fill' });
        const bar = h('span', { class: 'lw-w-bar', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100',
          'aria-label': `${w.id} progress` }, fill);
        const act = h('span', { class: 'lw-w-act', 'aria-hidden': 'true' });
        const stale = h('span', { class: 'lw-w-stale' });
        const card = h(canKill ? 'button' : 'div', { class: 'lw-worker', testid: `worker-${w.id}`,
          type: canKill ? 'button' : null, onclick: canKill ? () => clickWorker(w.id) : null },
        h('span', { class: 'lw-w-top' }, name, pid), state, bar, stale, act);
        const wid = w.id;
        const inspect = h('button', { type: 'button', class: 'lw-linkish lw-w-inspect', testid: `worker-inspect-${wid}`,
          'aria-expanded': 'false', 'aria-label': `inspect ${wid}: its jobs, pid and state`,
          onclick: () => openInspect('worker', wid) }, 'inspect');
        const li = h('li', {}, card, inspect);
        e = { li, card, state, pid, bar, fill, act, stale, inspect, fleet: name.lastChild };
        workerEls.set(w.id, e);
      }
      const label = workerLabel(w, now);
      const job = w.state === 'busy' ? S.jobs.get(w.job_id) : null;
      const isStale = !!(job && w.attempt != null && job.attempt > w.attempt);
      setText(e.stale, isStale ? `⚠ duplicate: its lease ran out, attempt ${job.attempt} owns job ${job.id} now` : '');
      e.card.dataset.stale = isStale ? 'yes' : 'no';
      e.card.dataset.state = w.state;
      e.card.dataset.fleet = w.fleet || 'shared';
      setText(e.fleet, w.fleet ? ` · ${w.fleet}` : '');
      setAttr(e.card, 'title', w.fleet ? `serves ${w.fleet} jobs only (a fleet of its own)` : null);
      setText(e.state, label);
      setText(e.pid, w.pid ? `pid ${w.pid}` : 'no process');
      const pct = w.state === 'busy' ? Math.max(0, Math.min(100, w.progress || 0)) : 0;
      e.fill.style.width = `${pct}%`;
      setAttr(e.bar, 'aria-valuenow', pct);
      e.bar.hidden = w.state !== 'busy';
      const killable = canKill && KILLABLE.includes(w.state);
      setText(e.act, killable ? (w.state === 'busy' ? '✕ click to kill (SIGKILL)' : '✕ kill') : '');
      if (canKill) {
        setAttr(e.card, 'aria-disabled', killable ? null : 'true');
        setAttr(e.card, 'aria-label', `${w.id}, ${label}${w.pid ? `, pid ${w.pid}` : ''}${isStale ? ', a duplicate: its lease ran out' : ''}${killable ? '. Press to kill it with SIGKILL' : ''}`);
      }
      setAttr(e.inspect, 'aria-expanded', isOpen('worker', w.id) ? 'true' : 'false');
      const at = list.children[idx];
      if (at !== e.li) list.insertBefore(e.li, at || null);
    });
    for (const [id, e] of workerEls) if (!seen.has(id)) { e.li.remove(); workerEls.delete(id); }
  }

  function clickWorker(id) {
    const w = S.workers.get(id);
    if (!w || !KILLABLE.includes(w.state)) return;
    killWorker(id);
  }

  const chipEls = new Map(), leaseEls = new Map();
  function renderBroker(now) {
    const jobs = [...S.jobs.values()].sort((a, b) => Number(a.id) - Number(b.id));
    // visible queue
    const queue = jobs.filter((j) => j.state === 'queued' || j.state === 'retrying');
    const qList = q('queue');
    syncList(qList, chipEls, queue.slice(0, 40), (j) => j.id, (j) => {
      const text = h('span', {});
      return { li: h('li', { class: 'lw-chip', testid: `queued-${j.id}` }, text), text };
    }, (j, e) => {
      e.li.dataset.state = j.state;
      const retry = j.state === 'retrying';
      setText(e.text, `job ${j.id} · attempt ${j.attempt}${retry ? ` · retry at t=${j.due != null ? fmtT(j.due) : '…'} s` : ''}`);
    });
    q('queue-empty').hidden = queue.length > 0;
    // in flight: leased messages with a countdown ring on the simulated clock
    const running = jobs.filter((j) => j.state === 'running');
    const canCut = S.controls.has('kill') && !S.lab.viewer;
    syncList(q('inflight'), leaseEls, running, (j) => j.id, (j) => {
      const ring = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
      ring.setAttribute('viewBox', '0 0 36 36');
      ring.setAttribute('class', 'lw-ring');
      ring.setAttribute('aria-hidden', 'true');
      ring.innerHTML = '<circle class="lw-ring-bg" cx="18" cy="18" r="15.9"/><circle class="lw-ring-fg" cx="18" cy="18" r="15.9" pathLength="100" stroke-dasharray="100 100" transform="rotate(-90 18 18)"/>';
      const jid = j.id;
      const title = h('button', { type: 'button', class: 'lw-linkish lw-lease-title', testid: `lease-open-${jid}`,
        'aria-expanded': 'false', onclick: () => openInspect('lease', jid) });
      const left = h('span', { class: 'lw-lease-left' });
      const warn = h('span', { class: 'lw-lease-warn' });
      // the UX rule "break it by clicking the thing that fails": a lease can be cut short where it is shown
      const cut = canCut ? h('button', { type: 'button', class: 'lw-btn lw-small lw-danger lw-lease-cut',
        testid: `lease-expire-${jid}`, 'aria-label': `expire the lease on job ${jid} now`,
        onclick: () => expireLease(jid) }, 'Expire now') : null;
      const li = h('li', { class: 'lw-lease', testid: `lease-${j.id}` }, ring,
        h('span', { class: 'lw-lease-text' }, title, left, warn), cut || '');
      return { li, ring, fg: ring.lastChild, title, left, warn, cut };
    }, (j, e) => {
      if (e.cut) e.cut.hidden = j.lease_deadline == null || !!S.past;
      const tj = S.tl.get(j.id);
      const a = tj && tj.attempts.get(j.attempt);
      const w = S.workers.get(j.worker);
      const orphan = !w || w.job_id !== j.id || ['dead', 'respawning'].includes(w.state) || !!(a && a.deadAt != null);
      setText(e.title, `job ${j.id} · attempt ${j.attempt} on ${j.worker || '?'}`);
      setAttr(e.title, 'aria-expanded', isOpen('lease', j.id) ? 'true' : 'false');
      let frac = 0, state;
      if (j.lease_deadline == null) {
        state = S.settings.ack_mode === 'early' || (a && a.deadline == null) ? 'none' : 'expired';
        setText(e.left, state === 'none' ? 'no lease: acked early, deleted on claim' : 'lease expired: being redelivered');
      } else {
        const remaining = j.lease_deadline - now;
        const start = a && a.leaseStart != null ? a.leaseStart : j.lease_deadline - (S.settings.vt_seconds || 1);
        const total = Math.max(1, j.lease_deadline - start);
        frac = Math.max(0, Math.min(1, remaining / total));
        state = remaining > 0 ? (frac < 0.2 ? 'low' : 'ok') : 'expired';
        setText(e.left, remaining > 0 ? `lease: ${fmtDur(remaining)} left (deadline t=${fmtT(j.lease_deadline)} s)`
          : `lease expired ${fmtDur(-remaining)} ago: the reaper is on it`);
      }
      e.fg.setAttribute('stroke-dasharray', `${(frac * 100).toFixed(1)} 100`);
      e.li.dataset.lease = state;
      e.li.dataset.orphan = orphan ? 'yes' : 'no';
      const why = a && a.outcome === 'crashed' ? `the poison pill crashed ${j.worker}’s work horse`
        : a && a.killedAt != null ? `${j.worker} was killed at t=${fmtT(a.killedAt)} s` : `${j.worker || 'its worker'} is no longer running it`;
      setText(e.warn, orphan ? `⚠ Nobody is working on it: ${why}. The broker can’t tell; only the lease brings it back.` : '');
    });
    q('inflight-empty').hidden = running.length > 0;
  }

  /** Keyed list update: create missing items, update all, remove stale, keep order. */
  function syncList(list, cache, items, keyOf, create, update) {
    const seen = new Set();
    items.forEach((item, idx) => {
      const k = keyOf(item);
      seen.add(k);
      let e = cache.get(k);
      if (!e) { e = create(item); cache.set(k, e); }
      update(item, e);
      const at = list.children[idx];
      if (at !== e.li) list.insertBefore(e.li, at || null);
    });
    for (const [k, e] of cache) if (!seen.has(k)) { e.li.remove(); cache.delete(k); }
  }

  function renderFaults(now) {
    const box = q('faults');
    const parts = [];
    for (const [f, until] of Object.entries(S.faultUntil)) {
      if (until > now) parts.push(`⚠ ${(FAULT_TEXT[f] || [f])[0]}: ${fmtDur(until - now)} left`);
    }
    if (S.settings.breaker || S.breaker.state !== 'closed') {
      const st = S.breaker.state || 'closed';
      parts.push(`Circuit breaker: ${st.replace('_', '-')}${st === 'open' ? ' (failing fast)' : ''}`);
    }
    const text = parts.join(' · ');
    setText(box, text);
    box.hidden = !text;
    box.dataset.alarm = /⚠|open/.test(text) ? 'yes' : 'no';
  }

  const dlqEls = new Map();
  function renderDlq() {
    const n = S.counts.dlq || 0;
    setText(q('dlq-count'), n ? `${n} job${n === 1 ? '' : 's'}` : '');
    if (!S.past && n !== S.dlqFetchedFor) fetchDlqSoon();
    const items = !n ? [] : S.past ? [...S.jobs.values()].filter((j) => j.state === 'dlq').reverse()
      .map((j) => ({ job_id: j.id, attempts: j.attempt, reason: j.dlq_reason, last_error: j.last_error })) : S.dlq;
    syncList(q('dlq'), dlqEls, items.slice(0, 30), (d) => d.job_id, () => {
      const title = h('button', { type: 'button', class: 'lw-linkish', onclick: (ev) => openJob(ev.currentTarget.dataset.job) }), reason = h('span', { class: 'lw-dlq-reason' }), err = h('span', { class: 'lw-dlq-err' });
      return { li: h('li', { class: 'lw-dlq-item' }, title, reason, err), title, reason, err };
    }, (d, e) => {
      e.li.dataset.testid = `dlq-${d.job_id}`;
      e.title.dataset.job = d.job_id;
      setText(e.title, `job ${d.job_id} · ${d.attempts} attempt${d.attempts === 1 ? '' : 's'}`);
      setText(e.reason, d.reason);
      setText(e.err, d.last_error ? `last error: ${d.last_error}` : '');
    });
    q('dlq-empty').hidden = items.length > 0;
    if (els.dlqReason) {
      const reasons = [...new Set(S.dlq.map((d) => (d.reason || '').split(/[:(]/)[0].trim()).filter(Boolean))];
      const have = [...els.dlqReason.options].map((o) => o.value);
      for (const r of reasons) if (!have.includes(r)) els.dlqReason.append(h('option', { value: r }, r));
    }
  }

  const fetchDlqSoon = throttled(() => fetchDlq(false), 500);

  const findText = () => q('job-find').value.trim().replace(/^#/, '');
  // the live model holds the newest 200 jobs; older ones matching the id or prefix are asked of the API
  const findOlderSoon = throttled(async () => {
    const id = findText();
    if (!/^[1-9]\d*$/.test(id) || S.past) return;
    const lab = S.lab;
    if (!S.jobs.has(id) && !S.found.has(id)) {
      const res = await api('GET', labPath(`/jobs/${id}`));
      if (S.lab === lab && (res.ok || res.status === 404)) S.found.set(id, res.ok ? res.data : null);
    }
    const local = [...S.jobs.keys()].filter((k) => k.startsWith(id)).length;
    const oldest = Math.min(...[...S.jobs.keys()].map(Number));
    if (local < JOBS_SHOWN && oldest > 1 && !S.foundPrefix.has(id)) {
      const res = await api('GET', labPath(`/jobs?prefix=${id}&limit=${JOBS_SHOWN}`));
      if (res.ok && S.lab === lab) {
        S.foundPrefix.set(id, res.data.jobs.map((j) => j.id));
        for (const j of res.data.jobs) if (!S.jobs.has(j.id)) S.found.set(j.id, j);
      }
    }
    markDirty();
  }, 300);
  const jobById = (id) => S.jobs.get(id) || S.found.get(id);

  const jobEls = new Map();
  function renderJobs() {
    const find = findText();
    let jobs = [...S.jobs.values()];
    if (S.heldJobs && !find) jobs = S.heldJobs.map(jobById).filter(Boolean);
    else if (find) {
      jobs = jobs.filter((j) => j.id.startsWith(find));
      const have = new Set(jobs.map((j) => j.id));
      for (const id of [find, ...(S.foundPrefix.get(find) || [])]) {
        if (!have.has(id) && jobById(id)) { jobs.push(jobById(id)); have.add(id); }
      }
    }
    jobs.sort((a, b) => Number(b.id) - Number(a.id));
    q('jobs-empty').hidden = jobs.length > 0;
    if (!jobs.length && find) setText(q('jobs-empty'), /^\d+$/.test(find) && !S.found.has(find) ? `Looking for job #${find}…` : `No job #${find} in this lab.`);
    else setText(q('jobs-empty'), 'No jobs yet.');
    syncList(q('jobs'), jobEls, jobs.slice(0, JOBS_SHOWN), (j) => j.id, (j) => {
      const open = h('button', { type: 'button', class: 'lw-job-open', testid: `job-open-${j.id}`,
        'aria-expanded': 'false', onclick: () => openJob(j.id) }, `Job ${j.id}`);
      const video = h('span', { class: 'lw-job-video' });
      const badge = h('span', { class: 'lw-badge' });
      const att = h('span', { class: 'lw-job-att' });
      const outs = h('span', { class: 'lw-job-outputs' });
      const li = h('li', { class: 'lw-job', testid: `job-row-${j.id}` }, open, video, badge, att, outs);
      return { li, open, video, badge, att, outs, outKey: '' };
    }, (j, e) => {
      e.li.dataset.state = j.state || '';
      setText(e.video, `${videoLabel(j.payload && j.payload.video_id)}${j.payload && j.payload.job_type === 'thumbnail' ? ' · thumbnail' : ''}`);
      setText(e.badge, stateWord(j.state));
      e.badge.dataset.state = j.state || '';
      const n = Math.max((j.attempts || []).length, j.attempt || 0);
      setText(e.att, `${n} attempt${n === 1 ? '' : 's'}`);
      setAttr(e.open, 'aria-expanded', S.selectedJob === j.id ? 'true' : 'false');
      const outputs = Object.entries(j.outputs || {});
      const key = outputs.map(([k, v]) => `${k}=${v}`).join('|');
      if (key !== e.outKey) {
        e.outKey = key;
        e.outs.replaceChildren(...outputs.map(([name, url]) => (url.endsWith('.mp4')
          ? h('span', { class: 'lw-out' },
            h('button', { type: 'button', class: 'lw-btn lw-small', testid: `play-${j.id}-${name}`,
              onclick: () => play(j.id, name, url) }, `▶ ${name}`),
            h('a', { href: url, download: `job${j.id}-${name}.mp4`, testid: `output-${j.id}-${name}`,
              'aria-label': `download job ${j.id} ${name}` }, 'file'))
          : h('a', { href: url, class: 'lw-out', testid: `output-${j.id}-${name}`, target: '_blank', rel: 'noopener' }, `${name} image`))));
      }
    });
  }

  const videoLabel = (v) => (/^[0-9a-f]{12}$/.test(v || '') ? 'uploaded file' : v || '');

  const stateWord = (st) => ({ queued: 'queued', running: 'running', retrying: 'waiting to retry', done: 'done',
    dlq: 'dead-lettered', lost: 'lost' }[st] || st || '…');

  async function play(jobId, name, url) {
    const wrap = q('player-wrap');
    const v = els.player;
    let src = url;
    if (S.lab.viewer) {
      // viewers have no lab cookie: fetch with the view token and play the bytes
      const res = await fetch(url, { headers: { Authorization: `Bearer ${S.lab.token}` } });
      if (!res.ok) { setText(q('player-caption'), `could not load ${name}: HTTP ${res.status}`); wrap.hidden = false; return; }
      src = URL.createObjectURL(await res.blob());
    }
    if (v.dataset.blob) URL.revokeObjectURL(v.dataset.blob);
    v.dataset.blob = S.lab.viewer ? src : '';
    v.src = src;
    v.dataset.job = jobId;
    v.dataset.rendition = name;
    wrap.hidden = false;
    setText(q('player-caption'), `Job ${jobId}, ${name}: the real ffmpeg output this lab wrote.`);
    v.addEventListener('loadedmetadata', () => {
      setText(q('player-caption'), `Job ${jobId}, ${name}: ${v.videoWidth}×${v.videoHeight}, ${v.duration.toFixed(1)} s of real ffmpeg output.`);
    }, { once: true });
  }

  function openJob(id, fromTimeline) {
    S.selectedJob = S.selectedJob === id && !fromTimeline ? null : id;
    // the rows on screen stay put while the panel under them is open (no new job pushes it down)
    const rows = [...q('jobs').children].map((li) => li.dataset.testid.replace('job-row-', ''));
    S.heldJobs = S.selectedJob && rows.length ? rows : null;
    if (S.selectedJob) fetchHistory();
    pauseForInspect(Boolean(S.selectedJob));
    renderDetail(true);
    markDirty();
    if (fromTimeline && S.selectedJob) {
      els.detail.scrollIntoView({ block: 'nearest', behavior: reduceMotion.matches ? 'auto' : 'smooth' });
    }
  }

  // the open job's internals from the API (every attempt with its fence, CAS refusals, retry delays, files)
  async function fetchHistory() {
    const id = S.selectedJob;
    if (id == null) return;
    const res = await api('GET', labPath(`/jobs/${encodeURIComponent(id)}?include=history`));
    if (res.ok && res.data.history) { S.history.set(id, res.data.history); markDirty(); }
  }
  const fetchHistorySoon = throttled(fetchHistory, 300);

  const PAUSE_PREF = 'lw-pause-while-inspecting';
  function pauseForInspect(opening) {
    if (S.lab.viewer || !S.controls.has('clock') || !S.clock) return;
    if (opening && localStorage.getItem(PAUSE_PREF) === '1' && !S.clock.paused) {
      S.pausedForInspect = true;
      clockAction({ action: 'pause' });
    } else if (!opening && S.pausedForInspect) {
      S.pausedForInspect = false;
      if (S.clock.paused) clockAction({ action: 'resume' });
    }
  }

  function renderCountdown(now) {
    const el = els.detail.querySelector('[data-testid="lease-countdown"]');
    const j = jobById(S.selectedJob);
    if (!el || !j) return;
    const left = j.lease_deadline != null && j.state === 'running' ? j.lease_deadline - now : null;
    setText(el, left == null ? 'no lease held' : left > 0 ? `${Math.ceil(left)} s left (t=${fmtT(j.lease_deadline)} s)`
      : `expired at t=${fmtT(j.lease_deadline)} s`);
  }

  // ---- inspect a worker or a lease --------------------------------------------------------
  const isOpen = (kind, id) => !!(S.inspect && S.inspect.kind === kind && S.inspect.id === id);

  function openInspect(kind, id) {
    const closing = isOpen(kind, id);
    S.inspect = closing ? null : { kind, id };
    inspectKey = '';
    pauseForInspect(!closing);
    markDirty();
  }

  function closeInspect() {
    S.inspect = null;
    pauseForInspect(false);
    markDirty();
  }

  /** Every attempt a worker ran, newest first, from the timeline model (so also in the past). */
  function workerAttempts(id) {
    const out = [];
    for (const j of S.tl.values()) {
      for (const a of j.attempts.values()) if (a.worker === id && a.start != null) out.push({ job: j.id, a });
    }
    return out.sort((x, y) => y.a.start - x.a.start);
  }

  let inspectKey = '';
  function renderInspect(now) {
    const boxes = { worker: q('worker-detail'), lease: q('lease-detail') };
    const want = S.inspect;
    for (const [kind, box] of Object.entries(boxes)) {
      if (!want || want.kind !== kind) { if (!box.hidden) { box.hidden = true; box.replaceChildren(); } }
    }
    if (!want) return;
    const box = boxes[want.kind];
    const sel = document.getSelection();
    const holding = (sel && !sel.isCollapsed && box.contains(sel.anchorNode)) || box.contains(document.activeElement);
    if (want.kind === 'worker') renderWorkerPanel(box, want.id, now, holding);
    else renderLeasePanel(box, want.id, now, holding);
    box.hidden = false;
  }

  function panelHead(title, testid) {
    return h('div', { class: 'lw-detail-head' }, h('h4', {}, title),
      h('button', { type: 'button', class: 'lw-btn lw-small', testid, onclick: closeInspect }, 'Close'));
  }

  function renderWorkerPanel(box, id, now, holding) {
    const w = S.workers.get(id);
    const runs = workerAttempts(id);
    const key = JSON.stringify([w, runs.slice(0, 8).map(({ job, a }) => [job, a.n, a.end, a.outcome]), S.deaths.get(id)]);
    if (holding || key === inspectKey) return;
    inspectKey = key;
    const st = w ? effective(w) : null;
    const current = st && st.state === 'busy' ? st.job_id : null;
    const open = (job) => h('button', { type: 'button', class: 'lw-linkish', onclick: () => openJob(job, true) }, `job ${job}`);
    box.replaceChildren(
      panelHead(`Worker ${id}: ${st ? st.state : 'gone'}`, 'worker-detail-close'),
      h('dl', {},
        h('dt', {}, 'state'), h('dd', { testid: 'worker-detail-state' }, st ? workerLabel(st, now) : 'stopped: no longer in the pool'),
        h('dt', {}, 'pid'), h('dd', { testid: 'worker-detail-pid' }, w && w.pid ? String(w.pid) : 'no process'),
        h('dt', {}, 'current job'), h('dd', { testid: 'worker-detail-current' }, current != null ? [open(current), ` · attempt ${st.attempt ?? '?'}`] : 'none'),
        S.deaths.has(id) ? [h('dt', {}, 'last death'), h('dd', {}, `t=${fmtT(S.deaths.get(id))} s`)] : null),
      h('table', { class: 'lw-attempts', testid: 'worker-detail-jobs' },
        h('caption', {}, runs.length ? `Attempts this worker ran (${runs.length}), newest first` : 'This worker has run nothing yet'),
        h('thead', {}, h('tr', {}, ['job', 'attempt', 'start', 'end', 'outcome'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, runs.slice(0, 8).map(({ job, a }) => h('tr', { testid: `worker-run-${job}-${a.n}` },
          h('td', {}, open(job)), h('td', {}, String(a.n)), h('td', {}, fmtT(a.start)),
          h('td', {}, a.end != null ? fmtT(a.end) : '–'), h('td', {}, a.outcome || 'running'))))));
  }

  function renderLeasePanel(box, jobId, now, holding) {
    const j = S.jobs.get(jobId);
    const tj = S.tl.get(jobId);
    const a = j && tj ? tj.attempts.get(j.attempt) : null;
    const key = JSON.stringify([j && [j.state, j.attempt, j.worker, j.lease_deadline], a && [a.leaseStart, a.extended, a.expiredAt]]);
    if (!holding && key !== inspectKey) {
      inspectKey = key;
      box.replaceChildren(
        panelHead(`Lease on job ${jobId}`, 'lease-detail-close'),
        h('dl', {},
          h('dt', {}, 'held by'), h('dd', { testid: 'lease-detail-worker' }, j && j.worker ? `${j.worker}, attempt ${j.attempt}` : '–'),
          h('dt', {}, 'fence'), h('dd', { testid: 'lease-detail-fence' }, j ? `${j.attempt}: a write carrying an older attempt number is refused` : '–'),
          h('dt', {}, 'taken at'), h('dd', {}, a && a.start != null ? `t=${fmtT(a.start)} s` : '–'),
          h('dt', {}, 'heartbeats'), h('dd', { testid: 'lease-detail-extended' }, a && a.extended ? `extended ${a.extended} time${a.extended === 1 ? '' : 's'}` : 'none'),
          h('dt', {}, 'deadline'), h('dd', { testid: 'lease-detail-deadline' }),
          h('dt', {}, 'counts down'), h('dd', { testid: 'lease-detail-countdown' })),
        h('button', { type: 'button', class: 'lw-btn lw-small', testid: 'lease-detail-job', onclick: () => openJob(jobId, true) },
          `Open job ${jobId}’s internals`));
    }
    // the countdown moves every frame, whatever else holds still
    const dl = j && j.state === 'running' ? j.lease_deadline : null;
    setText(box.querySelector('[data-testid="lease-detail-deadline"]'), dl != null ? `t=${fmtT(dl)} s` : 'no lease held now');
    setText(box.querySelector('[data-testid="lease-detail-countdown"]'), dl == null ? (j && j.state === 'running' ? 'expired: being redelivered' : `job is ${stateWord(j && j.state)}`)
      : dl - now > 0 ? `${Math.ceil(dl - now)} s left` : `expired ${fmtDur(now - dl)} ago: the reaper is on it`);
  }

  let detailKey = '';
  function renderDetail(force) {
    const box = els.detail;
    const id = S.selectedJob;
    const j = id != null ? jobById(id) : null;
    if (!j) { box.hidden = true; box.replaceChildren(); detailKey = ''; return; }
    // hold still while the learner selects text or works inside the panel
    const sel = document.getSelection();
    if (!force && ((sel && !sel.isCollapsed && box.contains(sel.anchorNode)) || box.contains(document.activeElement))) return;
    const tj = S.tl.get(id);
    const hist = S.past ? null : S.history.get(id); // the server's fold knows the future: not for the past
    const key = JSON.stringify([j, tj ? [...tj.attempts.values()] : null, hist]);
    if (!force && key === detailKey) return;
    detailKey = key;
    // the server's fold of the stream when we have it; the live timeline's own record until then
    const rows = hist ? hist.attempts.map((a) => h('tr', { testid: `attempt-${a.attempt}` },
      h('td', {}, a.attempt), h('td', {}, a.worker || '–'), h('td', {}, a.start != null ? fmtT(a.start) : 'queued'),
      h('td', {}, a.end != null ? fmtT(a.end) : '–'), h('td', {}, a.outcome || (a.start != null ? 'running' : 'queued'),
        a.error ? ` · ${a.error}` : ''), h('td', {}, String(a.fence)),
      h('td', {}, a.lease_deadline != null ? `t=${fmtT(a.lease_deadline)}` : '–')))
      : (tj ? [...tj.attempts.values()] : []).sort((a, b) => a.n - b.n).map((a) => h('tr', { testid: `attempt-${a.n}` },
        h('td', {}, a.n), h('td', {}, a.worker || '–'), h('td', {}, a.start != null ? fmtT(a.start) : 'queued'),
        h('td', {}, a.end != null ? fmtT(a.end) : '–'),
        h('td', {}, a.outcome || 'queued', a.expiredAt != null ? ` · lease expired at ${fmtT(a.expiredAt)}` : '', a.error ? ` · ${a.error}` : ''),
        h('td', {}, String(a.n)), h('td', {}, a.deadline != null ? `t=${fmtT(a.deadline)}` : '–')));
    const cas = hist ? hist.cas_refused : [];
    const delays = hist ? hist.retry_delays : [];
    const files = hist ? hist.output_files : [];
    box.replaceChildren(...[
      h('div', { class: 'lw-detail-head' }, h('h4', {}, `Job ${id}: ${stateWord(j.state)}`),
        h('button', { type: 'button', class: 'lw-btn lw-small', testid: 'detail-close', onclick: () => openJob(id) }, 'Close')),
      h('dl', {},
        h('dt', {}, 'attempt'), h('dd', {}, String(j.attempt)),
        h('dt', {}, 'lease deadline'), h('dd', { testid: 'lease-countdown' }),
        j.dlq_reason ? [h('dt', {}, 'DLQ reason'), h('dd', {}, j.dlq_reason)] : null,
        j.last_error ? [h('dt', {}, 'last error'), h('dd', {}, j.last_error)] : null),
      h('table', { class: 'lw-attempts' }, h('caption', {}, 'Attempts (simulated seconds; CAS outcome per attempt)'),
        h('thead', {}, h('tr', {}, ['#', 'worker', 'start', 'end', 'outcome', 'fence', 'lease until'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows)),
      h('p', { class: 'lw-doc', testid: 'detail-cas' }, cas.length
        ? `CAS refused ${cas.length} transition${cas.length === 1 ? '' : 's'}: ${cas.map((c) => `attempt ${c.attempt} at t=${fmtT(c.t)} (${c.reason})`).join('; ')}`
        : 'CAS refused nothing: every transition carried the current fence.'),
      delays.length ? h('p', { class: 'lw-doc', testid: 'detail-retries' },
        `Retry delays drawn: ${delays.map((d) => `${d.delay} s after attempt ${d.attempt}`).join(', ')}`) : null,
      files.length ? h('p', { class: 'lw-doc', testid: 'detail-files' }, `Files written: ${files.join(', ')}`) : null,
      h('details', {}, h('summary', {}, 'Payload'), h('pre', {}, JSON.stringify(j.payload, null, 2)))].filter(Boolean));
    box.hidden = false;
  }

  // ---- retry arrivals (chapter 4: do the retries of an outage arrive as a herd?) -------------
  const HIST_BUCKETS = 30, HIST_WINDOW = 600;
  function buildRetryHistogram() {
    const bars = Array.from({ length: HIST_BUCKETS }, () => h('span', { class: 'lw-hist-bar' }));
    const caption = h('p', { class: 'lw-doc', testid: 'retry-hist-caption' });
    const panel = h('section', { class: 'lw-panel lw-hist', 'aria-labelledby': 'lw-hist-h', testid: 'retry-histogram' },
      h('h3', { id: 'lw-hist-h' }, 'Retry arrivals ', h('small', {}, `last ${HIST_WINDOW} s, ${HIST_WINDOW / HIST_BUCKETS} s per bar`)),
      h('div', { class: 'lw-hist-bars', 'aria-hidden': 'true' }, bars), caption);
    root.querySelector('.lw-timeline').before(panel);
    els.hist = { bars, caption };
  }

  function renderRetryHistogram(now) {
    // the live window, or (once it has moved past them) the window that ends with the last burst
    const lastRetry = S.retries.length ? S.retries[S.retries.length - 1] : null;
    const live = lastRetry == null || lastRetry > now - HIST_WINDOW;
    const end = live ? now : lastRetry + HIST_WINDOW / HIST_BUCKETS;
    const from = end - HIST_WINDOW, size = HIST_WINDOW / HIST_BUCKETS;
    const counts = new Array(HIST_BUCKETS).fill(0);
    for (let i = S.retries.length - 1; i >= 0 && S.retries[i] > from; i--) {
      if (S.retries[i] <= end) counts[Math.min(HIST_BUCKETS - 1, Math.floor((S.retries[i] - from) / size))]++;
    }
    const peak = Math.max(...counts), total = counts.reduce((a, b) => a + b, 0);
    els.hist.bars.forEach((b, i) => {
      b.style.height = counts[i] ? `${15 + (85 * counts[i]) / Math.max(1, peak)}%` : '2px';
      b.dataset.n = String(counts[i]);
    });
    setText(els.hist.caption, total
      ? `${live ? '' : `Last burst, t=${fmtT(Math.max(0, from))}–${fmtT(end)} s: `}${total} retr${total === 1 ? 'y' : 'ies'} arrived; the busiest ${size} s took ${peak}. Policy now: ${String(S.settings.retry_policy).replace('_', ' ')}.`
      : `No retries in the last ${HIST_WINDOW} s. Start a storage outage while jobs run, then compare policies.`);
  }

  // ---- event log -------------------------------------------------------------------------
  function buildLogFilters() {
    const sel = q('log-type');
    const types = Object.keys(S.meta.events);
    sel.append(h('option', { value: 'default' }, 'all but progress ticks'),
      h('option', { value: 'important' }, 'key moments only'),
      h('option', { value: 'all' }, 'everything'),
      h('optgroup', { label: 'one type' }, types.map((t) => h('option', { value: t }, t))));
    sel.addEventListener('change', () => { S.logRebuild = true; markDirty(); });
    q('log-job').addEventListener('input', () => { S.logRebuild = true; markDirty(); });
    q('log-worker').addEventListener('change', () => { S.logRebuild = true; markDirty(); });
    const list = q('log');
    list.addEventListener('scroll', () => { if (list.scrollTop < 4 && S.logPending) markDirty(); });
    q('log-more').addEventListener('click', () => { list.scrollTop = 0; S.logRebuild = true; renderLog(true); });
  }

  const labelOf = (name) => (S.schema.get(name) || {}).label || name;
  const panelOpen = () => Boolean(S.selectedJob || S.inspect || (els.help && !els.help.hidden));
  const logWorkers = new Set();

  function addLog(ev, live) {
    const text = narrate(ev, S.meta, labelOf);
    const last = S.log[S.log.length - 1];
    if ((ev.type === 'job.redelivered' || ev.type === 'job.dead_lettered') && last && last.types[0] === 'lease.expired'
        && last.job === ev.job_id && Math.abs(last.t - ev.t_sim) < 1) {
      last.types.push(ev.type);
      last.text += `; ${text.replace(new RegExp(`^job ${ev.job_id} `), '')}`;
      if (last.el) setText(last.el.lastChild, last.text);
      if (live && last.announced) S.announceQueue.push(last);
      return;
    }
    const entry = { id: ev.id, t: ev.t_sim, types: [ev.type], job: ev.job_id ?? (ev.data && ev.data.job_id) ?? null,
      worker: ev.worker_id ?? null, text, el: null, announced: live && ANNOUNCE.has(ev.type) };
    if (entry.worker && !logWorkers.has(entry.worker)) {
      logWorkers.add(entry.worker);
      const sel = q('log-worker');
      const ids = [...logWorkers].sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
      sel.insertBefore(h('option', { value: entry.worker }, entry.worker), sel.options[ids.indexOf(entry.worker) + 1] || null);
    }
    S.log.push(entry);
    if (S.log.length > 5000) S.log.splice(0, 1000);
    if (entry.announced) S.announceQueue.push(entry);
    S.logPending++;
  }

  // the event log's filters (job, worker, one type) narrow the timeline to the jobs they touch
  function filters() {
    const type = q('log-type').value;
    return { type, oneType: !['default', 'important', 'all'].includes(type) ? type : null,
      job: q('log-job').value.trim().replace(/^#/, ''), worker: q('log-worker').value };
  }

  let tlFilterKey = '';
  function timelineJobs() {
    const f = filters();
    const note = [f.job && `job ${f.job}`, f.worker && `worker ${f.worker}`, f.oneType && `events of type ${f.oneType}`].filter(Boolean);
    const key = note.join('|');
    if (key !== tlFilterKey) {
      tlFilterKey = key;
      const el = q('tl-filter');
      el.hidden = !note.length;
      el.replaceChildren(...(note.length ? [`Showing only jobs with ${note.join(' and ')} (the event log’s filters). `,
        h('button', { type: 'button', class: 'lw-linkish', testid: 'tl-filter-clear', onclick: clearFilters }, 'Show all')] : []));
    }
    if (!note.length) return S.tl;
    const out = new Map();
    for (const [id, j] of S.tl) {
      if (f.job && id !== f.job) continue;
      if (f.worker && !j.workers.has(f.worker)) continue;
      if (f.oneType && !j.types.has(f.oneType)) continue;
      out.set(id, j);
    }
    return out;
  }

  function clearFilters() {
    q('log-type').value = 'default';
    q('log-job').value = '';
    q('log-worker').value = '';
    S.logRebuild = true;
    markDirty();
  }

  function logMatches(e, f = filters()) {
    const { type, job, worker } = f;
    if (job && String(e.job) !== job) return false;
    if (worker && e.worker !== worker) return false;
    if (type === 'all') return true;
    if (type === 'default') return !e.types.every((t) => t === 'job.progress');
    if (type === 'important') return e.types.some((t) => IMPORTANT.has(t));
    return e.types.includes(type);
  }

  function logItem(e) {
    if (e.el) { setAttr(e.el, 'data-type', e.types.join(' ')); return e.el; } // built once, reused by every rebuild
    const li = h('li', { class: 'lw-log-item', testid: 'log-item', 'data-type': e.types.join(' '), 'data-job': e.job ?? '',
      'data-worker': e.worker ?? '', 'data-id': e.id },
      h('span', { class: 'lw-log-t' }, `t=${fmtT(e.t)} s`), h('span', { class: 'lw-log-text' }, e.text));
    e.el = li;
    return li;
  }

  function renderLog(forceFlush) {
    const list = q('log');
    const sel = document.getSelection();
    // hold still while the learner reads: scrolled down, selecting text, or a panel open
    const holding = !forceFlush && !S.logRebuild && (list.scrollTop > 4 || panelOpen()
      || (sel && !sel.isCollapsed && list.contains(sel.anchorNode)));
    const more = q('log-more');
    if (holding) {
      if (S.logPending) {
        more.hidden = false;
        setText(more, `${S.logPending} new event${S.logPending === 1 ? '' : 's'}: show`);
      }
      return;
    }
    more.hidden = true;
    const f = filters();
    if (S.logRebuild || S.logPending > LOG_SHOW) {
      const items = [];
      // in the past, start from the newest entry at or before the moment (entries are in stream order)
      let from = S.log.length - 1;
      if (S.past) {
        const at = pastAt().id;
        let lo = 0, hi = S.log.length;
        while (lo < hi) { const mid = (lo + hi) >> 1; if (idCmp(S.log[mid].id, at) > 0) hi = mid; else lo = mid + 1; }
        from = lo - 1;
      }
      for (let i = from; i >= 0 && items.length < LOG_SHOW; i--) if (logMatches(S.log[i], f)) items.push(logItem(S.log[i]));
      list.replaceChildren(...items);
      S.logRebuild = false;
    } else if (S.logPending) {
      const fresh = [];
      for (let i = S.log.length - S.logPending; i < S.log.length; i++) if (i >= 0 && logMatches(S.log[i], f)) fresh.push(logItem(S.log[i]));
      list.prepend(...fresh.reverse());
      while (list.children.length > LOG_SHOW) list.lastChild.remove();
    }
    S.logPending = 0;
    q('log-empty').hidden = list.children.length > 0;
  }

  /**
   * A timeout chain, not setInterval: an interval that fired late (a busy main thread) fires its next
   * one on the old schedule, so two announcements could land a fraction of ANNOUNCE_MS apart.
   */
  function announceLoop() {
    flushAnnouncements();
    setTimeout(announceLoop, ANNOUNCE_MS);
  }

  /** One polite announcement per ANNOUNCE_MS at most, summarising what happened. */
  function flushAnnouncements() {
    const qd = S.announceQueue;
    if (!qd.length) return;
    S.announceQueue = [];
    const uniq = [...new Set(qd)];
    const texts = uniq.map((e) => e.text);
    const msg = texts.length <= 3 ? texts.join('. ')
      : `${texts.length} updates. Latest: ${texts.slice(-2).join('. ')}`;
    setText(q('announcer'), `${msg}.`);
  }
}
