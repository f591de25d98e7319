// The widget's model without a browser: node --test tests/js/
// A snapshot plus the events after it must give the numbers the lab itself keeps (docs/design.md: model =
// last snapshot ⊕ events after its last_event_id), whatever order reconnects and refreshes bring them in.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  applyModel, applySnapshot, effectiveWorker, emptyModel, ingestEvent, initialSettings, replayEvent, simNow,
  workerCounts,
} from '../../static/js/widget/model.js';
import { filterTimeline, mergeTimelineJob, recentCounts, retryArrivals, workerAttempts } from '../../static/js/widget/timeline-model.js';

// the counters these event types bump, as core/events.py EVENT_TYPES has them (served by /api/meta)
const COUNTERS = {
  'job.enqueued': 'enqueued', 'job.claimed': null, 'lease.extended': 'leases_extended',
  'lease.expired': 'leases_expired', 'job.redelivered': 'redelivered', 'job.progress': null,
  'job.succeeded': 'succeeded', 'job.failed': 'failed', 'job.retry_scheduled': 'retries_scheduled',
  'job.retry_started': null, 'job.dead_lettered': 'dead_lettered', 'job.replayed': 'replayed',
  'job.duplicate_blocked': 'duplicates_blocked', 'job.duplicate_completed': 'duplicate_completions',
  'job.lost': 'lost', 'worker.started': null, 'worker.killed': 'workers_killed', 'worker.died': null,
  'settings.changed': null, 'clock.paused': null, 'clock.resumed': null,
};
const META = {
  events: Object.fromEntries(Object.entries(COUNTERS).map(([t, counter]) => [t, { counter, text: t }])),
  settings: [{ name: 'vt_seconds', default: 30 }, { name: 'guard', default: 'off' }, { name: 'speed', default: 20 }],
  presets: { ch1: { settings: { vt_seconds: 600 } } },
  stream_cap: 20000,
};
const NOW = 1000; // performance.now() in ms: the model reads no clock of its own

function snapshot(over = {}) {
  return {
    last_event_id: '100-0', settings: { vt_seconds: 30, guard: 'off' }, counts: {}, breaker: { state: 'closed' },
    faults: {}, clock: { t: 50, speed: 20, paused: true },
    workers: [{ id: 'w1', state: 'idle', pid: 11 }, { id: 'w2', state: 'idle', pid: 12 }], jobs: [],
    ...over,
  };
}

function fresh(snap = snapshot()) {
  const state = { meta: META, settings: {}, clock: null, lastId: null, events: [], trimmed: false, ...emptyModel() };
  applySnapshot(state, snap, NOW);
  return state;
}

let seq = 100;
const ev = (type, fields = {}) => ({ id: `${++seq}-0`, t_sim: 50 + seq, type, data: {}, ...fields });
const feed = (state, events) => events.map((e) => ingestEvent(state, e, NOW));

/** Job 1: claimed by w1, its lease runs out, redelivered, done by w2 (chapter 1's duplicate). */
function redeliveryStory() {
  seq = 100;
  return [
    ev('job.enqueued', { job_id: '1', attempt: 1, data: { video_id: 'bikes', job_type: 'transcode', duration_s: 600 } }),
    ev('job.claimed', { job_id: '1', attempt: 1, worker_id: 'w1', data: { lease_deadline: 90 } }),
    ev('lease.expired', { job_id: '1', attempt: 1, data: { deadline: 90 } }),
    ev('job.redelivered', { job_id: '1', attempt: 2 }),
    ev('job.claimed', { job_id: '1', attempt: 2, worker_id: 'w2', data: { lease_deadline: 140 } }),
    ev('job.succeeded', { job_id: '1', attempt: 2, worker_id: 'w2' }),
  ];
}

