// The timeline model: one record per job with one entry per attempt (claimed, lease deadline,
// expiry, how it came back, how it ended), folded from every event the stream still holds, history
// included, and filled in from snapshots for attempts the capped stream has lost. Also the rolling
// lists of redelivery and retry times the readouts count. No DOM, no fetch: node imports it.
//
// The state it works on: {tl: Map(job id → record), redeliveries: [t], retries: [t], deaths: Map(worker → t)}.

import { videoLabel } from './util.js';

const KEEP_TIMES = 5000; // redeliveries/retries kept; the oldest 1000 go when full

export function tlJob(state, id) {
  let j = state.tl.get(id);
  if (!j) {
    j = { id, created: null, video: '', attempts: new Map(), types: new Set(), workers: new Set() };
    state.tl.set(id, j);
  }
  return j;
}

export function tlAttempt(j, n) {
  let a = j.attempts.get(n);
  if (!a) { a = { n, outcome: null }; j.attempts.set(n, a); }
  return a;
}

function keepTime(list, t) {
  list.push(t);
  if (list.length > KEEP_TIMES) list.splice(0, 1000);
}

/** Fold one event into the timeline (every event, also those older than the snapshot). */
export function applyTimeline(state, ev) {
  const d = ev.data || {};
  const t = ev.t_sim;
  // retry arrivals, kept apart: a storage call retried inside an attempt (its try 2, 3, …: the herd an outage
  // makes arrives as these while every attempt keeps running), and a job's retry (a new attempt)
  if (ev.type === 'storage.called' && Number(d.try) > 1) keepTime(state.retries, t);
  if (ev.type === 'job.retry_started') keepTime(state.jobRetries, t);
  // a storage outage starts a new run: the retry histogram shows only the retries since (never two runs summed)
  if (ev.type === 'fault.started' && d.fault === 'storage_outage') state.runFrom = t;
  if (ev.type === 'job.redelivered') keepTime(state.redeliveries, t);
  if (ev.type === 'worker.killed' || ev.type === 'worker.died') {
    state.deaths.set(ev.worker_id, t);
    const jobId = ev.job_id ?? d.job_id;
    if (jobId != null && state.tl.has(jobId)) {
      const j = state.tl.get(jobId);
      j.types.add(ev.type);
      const a = [...j.attempts.values()].filter((x) => x.worker === ev.worker_id && x.end == null && x.start != null)
        .sort((x, y) => y.n - x.n)[0];
      if (a) Object.assign(a, { end: t, killedAt: t, deadAt: t, outcome: 'killed' });
    }
    return;
  }
  if (ev.job_id == null) return;
  const j = tlJob(state, ev.job_id);
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
    case 'job.resumed': {
      // the attempt just before ran until the lab was parked (its workers stopped, no lease ran out): it ends there;
      // an earlier one (killed, redelivered) keeps its own end
      const stopped = j.attempts.get(a.n - 1);
      if (stopped && stopped.start != null && (stopped.end == null || stopped.outcome === 'killed')) {
        Object.assign(stopped, { end: stopped.end ?? t, outcome: 'parked' });
      }
      Object.assign(a, { queuedAt: t, how: 'resumed: sent again, its run stopped when the lab was parked' });
      break;
    }
    case 'job.retry_scheduled': if (a) Object.assign(a, { backoffFrom: t, backoffTo: d.due ?? null }); break;
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

const outcomeFromSnapshot = (o) => (!o ? 'running' : o.startsWith('refused') ? 'refused'
  : o === 'succeeded' ? 'succeeded' : o === 'failed' ? 'failed' : o === 'running' ? 'running' : o);

/** Fill the timeline from a snapshot job: attempts the capped stream no longer holds. */
export function mergeTimelineJob(state, sj) {
  const j = tlJob(state, sj.id);
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
      a.outcome = outcomeFromSnapshot(rec.outcome);
    }
    if (j.poison && a.outcome === 'running' && a.start != null) Object.assign(a, { end: a.start, deadAt: a.start, outcome: 'crashed' });
  }
  const cur = j.attempts.get(sj.attempt);
  if (cur && sj.lease_deadline != null && cur.end == null && cur.expiredAt == null) cur.deadline = sj.lease_deadline;
}

/** Every attempt a worker ran, newest first (so also in the past). */
export function workerAttempts(tl, id) {
  const out = [];
  for (const j of tl.values()) {
    for (const a of j.attempts.values()) if (a.worker === id && a.start != null) out.push({ job: j.id, a });
  }
  return out.sort((x, y) => y.a.start - x.a.start);
}

/** The jobs a filter {job, worker, oneType} touches (the event log's filters narrow the timeline). */
export function filterTimeline(tl, f) {
  if (!f.job && !f.worker && !f.oneType) return tl;
  const out = new Map();
  for (const [id, j] of tl) {
    if (f.job && id !== f.job) continue;
    if (f.worker && !j.workers.has(f.worker)) continue;
    if (f.oneType && !j.types.has(f.oneType)) continue;
    out.set(id, j);
  }
  return out;
}

/** Times (sorted, oldest first) in the `window` simulated seconds up to `now`, in `n` equal buckets. */
export function recentCounts(times, now, window, n) {
  const from = now - window;
  const buckets = new Array(n).fill(0);
  let total = 0;
  for (let i = times.length - 1; i >= 0; i--) {
    const t = times[i];
    if (t <= from) break;
    if (t > now + 1) continue;
    total++;
    buckets[Math.min(n - 1, Math.max(0, Math.floor((t - from) / (window / n))))]++;
  }
  return { total, buckets };
}

/**
 * One run's retry arrivals in bars of `size` simulated s: storage-call retries (`retries`) and job retries
 * (`jobRetries`) counted apart, only those since the run began (`runFrom`: the latest storage outage's start, so
 * two runs are never summed into one bar). The bars run from the run's start to now (or, once the retries have
 * stopped, to the last one): the whole run, so its busiest bar is always on screen. At least `minBars` of them;
 * a run longer than `maxBars` shows its latest `maxBars`, moving on a whole bar at a time (so a wave never
 * straddles a moving edge). {storage, job, counts, n, live, from, end, size, peak, total, storageTotal, jobTotal}
 */
export function retryArrivals(retries, jobRetries, now, runFrom, size, minBars, maxBars) {
  const last = Math.max(retries.length ? retries[retries.length - 1] : -Infinity,
    jobRetries.length ? jobRetries[jobRetries.length - 1] : -Infinity);
  const live = last < runFrom || last > now - minBars * size;
  const end = live ? now : last + size;
  const span = Math.max(1, Math.ceil((end - runFrom) / size));
  const n = Math.min(maxBars, Math.max(minBars, span));
  const from = runFrom + Math.max(0, span - n) * size;
  const fold = (times) => {
    const out = new Array(n).fill(0);
    for (let i = times.length - 1; i >= 0 && times[i] >= from; i--) {
      const k = Math.floor((times[i] - from) / size);
      if (k < n) out[k]++;
    }
    return out;
  };
  const storage = fold(retries), job = fold(jobRetries);
  const counts = storage.map((c, i) => c + job[i]);
  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  return { storage, job, counts, n, live, from, end, size, peak: Math.max(...counts), total: sum(counts),
    storageTotal: sum(storage), jobTotal: sum(job) };
}
