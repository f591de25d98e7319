// Predictions, measured (static/js/widget/predict-model.js): when a run has settled, and what it measured.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { attemptsOf, bucketOf, cleanGuess, guardThatActed, measure, shown, spread, whyText } from '../../static/js/widget/predict-model.js';

const RUNS = { id: 'r', kind: 'number', min: 1, max: 20, unit: 'attempts', measure: 'attempts' };
const CHOICE = { id: 'c', kind: 'choice', measure: 'attempts', choices: [['once', 'once'], ['more', 'twice or more']],
  buckets: { once: [1, 1], more: [2, 1000] } };

function model(jobs, workers = [], counts = {}) {
  return { jobs: new Map(jobs.map((j) => [j.id, j])), workers: new Map(workers.map((w) => [w.id, w])), counts };
}

test('a run is measured only once every job is final and no worker still runs one', () => {
  const run = { jobs: ['1'], counts0: {} };
  const running = model([{ id: '1', state: 'running', attempt: 1, attempts: [{}] }]);
  assert.equal(measure(RUNS, running, run), null);
  // done, but a duplicate copy is still on a worker: not settled yet
  const dup = model([{ id: '1', state: 'done', attempt: 2, attempts: [{}, {}] }], [{ id: 'w2', state: 'busy', job_id: '1' }]);
  assert.equal(measure(RUNS, dup, run), null);
  const done = model([{ id: '1', state: 'done', attempt: 2, attempts: [{}, {}] }], [{ id: 'w2', state: 'idle', job_id: null }]);
  assert.deepEqual(measure(RUNS, done, run), { number: 2, value: 2 });
  assert.equal(measure(RUNS, done, { jobs: [] }), null);
});

test('attempts, jobs in a state, and how far a counter moved', () => {
  assert.equal(attemptsOf({ attempt: 3, attempts: [{}] }), 3);
  const S = model([{ id: '1', state: 'dlq' }, { id: '2', state: 'done' }, { id: '3', state: 'dlq' }], [], { emails_sent: 5 });
  const run = { jobs: ['1', '2', '3'], counts0: { emails_sent: 4 } };
  assert.equal(measure({ kind: 'number', measure: 'state:dlq' }, S, run).value, 2);
  assert.equal(measure({ kind: 'number', measure: 'counter:emails_sent' }, S, run).value, 1);
  assert.equal(measure({ kind: 'number', measure: 'nonsense' }, S, run), null);
});

test('a choice is read off the measured number', () => {
  assert.equal(bucketOf(CHOICE, 1), 'once');
  assert.equal(bucketOf(CHOICE, 4), 'more');
  const S = model([{ id: '1', state: 'done', attempt: 1, attempts: [{}] }]);
  assert.deepEqual(measure(CHOICE, S, { jobs: ['1'] }), { number: 1, value: 'once' });
  assert.equal(shown(CHOICE, 'more'), 'twice or more');
});

test('guesses are checked against the question; the why is filled from the lab', () => {
  assert.equal(cleanGuess(RUNS, '3'), 3);
  assert.equal(cleanGuess(RUNS, '0'), null);
  assert.equal(cleanGuess(RUNS, '99'), null);
  assert.equal(cleanGuess(RUNS, ''), null);
  assert.equal(cleanGuess(CHOICE, 'once'), 'once');
  assert.equal(cleanGuess(CHOICE, 'twice'), null);
  assert.equal(shown(RUNS, 1), '1 attempt');
  assert.equal(shown(RUNS, 1200), '1,200 attempts');
  assert.equal(whyText({ why: 'VT {vt_seconds} s, {measured} runs, {nope}' }, { vt_seconds: 1200 }, { number: 3 }),
    'VT 1,200 s, 3 runs, {nope}');
});

test('a class spread lists every choice, or the numbers guessed in order', () => {
  assert.deepEqual(spread(CHOICE, ['more', 'more', 'once']), [['once', 1], ['more', 2]]);
  assert.deepEqual(spread(RUNS, [3, 1, 3, 12]), [['1', 1], ['3', 2], ['12', 1]]);
});

test("chapter 5's why names the guard the run's counters show acting, not the one the settings mention", () => {
  const spec = { id: 'e', kind: 'number', measure: 'counter:emails_sent', why: 'Acted: {guard_that_acted}.' };
  const run = { jobs: ['1'], counts0: { emails_sent: 0, duplicates_blocked: 2, emails_suppressed: 0 } };
  const jobs = [{ id: '1', state: 'done', attempt: 2, attempts: [{}, {}] }];
  const both = { ...model(jobs, [], { emails_sent: 1, duplicates_blocked: 3, emails_suppressed: 0 }),
    settings: { guard: 'claim', notify_guard: true } };
  const m = measure(spec, both, run);
  assert.equal(m.number, 1);
  assert.match(whyText(spec, both.settings, m), /Acted: the claim guard: it blocked the duplicate/);
  const notified = { ...model(jobs, [], { emails_sent: 1, duplicates_blocked: 2, emails_suppressed: 1 }),
    settings: { guard: 'off', notify_guard: true } };
  assert.match(guardThatActed(notified, run), /^the notified guard/);
  const none = { ...model(jobs, [], { emails_sent: 2, duplicates_blocked: 2, emails_suppressed: 0 }),
    settings: { guard: 'off', notify_guard: false } };
  assert.match(guardThatActed(none, run), /^none/);
  assert.equal(measure(RUNS, model(jobs), { jobs: ['1'] }).guard, undefined); // only asked for by a why that names it
});