/** Job 2: fails, waits to retry, fails again, dead-lettered. */
function deadLetterStory() {
  seq = 200;
  return [
    ev('job.enqueued', { job_id: '2', attempt: 1, data: { video_id: 'poison' } }),
    ev('job.claimed', { job_id: '2', attempt: 1, worker_id: 'w1' }),
    ev('job.failed', { job_id: '2', attempt: 1, worker_id: 'w1', data: { error: 'storage down' } }),
    ev('job.retry_scheduled', { job_id: '2', attempt: 1, data: { due: 400, delay: 30 } }),
    ev('job.retry_started', { job_id: '2', attempt: 2 }),
    ev('job.claimed', { job_id: '2', attempt: 2, worker_id: 'w1' }),
    ev('job.failed', { job_id: '2', attempt: 2, worker_id: 'w1', data: { error: 'storage down' } }),
    ev('job.dead_lettered', { job_id: '2', attempt: 2, data: { reason: 'max_attempts (2)' } }),
  ];
}

test('each step of a redelivery moves the gauges, the counters, the job and its workers', () => {
  const s = fresh();
  const [enq, claim, expired, redelivered, claim2, done] = redeliveryStory();
  feed(s, [enq]);
  assert.equal(s.counts.queued, 1);
  assert.equal(s.counts.enqueued, 1);
  assert.equal(s.jobs.get('1').state, 'queued');
  feed(s, [claim]);
  assert.deepEqual([s.counts.queued, s.counts.running], [0, 1]);
  assert.equal(s.jobs.get('1').lease_deadline, 90);
  assert.deepEqual(s.workers.get('w1'), { id: 'w1', state: 'busy', pid: 11, job_id: '1', attempt: 1, progress: 0 });
  feed(s, [expired]);
  assert.equal(s.jobs.get('1').lease_deadline, undefined);
  assert.equal(s.counts.leases_expired, 1);
  assert.equal(s.jobs.get('1').state, 'running', 'a lease running out does not by itself move the record');
  feed(s, [redelivered]);
  assert.deepEqual([s.counts.queued, s.counts.running, s.counts.redelivered], [1, 0, 1]);
  assert.equal(s.jobs.get('1').attempt, 2);
  assert.equal(s.workers.get('w1').state, 'busy', 'w1 still runs attempt 1: nobody told it');
  feed(s, [claim2, done]);
  assert.deepEqual([s.counts.queued, s.counts.running, s.counts.done, s.counts.succeeded], [0, 0, 1, 1]);
  assert.equal(s.jobs.get('1').state, 'done');
  assert.equal(s.workers.get('w2').state, 'idle');
  assert.equal(s.workers.get('w1').state, 'busy', "attempt 2's success does not idle attempt 1's worker");
  assert.deepEqual(s.jobs.get('1').attempts.map((a) => [a.attempt, a.worker]), [[1, 'w1'], [2, 'w2']]);
});

test('a failed job waits to retry (counted queued and retrying), then is dead-lettered', () => {
  const s = fresh();
  const story = deadLetterStory();
  feed(s, story.slice(0, 4));
  assert.equal(s.jobs.get('2').state, 'retrying');
  assert.equal(s.jobs.get('2').due, 400);
  assert.equal(s.jobs.get('2').last_error, 'storage down');
  assert.deepEqual([s.counts.queued, s.counts.retrying, s.counts.running], [1, 1, 0]);
  feed(s, story.slice(4, 5));
  assert.deepEqual([s.counts.queued, s.counts.retrying], [1, 0]);
  assert.equal(s.jobs.get('2').due, undefined);
  feed(s, story.slice(5));
  assert.deepEqual([s.counts.queued, s.counts.running, s.counts.dlq, s.counts.dead_lettered], [0, 0, 1, 1]);
  assert.equal(s.counts.failed, 2);
  assert.equal(s.counts.retries_scheduled, 1);
  const j = s.jobs.get('2');
  assert.deepEqual([j.state, j.dlq_reason, j.lease_deadline], ['dlq', 'max_attempts (2)', undefined]);
  assert.equal(s.workers.get('w1').state, 'idle');
});

