// The widget's model of the lab: the last snapshot (GET /api/labs/{lab}) ⊕ every event after its
// last_event_id, so a reload or reconnect rebuilds the same numbers. Jobs and their states, the
// state gauges (queued, running, …), the event counters, workers, the clock, faults and the breaker,
// and (through timeline-model.js) every attempt of every job.
//
// No DOM, no fetch and no clock reads: real time comes in as `now` (performance.now() milliseconds),
// so node imports this file (tests/js/). The functions update the state they are given in place, as
// a seek folds thousands of events into maps of hundreds of jobs. The state is the widget's S:
// {meta (from /api/meta), settings, clock, counts, workers, jobs, breaker, faults, faultUntil,
//  snapId, lastId, events, trimmed, tl, redeliveries, retries, deaths}.

import { idCmp } from './util.js';
import { applyTimeline, mergeTimelineJob } from './timeline-model.js';

/** Job states counted as gauges (up and down) rather than as event counters. */
export const GAUGES = new Set(['queued', 'running', 'retrying', 'done', 'dlq', 'lost']);

/** The folded part of the model, empty: what a fresh lab, or the start of the stream, looks like. */
export function emptyModel() {
  return {
    counts: {}, workers: new Map(), jobs: new Map(), breaker: { state: 'closed' }, faults: {}, faultUntil: {},
    snapId: null, tl: new Map(), redeliveries: [], retries: [], jobRetries: [], runFrom: null, deaths: new Map(),
  };
}

/** The settings a lab of this preset starts with: schema defaults, then the preset's own. */
export function initialSettings(meta, preset, speed) {
  const out = {};
  for (const spec of meta.settings) out[spec.name] = spec.default;
  return { ...out, ...((meta.presets[preset] || {}).settings || {}), speed };
}

/** Simulated seconds now on this clock ({t, speed, paused, at}: t was read at real time `at`). */
export function simNow(clock, now) {
  if (!clock) return 0;
  if (clock.paused) return clock.t;
  return clock.t + ((now - clock.at) / 1000) * clock.speed;
}