test('a gap is the simulated seconds from the run\'s first A event to the next B after it', () => {
  const spec = { kind: 'number', measure: 'gap:job.claimed:job.redelivered' };
  const S = model([{ id: '1', state: 'running' }]);
  const events = [{ type: 'job.redelivered', t_sim: 5 }, { type: 'job.claimed', t_sim: 10.2 }];
  assert.equal(measure(spec, S, { jobs: ['1'], events }), null, 'no redelivery after the claim yet');
  events.push({ type: 'job.claimed', t_sim: 400 }, { type: 'job.redelivered', t_sim: 1210.4 });
  assert.deepEqual(measure(spec, S, { jobs: ['1'], events }), { number: 1200, value: 1200 });
});

test('a peak is the most retried calls landing in one simulated second; first tries do not count', () => {
  const S = model([{ id: '1', state: 'done' }]);
  const call = (t, tr) => ({ type: 'storage.called', t_sim: t, data: { try: tr } });
  const events = [call(0.1, 1), call(0.2, 1), call(0.3, 1), call(10.1, 2), call(10.6, 2), call(11.2, 2), call(30, 3)];
  assert.deepEqual(measure({ kind: 'number', measure: 'peak:storage.called' }, S, { jobs: ['1'], events }), { number: 2, value: 2 });
  assert.equal(measure({ kind: 'number', measure: 'peak:storage.called' }, model([{ id: '1', state: 'running' }]),
    { jobs: ['1'], events }), null, 'not before the run has settled');
});

test('runs per tick count the first whole tick after the set-up, once the tick after it has begun', () => {
  const spec = { kind: 'number', measure: 'pertick:cron.run_started' };
  const S = model([]);
  const ev = (type, tick) => ({ type, data: { tick } });
  const events = [ev('cron.run_started', 4), ev('cron.run_started', 5), ev('cron.skipped', 5), ev('cron.run_started', 5)];
  assert.equal(measure(spec, S, { jobs: [], events }), null, 'tick 5 may not be over yet');
  events.push(ev('cron.skipped', 6));
  assert.deepEqual(measure(spec, S, { jobs: [], events }), { number: 2, value: 2 });
});

test('a run the stepper watches settles only once each completion has sent or suppressed its email', () => {
  const S = model([{ id: '1', state: 'done', attempt: 1, attempts: [{}] }], [], { emails_sent: 1 });
  const spec = { kind: 'number', measure: 'counter:emails_sent' };
  const events = [{ type: 'job.succeeded', job_id: '1' }];
  assert.equal(measure(spec, S, { jobs: ['1'], counts0: {}, events }), null);
  events.push({ type: 'email.sent', job_id: '1' });
  assert.deepEqual(measure(spec, S, { jobs: ['1'], counts0: {}, events }), { number: 1, value: 1 });
});

test('a gap needs no job: a leader\'s failover is timed from the kill to the next election', () => {
  const spec = { kind: 'number', measure: 'gap:replica.killed:leader.elected' };
  const events = [{ type: 'leader.elected', t_sim: 100 }, { type: 'replica.killed', t_sim: 101 }];
  assert.equal(measure(spec, model([]), { jobs: [], events }), null, 'no leader elected after the kill yet');
  events.push({ type: 'leader.elected', t_sim: 132.6 });
  assert.deepEqual(measure(spec, model([]), { jobs: [], events }), { number: 32, value: 32 });
});

test('a count of catch-up runs is final once the tick after the first of them has begun', () => {
  const spec = { kind: 'number', measure: 'count:cron.catch_up' };
  const ev = (type, tick) => ({ type, data: { tick } });
  const events = [ev('cron.run_started', 3), ev('cron.catch_up', 7), ev('cron.run_started', 7), ev('cron.skipped', 7)];
  assert.equal(measure(spec, model([]), { jobs: [], events }), null, 'another replica may still catch tick 7 up');
  events.push(ev('cron.run_started', 8));
  assert.deepEqual(measure(spec, model([]), { jobs: [], events }), { number: 1, value: 1 });
  assert.equal(measure(spec, model([]), { jobs: [], events: [ev('cron.run_started', 9)] }), null, 'none yet');
  // counted from the replicas' return: a catch-up before the outage is not this one
  const after = { kind: 'number', measure: 'count:cron.catch_up:scheduler.up' };
  const down = [ev('cron.catch_up', 2), ev('cron.run_started', 3), { type: 'scheduler.up' }, ev('cron.catch_up', 7)];
  assert.equal(measure(after, model([]), { jobs: [], events: down }), null, 'tick 7 is not over yet');
  down.push(ev('cron.skipped', 8));
  assert.deepEqual(measure(after, model([]), { jobs: [], events: down }), { number: 1, value: 1 });
  assert.deepEqual(measure(spec, model([]), { jobs: [], events: down }), { number: 2, value: 2 }, 'without the anchor');
});