test('events at or before the snapshot\'s last_event_id are not counted twice', () => {
  const [enq, claim] = redeliveryStory();
  // the snapshot was taken just after the enqueue: its counts already hold it
  const s = fresh(snapshot({
    last_event_id: enq.id, counts: { queued: 1, enqueued: 1 },
    jobs: [{ id: '1', state: 'queued', attempt: 1, attempts: [], outputs: {}, payload: { video_id: 'bikes' } }],
  }));
  const took = feed(s, [enq, claim]);
  assert.deepEqual(took, [{ live: false }, { live: true }]);
  assert.deepEqual([s.counts.enqueued, s.counts.queued, s.counts.running], [1, 0, 1]);
  assert.equal(s.tl.get('1').created, enq.t_sim, 'the timeline still learns from the older event');
  // a reconnect's catch-up repeats events already seen: dropped
  assert.deepEqual(feed(s, [enq, claim]), [null, null]);
  assert.deepEqual([s.counts.enqueued, s.counts.queued, s.counts.running], [1, 0, 1]);
  assert.equal(s.events.length, 2);
});

test('a snapshot older than the events already received gets those events applied on top', () => {
  const story = redeliveryStory();
  const s = fresh();
  feed(s, story); // the live stream ran ahead …
  // … of a refresh answered just after the claim of attempt 1 (its counts hold the first two events)
  applySnapshot(s, snapshot({
    last_event_id: story[1].id, counts: { running: 1, enqueued: 1 },
    workers: [{ id: 'w1', state: 'busy', pid: 11, job_id: '1', attempt: 1 }, { id: 'w2', state: 'idle', pid: 12 }],
    jobs: [{ id: '1', state: 'running', attempt: 1, worker: 'w1', lease_deadline: 90, outputs: {},
      attempts: [{ attempt: 1, worker: 'w1', start: story[1].t_sim, outcome: 'running' }] }],
  }), NOW);
  assert.deepEqual([s.counts.enqueued, s.counts.queued, s.counts.running, s.counts.done], [1, 0, 0, 1]);
  assert.equal(s.counts.redelivered, 1);
  assert.equal(s.jobs.get('1').state, 'done');
  assert.equal(s.jobs.get('1').attempt, 2);
});

test('the timeline records every attempt: worker, lease expiry, how it came back, how it ended', () => {
  const s = fresh();
  const story = redeliveryStory();
  feed(s, story);
  const j = s.tl.get('1');
  assert.equal(j.video, 'bikes');
  assert.deepEqual([...j.workers], ['w1', 'w2']);
  const [a1, a2] = [j.attempts.get(1), j.attempts.get(2)];
  assert.equal(a1.worker, 'w1');
  assert.equal(a1.start, story[1].t_sim);
  assert.equal(a1.deadline, 90);
  assert.equal(a1.expiredAt, story[2].t_sim);
  assert.equal(a1.outcome, 'running', 'attempt 1 never ended: its worker runs on (the duplicate)');
  assert.equal(a2.how, 'redelivered: the lease ran out');
  assert.equal(a2.queuedAt, story[3].t_sim);
  assert.deepEqual([a2.worker, a2.outcome, a2.end], ['w2', 'succeeded', story[5].t_sim]);
  assert.deepEqual(s.redeliveries, [story[3].t_sim]);
  assert.deepEqual(workerAttempts(s.tl, 'w2').map(({ job, a }) => [job, a.n]), [['1', 2]]);
});