/** Index of the first event after `id` in stream order. */
export function firstAfter(events, id) {
  let lo = 0, hi = events.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (idCmp(events[mid].id, id) > 0) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/**
 * Take a snapshot: its counts, jobs, workers and settings replace the model's, its jobs fill the
 * timeline, and events already received after its last_event_id are applied on top of it.
 */
export function applySnapshot(state, snap, now) {
  state.snapId = snap.last_event_id || '0';
  if (snap.events_trimmed > 0) state.trimmed = true; // the server's stream lost its oldest events
  state.settings = { ...snap.settings };
  state.retryBucket = snap.retry_bucket_s; // the retry histogram's bar (core/backoff.py retry_bucket_s)
  state.counts = { ...snap.counts };
  state.breaker = snap.breaker || { state: 'closed' };
  state.faults = snap.faults || {};
  for (const [k, v] of Object.entries(state.faults)) {
    if (k.endsWith('_until')) state.faultUntil[k.slice(0, -6)] = Number(v);
  }
  const c = snap.clock;
  const local = simNow(state.clock, now);
  if (!state.clock || c.paused !== state.clock.paused || c.speed !== state.clock.speed
      || Math.abs(local - c.t) > Math.max(2, c.speed * 0.5)) {
    state.clock = { t: c.t, speed: c.speed, paused: c.paused, at: now };
  }
  // issue 18, honest clock: the lab says when real work holds its clock under the asked speed
  state.slowed = c.slowed ? { running: c.effective, reason: c.slowed_reason } : null;
  state.workers = new Map(snap.workers.map((w) => [w.id, { ...w }]));
  state.jobs = new Map(snap.jobs.map((j) => [j.id, { ...j }]));
  for (const j of snap.jobs) mergeTimelineJob(state, j);
  // events the snapshot did not include yet
  if (state.lastId && idCmp(state.lastId, state.snapId) > 0) {
    for (let i = firstAfter(state.events, state.snapId); i < state.events.length; i++) applyModel(state, state.events[i], now);
  }
}

/**
 * Take one event from the stream, in order. Ids at or below the last seen are dropped (null): a
 * reconnect's catch-up repeats some. Every event feeds the timeline; only those after the snapshot
 * move the model, since the snapshot's counts already include the rest. Returns {live}.
 */
export function ingestEvent(state, ev, now) {
  if (state.lastId && idCmp(ev.id, state.lastId) <= 0) return null;
  state.lastId = ev.id;
  state.events.push(ev);
  const cap = state.meta.stream_cap; // the server's stream holds no more than this either
  if (state.events.length > cap + 500) {
    state.events.splice(0, state.events.length - cap);
    state.trimmed = true;
  }
  const live = !state.snapId || idCmp(ev.id, state.snapId) > 0;
  applyTimeline(state, ev);
  if (live) applyModel(state, ev, now);
  return { live };
}

/** Fold one event into a model rebuilt from the stream's start (a past moment: history.js). */
export function replayEvent(state, ev, now) {
  applyTimeline(state, ev);
  applyModel(state, ev, now);
  if (ev.type === 'lab.branched' && ev.data && ev.data.settings) state.settings = { ...ev.data.settings };
}

function gauge(state, st, d) {
  if (!st) return;
  if (st === 'retrying') {
    state.counts.retrying = (state.counts.retrying || 0) + d;
    state.counts.queued = (state.counts.queued || 0) + d;
  } else if (GAUGES.has(st)) {
    state.counts[st] = (state.counts[st] || 0) + d;
  }
}

/** Move a job to a new state, keeping the gauges in step (a retrying job is also counted queued). */
export function setJobState(state, job, st) {
  if (!job || job.state === st) return;
  gauge(state, job.state, -1);
  gauge(state, st, 1);
  job.state = st;
}

function workerIdle(state, ev) {
  const w = state.workers.get(ev.worker_id);
  if (w && w.state === 'busy' && w.job_id === ev.job_id && (w.attempt == null || w.attempt === ev.attempt)) {
    Object.assign(w, { state: 'idle', job_id: null, attempt: null, progress: null });
  }
}

/** Apply one event to the snapshot-derived model (jobs, workers, counts, clock, faults, breaker). */
export function applyModel(state, ev, now) {
  const d = ev.data || {};
  const spec = state.meta.events[ev.type];
  const counter = spec && spec.counter;
  if (counter && !GAUGES.has(counter)) state.counts[counter] = (state.counts[counter] || 0) + 1;
  // a storage call retried inside its attempt: counted apart from the job retries (core/stream.py STORAGE_RETRIES)
  if (ev.type === 'storage.called' && Number((ev.data || {}).try) > 1) {
    state.counts.storage_retries = (state.counts.storage_retries || 0) + 1;
  }
  const job = ev.job_id != null ? state.jobs.get(ev.job_id) : null;
  const t = ev.t_sim;
  if (state.clock && !state.clock.paused && typeof t === 'number' && t > simNow(state.clock, now) + 1) {
    state.clock = { ...state.clock, t, at: now };
  }
  if (ev.type === 'clock.slowed') state.slowed = { running: d.running, reason: d.reason };
  if (ev.type === 'clock.caught_up') state.slowed = null;
  const worker = () => state.workers.get(ev.worker_id);
  switch (ev.type) {
    case 'job.enqueued': {
      if (!state.jobs.has(ev.job_id)) {
        const j = { id: ev.job_id, state: null, attempt: 1, attempts: [], outputs: {}, created_at: t,
          payload: { video_id: d.video_id, job_type: d.job_type, duration_s: d.duration_s } };
        state.jobs.set(ev.job_id, j);
        setJobState(state, j, 'queued');
      }
      break;
    }
    case 'job.claimed': {
      if (job) {
        setJobState(state, job, 'running');
        Object.assign(job, { attempt: ev.attempt, worker: ev.worker_id, lease_deadline: d.lease_deadline ?? undefined });
        if (!job.attempts.some((a) => a.attempt === ev.attempt)) {
          job.attempts.push({ attempt: ev.attempt, worker: ev.worker_id, start: t, outcome: 'running' });
        }
      }
      const w = worker();
      if (w) Object.assign(w, { state: 'busy', job_id: ev.job_id, attempt: ev.attempt, progress: 0 });
      break;
    }
    case 'lease.extended': if (job) job.lease_deadline = d.deadline; break;
    case 'lease.expired': if (job) delete job.lease_deadline; break;
    case 'job.redelivered': case 'job.resumed': case 'job.retry_started': case 'job.replayed':
      if (job) { setJobState(state, job, 'queued'); job.attempt = ev.attempt ?? job.attempt; delete job.due; }
      break;
    case 'job.progress': {
      const w = worker();
      if (w && w.job_id === ev.job_id) w.progress = d.percent;
      break;
    }
    case 'job.succeeded': case 'job.duplicate_completed':
      if (job) { setJobState(state, job, 'done'); delete job.lease_deadline; }
      workerIdle(state, ev);
      break;
    case 'job.failed':
      if (job) { job.last_error = d.error; delete job.lease_deadline; }
      workerIdle(state, ev);
      break;
    case 'job.duplicate_blocked': workerIdle(state, ev); break;
    case 'job.retry_scheduled': if (job) { setJobState(state, job, 'retrying'); job.due = d.due; } break;
    case 'job.dead_lettered':
      if (job) { setJobState(state, job, 'dlq'); job.dlq_reason = d.reason; delete job.lease_deadline; }
      break;
    case 'job.lost': if (job) setJobState(state, job, 'lost'); break;
    case 'worker.started':
      state.workers.set(ev.worker_id, { ...(worker() || {}), id: ev.worker_id, state: 'idle',
        pid: d.pid, job_id: null, attempt: null, progress: null, fleet: d.fleet || null });
      break;
    case 'worker.killed': case 'worker.died': {
      const w = worker();
      if (w) Object.assign(w, { state: 'dead', pid: null, job_id: null, attempt: null, progress: null });
      break;
    }
    case 'worker.respawning': { const w = worker(); if (w) w.state = 'respawning'; break; }
    case 'worker.booting':
      state.workers.set(ev.worker_id, { id: ev.worker_id, state: 'booting', pid: null, job_id: null, bootLag: d.lag });
      break;
    case 'worker.draining': { const w = worker(); if (w) w.state = 'draining'; break; }
    case 'worker.rewiring': {
      const w = worker();
      if (w) Object.assign(w, { state: 'rewiring', serves: d.fleet });
      break;
    }
    case 'worker.stopped': state.workers.delete(ev.worker_id); break;
    case 'settings.changed':
      if (d.changes) {
        if ('speed' in d.changes && state.clock) {
          state.clock = { ...state.clock, t: simNow(state.clock, now), at: now, speed: d.changes.speed };
        }
        state.settings = { ...state.settings, ...d.changes };
        if (d.retry_bucket_s) state.retryBucket = d.retry_bucket_s;
      }
      break;
    case 'clock.paused': case 'clock.stepped':
      state.clock = { ...state.clock, t, paused: true, at: now };
      break;
    case 'clock.resumed':
      state.clock = { ...state.clock, t, paused: false, at: now };
      break;
    case 'fault.started':
      if (d.duration) state.faultUntil[d.fault] = t + d.duration;
      break;
    case 'fault.ended': delete state.faultUntil[d.fault]; break;
    case 'breaker.opened': state.breaker = { state: 'open', opened_at: t }; break;
    case 'breaker.half_open': state.breaker = { ...state.breaker, state: 'half_open' }; break;
    case 'breaker.closed': state.breaker = { state: 'closed' }; break;
    default: break;
  }
}

/** The API keeps a worker 'busy' after a poison pill kills its work horse; it is idle really. */
export function crashedOnPoison(state, w) {
  if (w.state !== 'busy' || w.job_id == null) return false;
  const tj = state.tl.get(w.job_id);
  const a = tj && tj.attempts.get(w.attempt);
  return !!(a && a.outcome === 'crashed');
}

/** A worker as the learner should see it (idle, not busy, once its poison job crashed its horse). */
export function effectiveWorker(state, w) {
  return crashedOnPoison(state, w) ? { ...w, state: 'idle', crashedJob: w.job_id } : w;
}

/** Busy, alive and all workers, as the "Active workers" readout counts them. */
export function workerCounts(state) {
  const ws = [...state.workers.values()].map((w) => effectiveWorker(state, w));
  return {
    all: ws.length,
    alive: ws.filter((w) => !['dead', 'respawning', 'booting'].includes(w.state)).length,
    busy: ws.filter((w) => w.state === 'busy').length,
  };
}