test('a scenario run (no events kept) settles only once the counters show an email for each completion', () => {
  const spec = { kind: 'number', measure: 'counter:emails_sent' };
  const run = { jobs: ['1'], counts0: { succeeded: 3, emails_sent: 3 } };
  // the job is done and its copy completed again, one email written so far: not settled (it would say 1, or 0)
  const early = model([{ id: '1', state: 'done', attempt: 2, attempts: [{}, {}] }], [],
    { succeeded: 4, duplicate_completions: 1, emails_sent: 4 });
  assert.equal(measure(spec, early, run), null);
  const later = { ...early, counts: { ...early.counts, emails_sent: 5 } };
  assert.deepEqual(measure(spec, later, run), { number: 2, value: 2 });
  const suppressed = { ...early, counts: { ...early.counts, emails_suppressed: 1 } };
  assert.deepEqual(measure(spec, suppressed, run), { number: 1, value: 1 });
});

// ---- issue 38: the guided steps' figures read off the run's events and its moment -------------------------

test('a gap can ask for the same worker: a booted worker\'s own first claim, not another\'s', () => {
  const spec = { kind: 'number', measure: 'gap:worker.booting:job.claimed:worker_id' };
  const events = [{ type: 'worker.booting', worker_id: 'w5', t_sim: 100 }, { type: 'job.claimed', worker_id: 'w1', t_sim: 120 }];
  assert.equal(measure(spec, model([]), { jobs: [], events }), null, 'w5 has claimed nothing yet');
  events.push({ type: 'job.claimed', worker_id: 'w5', t_sim: 190.4 });
  assert.deepEqual(measure(spec, model([]), { jobs: [], events }), { number: 90, value: 90 });
});

test('counts up to the moment: events, distinct workers, the backlog; nothing before the moment', () => {
  const ev = (type, job, worker, t) => ({ type, job_id: job, worker_id: worker, t_sim: t, data: {} });
  const events = [ev('job.enqueued', '1', null, 0), ev('job.enqueued', '2', null, 1), ev('job.claimed', '1', 'w1', 2),
    ev('job.enqueued', '3', null, 3), ev('job.claimed', '2', 'w1', 4), ev('job.claimed', '3', 'w2', 9)];
  const run = { jobs: [], events };
  assert.equal(measure({ kind: 'number', measure: 'backlog' }, model([]), run), null, 'no moment yet');
  run.moment = events[3];
  assert.deepEqual(measure({ kind: 'number', measure: 'backlog' }, model([]), run), { number: 2, value: 2 });
  assert.deepEqual(measure({ kind: 'number', measure: 'events:job.claimed' }, model([]), run), { number: 1, value: 1 });
  run.moment = events[5];
  assert.deepEqual(measure({ kind: 'number', measure: 'distinct:job.claimed:worker_id' }, model([]), run),
    { number: 2, value: 2 });
  assert.deepEqual(measure({ kind: 'number', measure: 'meanwait:3' }, model([]), run), { number: 4, value: 4 });
  assert.deepEqual(measure({ kind: 'number', measure: 'concurrent:job.enqueued:job.claimed' }, model([]), run),
    { number: 2, value: 2 }, 'two waiting at once at most');
  assert.equal(measure({ kind: 'number', measure: 'meanwait:4' }, model([]), run), null, 'three claimed so far');
});

test('the moment\'s own figure, a spread of N events, a choice read off a count, a panel\'s own row', () => {
  const moment = { type: 'fairness.started', t_sim: 10, data: { wait: 119.6 } };
  assert.deepEqual(measure({ kind: 'number', measure: 'moment:wait' }, model([]), { jobs: [], events: [moment], moment }),
    { number: 120, value: 120 });
  const back = [5, 9, 61].map((t) => ({ type: 'job.redelivered', t_sim: t }));
  assert.equal(measure({ kind: 'number', measure: 'spread:job.redelivered:3' }, model([]), { jobs: [], events: back.slice(0, 2) }), null);
  assert.deepEqual(measure({ kind: 'number', measure: 'spread:job.redelivered:3' }, model([]), { jobs: [], events: back }),
    { number: 56, value: 56 });
  const none = { kind: 'choice', measure: 'events:job.redelivered', buckets: { none: [0, 0], some: [1, 99] } };
  assert.deepEqual(measure(none, model([]), { jobs: [], events: back, moment: back[0] }), { number: 1, value: 'some' });
  const panel = { kind: 'number', measure: 'panel:ch3-row-long:data-mean-ms' };
  assert.equal(measure(panel, model([]), { jobs: [], events: [], panel: () => null }), null, 'the round is not over');
  assert.deepEqual(measure(panel, model([]), { jobs: [], events: [], panel: (id, a) => (id === 'ch3-row-long' && a === 'data-mean-ms' ? 41.7 : null) }),
    { number: 42, value: 42 });
});