test('a killed worker ends its attempt on the timeline; a poison pill is drawn as a crash', () => {
  const s = fresh();
  seq = 300;
  const story = [
    ev('job.enqueued', { job_id: '3', attempt: 1, data: {} }),
    ev('job.claimed', { job_id: '3', attempt: 1, worker_id: 'w1' }),
    ev('worker.killed', { worker_id: 'w1', data: { job_id: '3', pid: 11 } }),
    ev('job.enqueued', { job_id: '4', attempt: 1, data: { poison: true } }),
    ev('job.claimed', { job_id: '4', attempt: 1, worker_id: 'w2' }),
  ];
  const kill = story[2];
  feed(s, story);
  const killed = s.tl.get('3').attempts.get(1);
  assert.deepEqual([killed.outcome, killed.killedAt, killed.end], ['killed', kill.t_sim, kill.t_sim]);
  assert.equal(s.deaths.get('w1'), kill.t_sim);
  assert.equal(s.workers.get('w1').state, 'dead');
  assert.equal(s.counts.workers_killed, 1);
  assert.equal(s.jobs.get('3').state, 'running', 'only the lease brings a killed worker\'s job back');
  assert.equal(s.tl.get('4').attempts.get(1).outcome, 'crashed');
  // the API still says busy; the learner sees the worker idle, and the readout counts it so
  assert.equal(s.workers.get('w2').state, 'busy');
  assert.equal(effectiveWorker(s, s.workers.get('w2')).state, 'idle');
  assert.deepEqual(workerCounts(s), { all: 2, alive: 1, busy: 0 });
});

test('a snapshot fills in attempts the capped stream no longer holds', () => {
  const s = fresh(snapshot({
    jobs: [{ id: '9', state: 'running', attempt: 2, lease_deadline: 700, payload: { video_id: 'a1b2c3d4e5f6' },
      attempts: [{ attempt: 1, worker: 'w1', start: 10, end: 40, outcome: 'refused (stale)' },
        { attempt: 2, worker: 'w2', start: 45, outcome: 'running' }] }],
  }));
  const j = s.tl.get('9');
  assert.equal(j.video, 'uploaded file');
  assert.deepEqual([j.attempts.get(1).outcome, j.attempts.get(1).end], ['refused', 40]);
  assert.deepEqual([j.attempts.get(2).outcome, j.attempts.get(2).deadline], ['running', 700]);
  // merging again (the next refresh) adds nothing twice
  mergeTimelineJob(s, { id: '9', attempt: 2, attempts: [{ attempt: 2, worker: 'w2', start: 45, outcome: 'succeeded', end: 90 }] });
  assert.equal(j.attempts.size, 2);
  assert.deepEqual([j.attempts.get(2).outcome, j.attempts.get(2).end], ['succeeded', 90]);
});

test('a past moment folded from the stream start matches the live model at that event', () => {
  const story = [...redeliveryStory(), ...deadLetterStory()];
  const live = fresh(snapshot({ last_event_id: '0' }));
  feed(live, story);
  const past = { meta: META, ...emptyModel(), settings: initialSettings(META, 'ch1', 20), clock: { t: 0, speed: 20, paused: true, at: NOW } };
  for (const e of story) replayEvent(past, e, NOW);
  assert.deepEqual(past.counts, live.counts);
  assert.deepEqual([...past.jobs.values()].map((j) => [j.id, j.state, j.attempt]),
    [...live.jobs.values()].map((j) => [j.id, j.state, j.attempt]));
  assert.deepEqual(past.settings, { vt_seconds: 600, guard: 'off', speed: 20 });
});

test('settings and clock events move the clock on the simulated timeline', () => {
  const s = fresh(snapshot({ clock: { t: 100, speed: 20, paused: false } }));
  assert.equal(simNow(s.clock, NOW + 1000), 120, 'one real second at 20× is 20 simulated seconds');
  applyModel(s, { id: '900-0', type: 'settings.changed', t_sim: 120, data: { changes: { speed: 100, vt_seconds: 5 } } }, NOW + 1000);
  assert.equal(s.settings.vt_seconds, 5);
  assert.equal(simNow(s.clock, NOW + 2000), 220, 'the new speed counts from the change on');
  applyModel(s, { id: '901-0', type: 'clock.paused', t_sim: 230, data: {} }, NOW + 2000);
  assert.equal(simNow(s.clock, NOW + 9000), 230);
});

