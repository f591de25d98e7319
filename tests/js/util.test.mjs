// The widget's DOM-free helpers and the event log's filter, without a browser: node --test tests/js/

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fmtDur, fmtNum, idCmp, narrate, nearestIndex, niceStops, videoLabel } from '../../static/js/widget/util.js';
import { logMatches } from '../../static/js/widget/log.js';

test('stream ids order by time, then sequence', () => {
  assert.ok(idCmp('9-0', '10-0') < 0);
  assert.ok(idCmp('10-2', '10-10') < 0);
  assert.equal(idCmp('5-1', '5-1'), 0);
  assert.ok(idCmp('1-0', null) > 0);
});

test('narration fills the /api/meta template with the event', () => {
  const meta = { events: { 'job.redelivered': { text: 'job {job} visible again: redelivered as attempt {attempt}' },
    'settings.changed': { text: 'settings changed: {changes}' } } };
  assert.equal(narrate({ type: 'job.redelivered', job_id: '7', attempt: 2, t_sim: 1 }, meta, (n) => n),
    'job 7 visible again: redelivered as attempt 2');
  assert.equal(narrate({ type: 'settings.changed', data: { changes: { vt_seconds: 30, heartbeat: true } } }, meta,
    (n) => ({ vt_seconds: 'Visibility timeout' }[n] || n)), 'settings changed: Visibility timeout → 30, heartbeat → on');
});

test('numbers, durations and slider stops as the lab shows them', () => {
  assert.equal(fmtNum(2094.4), '2,094');
  assert.equal(fmtNum(12.46), '12.5');
  assert.equal(fmtDur(3725), '1 h 2 min');
  assert.equal(fmtDur(95), '1 min 35 s');
  const stops = niceStops(5, 3600);
  assert.equal(stops[0], 5);
  assert.equal(stops[stops.length - 1], 3600);
  assert.equal(stops[nearestIndex(stops, 30)], 30);
  assert.equal(videoLabel('0123456789ab'), 'uploaded file');
  assert.equal(videoLabel('bikes'), 'bikes');
});

test('the event log filters: default hides progress ticks, important keeps key moments', () => {
  const tick = { types: ['job.progress'], job: '1', worker: 'w1' };
  const merged = { types: ['lease.expired', 'job.redelivered'], job: '1', worker: null };
  const claim = { types: ['job.claimed'], job: '2', worker: 'w2' };
  const f = (o) => ({ type: 'default', job: '', worker: '', ...o });
  assert.equal(logMatches(tick, f()), false);
  assert.equal(logMatches(tick, f({ type: 'all' })), true);
  assert.equal(logMatches(merged, f({ type: 'important' })), true);
  assert.equal(logMatches(claim, f({ type: 'important' })), false);
  assert.equal(logMatches(merged, f({ type: 'job.redelivered' })), true);
  assert.equal(logMatches(claim, f({ job: '1' })), false);
  assert.equal(logMatches(claim, f({ worker: 'w2' })), true);
});
