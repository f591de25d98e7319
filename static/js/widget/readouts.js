// The readouts: one tile per count (queue depth, active workers, done, redelivered with its rate and
// sparkline, duplicates, lost, DLQ, and the chapter's extras), and chapter 4's retry-arrivals
// histogram (do the retries of an outage arrive as a herd?). Its bar is the lab's `retry_bucket_s` (the server's,
// from the retry settings: a tenth of full jitter's first-retry window), it shows one run (the retries since the
// latest storage outage began), and a race page can hand every lane one y scale (`lab:hist-scale`).

import { fmtNum, fmtT, h, setText } from './util.js';
import { workerCounts } from './model.js';
import { recentCounts, retryArrivals } from './timeline-model.js';

const RATE_WINDOW = 600; // simulated seconds for the redelivery-rate readout
const HIST_MIN_BARS = 60, HIST_MAX_BARS = 300; // bars on screen (a run's whole length between); each is retry_bucket_s wide

export function install(W) {
  const { root, S, els, q } = W;

  function buildReadouts() {
    const box = q('readouts');
    // [id, label, sub, the term (a chapter home's `shows`) the chapter must have introduced]
    const tiles = [
      ['queued', 'Queue depth', 'waiting to be claimed', 'queue'],
      ['active', 'Active workers', 'busy / alive', 'workers'],
      ['done', 'Completed', 'jobs done', 'done'],
      ['redelivered', 'Redelivered', '', 'redelivered'],
      ['duplicates', 'Duplicates blocked', 'stale attempts refused', 'duplicates'],
      ['lost', 'Lost', 'acked early, then crashed', 'lost'],
      ['dlq', 'DLQ depth', 'dead letters', 'dlq'],
    ].filter((t) => S.shows.has(t[3]));
    const main = tiles.length;
    const c = S.controls;
    if (c.has('idempotent_outputs') || c.has('notify_guard')) {
      tiles.push(['outputs', 'Outputs written', 'files'], ['emails', 'Emails sent', 'completion emails'],
        ['dupdone', 'Completed twice', 'copies that ran to the end']);
    }
    if (c.has('retry_policy') || c.has('faults')) {
      tiles.push(['failed', 'Job attempts failed', 'job retries scheduled: 0 · storage calls retried: 0']);
    }
    els.readouts = {};
    // one row: the chapter's extra tiles (outputs, emails, failed attempts) sit beside the main ones, so the
    // pipeline stays on the first screen; a compact widget (race lanes, compare) leaves the extras out
    tiles.forEach(([id, label, sub], i) => {
      const value = h('span', { class: 'lw-ro-value' }, '0');
      const subEl = h('span', { class: 'lw-ro-sub', title: sub }, sub);
      const tile = h('div', { class: `lw-ro lw-ro-${id}${i < main ? '' : ' lw-ro-extra'}`, testid: `readout-${id}`,
        'data-value': '0' },
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
      box.append(tile);
    });
  }

  function setReadout(id, value, display, sub) {
    const r = els.readouts[id];
    if (!r) return;
    setText(r.value, display ?? String(value));
    r.tile.dataset.value = String(value);
    if (sub != null) setText(r.sub, sub);
    if (r.last !== null && r.last !== value && !W.reduceMotion.matches && !S.past) { // a scrub is not news
      r.tile.classList.remove('lw-bump');
      void r.tile.offsetWidth; // restart the highlight
      r.tile.classList.add('lw-bump');
    }
    r.last = value;
  }

  function renderReadouts(now) {
    const c = S.counts;
    const { all, alive, busy } = workerCounts(S);
    setReadout('queued', c.queued || 0, null, c.retrying ? `${c.retrying} waiting to retry` : 'waiting to be claimed');
    setReadout('active', busy, `${busy} / ${alive}`, `busy / alive${all > alive ? ` · ${all - alive} down` : ''}`);
    setReadout('done', c.done || 0);
    setReadout('redelivered', c.redelivered || 0);
    setReadout('duplicates', c.duplicates_blocked || 0);
    setReadout('lost', c.lost || 0);
    setReadout('dlq', c.dlq || 0);
    setReadout('outputs', c.outputs_written || 0);
    setReadout('emails', c.emails_sent || 0, null, `${c.emails_suppressed || 0} suppressed as repeats`);
    // its caption names the claim guard as it is set now (a copy only runs to the end while it is off)
    const guard = (S.settings && S.settings.guard) || 'off';
    setReadout('dupdone', c.duplicate_completions || 0, null,
      guard === 'off' ? 'copies run to the end: guard off' : `guard ${guard} on: copies back off`);
    // job retries (a new attempt) and storage calls a part retried inside its attempt, named apart
    setReadout('failed', c.failed || 0, null,
      `job retries scheduled: ${c.retries_scheduled || 0} · storage calls retried: ${c.storage_retries || 0}`);
    if (els.readouts.lost) els.readouts.lost.tile.dataset.alarm = c.lost ? 'yes' : 'no';
    if (els.readouts.dupdone) els.readouts.dupdone.tile.dataset.alarm = c.duplicate_completions ? 'yes' : 'no';
    if (!els.rate) return;
    // redeliveries in the last RATE_WINDOW simulated seconds, with a 10-bucket sparkline
    const { total: n, buckets } = recentCounts(S.redeliveries, now, RATE_WINDOW, 10);
    setText(els.rate, `${n} in the last ${RATE_WINDOW} s (${fmtNum((n / RATE_WINDOW) * 60)}/min)`);
    els.rate.dataset.value = String(n);
    const peak = Math.max(1, ...buckets);
    els.spark.forEach((b, i) => {
      b.style.height = `${buckets[i] ? 20 + (80 * buckets[i]) / peak : 4}%`;
      b.dataset.n = String(buckets[i]);
    });
  }

  function buildRetryHistogram() {
    const caption = h('p', { class: 'lw-doc', testid: 'retry-hist-caption' });
    const box = h('div', { class: 'lw-hist-bars' });
    const sub = h('small', {});
    const ymax = h('span', { class: 'lw-hist-ymax', testid: 'retry-hist-ymax', 'data-value': '0' }, '0');
    const legend = h('p', { class: 'lw-hist-legend' },
      h('span', { class: 'lw-hist-key lw-hist-key-storage' }), 'storage calls retried inside an attempt ',
      h('span', { class: 'lw-hist-key lw-hist-key-job' }), 'job retries (a new attempt)');
    const panel = h('section', { class: 'lw-panel lw-hist', 'aria-labelledby': 'lw-hist-h', testid: 'retry-histogram' },
      h('h3', { id: 'lw-hist-h' }, 'Retry arrivals ', sub),
      h('div', { class: 'lw-hist-plot', 'aria-hidden': 'true' }, ymax, box),
      legend, caption);
    root.querySelector('.lw-timeline').before(panel);
    els.hist = { panel, box, bars: [], caption, sub, ymax, peak: -1 };
    // a race page hands every lane the tallest bar of all of them: one y scale, so the lanes compare by eye
    root.addEventListener('lab:hist-scale', (e) => { W.histScale = e.detail.max; W.markDirty(); });
  }

  function renderRetryHistogram(now) {
    const size = S.retryBucket || 1;
    const a = retryArrivals(S.retries, S.jobRetries, now, S.runFrom ?? 0, size, HIST_MIN_BARS, HIST_MAX_BARS);
    const { bars, box } = els.hist;
    while (bars.length < a.n) {
      bars.push(h('span', { class: 'lw-hist-bar', 'data-n': '0' }, h('span', { class: 'lw-hist-job' })));
      box.append(bars[bars.length - 1]);
    }
    while (bars.length > a.n) bars.pop().remove();
    if (a.peak !== els.hist.peak) { // tell a race page this lane's tallest bar (it answers with the shared scale)
      els.hist.peak = a.peak;
      root.dispatchEvent(new CustomEvent('lab:hist-peak', { bubbles: true, detail: { peak: a.peak } }));
    }
    const top = Math.max(1, a.peak, W.histScale || 0);
    setText(els.hist.sub, `${fmtNum(size)} s per bar, since the ${S.runFrom != null ? 'outage began' : 'lab started'}`);
    box.dataset.dense = a.n > 100 ? 'yes' : 'no';
    setText(els.hist.ymax, String(top));
    els.hist.ymax.dataset.value = String(top);
    els.hist.panel.dataset.ymax = String(top);
    els.hist.panel.dataset.bucket = String(size);
    els.hist.panel.dataset.from = String(a.from); // the run's bars start here: no earlier run's retries
    bars.forEach((b, i) => {
      const n = a.counts[i];
      b.style.height = n ? `${(100 * n) / top}%` : '2px'; // proportional: a bar twice as tall holds twice as many
      b.dataset.n = String(n);
      b.dataset.job = String(a.job[i]);
      b.firstChild.style.height = n ? `${(100 * a.job[i]) / n}%` : '0';
    });
    const span = a.live ? `Since t=${fmtT(Math.max(0, a.from))} s` : `t=${fmtT(Math.max(0, a.from))}–${fmtT(a.end)} s`;
    setText(els.hist.caption, a.total
      ? `${span}: ${a.storageTotal} storage call${a.storageTotal === 1 ? '' : 's'} retried inside attempts and `
        + `${a.jobTotal} job retr${a.jobTotal === 1 ? 'y' : 'ies'}; the busiest ${fmtNum(size)} s bar took ${a.peak}. `
        + `Policy now: ${String(S.settings.retry_policy).replace('_', ' ')}.`
      : `${span}: no retries (storage calls retried inside a job's attempt, and job retries). `
        + 'Start a storage outage while jobs run, then compare policies.');
  }

  return { buildReadouts, renderReadouts, buildRetryHistogram, renderRetryHistogram };
}