test('the event list keeps to the stream cap /api/meta serves', () => {
  const s = fresh(snapshot({ last_event_id: '0' }));
  s.meta = { ...META, stream_cap: 10 };
  for (let i = 1; i <= 511; i++) ingestEvent(s, { id: `${i}-0`, t_sim: i, type: 'clock.resumed', data: {} }, NOW);
  assert.equal(s.events.length, 10);
  assert.equal(s.events[0].id, '502-0');
  assert.equal(s.trimmed, true);
});

test('stream ids compare as numbers, not strings', () => {
  const s = fresh(snapshot({ last_event_id: '9-5' }));
  assert.deepEqual(feed(s, [{ id: '10-0', t_sim: 1, type: 'clock.paused', data: {} }]), [{ live: true }]);
  assert.equal(feed(s, [{ id: '9-9', t_sim: 1, type: 'clock.paused', data: {} }])[0], null);
});

test('redelivery rate, retry arrivals and the timeline filter', () => {
  assert.deepEqual(recentCounts([0, 450, 590, 600, 700], 600, 600, 10), { total: 3, buckets: [0, 0, 0, 0, 0, 0, 0, 1, 0, 2] });
  const burst = retryArrivals([100, 101, 130], [], 2000, 0, 20, 30, 100);
  assert.equal(burst.live, false, 'long after the burst the bars stop at it');
  assert.deepEqual([burst.total, burst.peak, burst.end, burst.from, burst.n], [3, 2, 150, 0, 30]);
  // a second run (an outage at 1000 s) clears the bars: the first run's retries are not summed into them
  const run2 = retryArrivals([100, 101, 130, 1010.5, 1010.9], [1011], 1012, 1000, 1, 60, 240);
  assert.deepEqual([run2.from, run2.storageTotal, run2.jobTotal, run2.peak], [1000, 2, 1, 2]);
  assert.deepEqual([run2.storage[10], run2.job[11]], [2, 1], 'storage-call retries and job retries kept apart');
  // the whole run stays on screen (its busiest bar with it) until it outgrows the most bars, then they move on
  // a whole bar at a time, still aligned to the run's start
  const long = retryArrivals([1010.5, 1150.5], [], 1151, 1000, 1, 60, 240);
  assert.deepEqual([long.from, long.n, long.peak, long.storageTotal], [1000, 151, 1, 2]);
  assert.equal(retryArrivals([1300.5], [], 1300.7, 1000, 1, 60, 240).from, 1061);
  const s = fresh();
  feed(s, [...redeliveryStory(), ...deadLetterStory()]);
  assert.deepEqual([...filterTimeline(s.tl, { worker: 'w2' }).keys()], ['1']);
  assert.deepEqual([...filterTimeline(s.tl, { oneType: 'job.dead_lettered' }).keys()], ['2']);
  assert.equal(filterTimeline(s.tl, {}), s.tl);
});

test('a failed attempt carries its backoff wait until the retry, and storage calls retried inside an attempt count as retry arrivals', () => {
  const s = fresh();
  const story = deadLetterStory();
  feed(s, story);
  const a1 = s.tl.get('2').attempts.get(1);
  assert.deepEqual([a1.backoffFrom, a1.backoffTo], [story[3].t_sim, 400], 'the wait runs from the failure to the due time');
  assert.equal(s.tl.get('2').attempts.get(2).how, 'retry after a failure');
  const before = s.retries.length;
  seq = 500;
  feed(s, [
    ev('storage.called', { job_id: '5', attempt: 1, data: { part: 1, try: 1, ok: true } }),
    ev('storage.called', { job_id: '5', attempt: 1, data: { part: 1, try: 2, ok: false } }),
    ev('storage.called', { job_id: '5', attempt: 1, data: { part: 2, try: 3, ok: true } }),
  ]);
  assert.equal(s.retries.length - before, 2, "a part's first call is not a retry; its second and third are");
});
