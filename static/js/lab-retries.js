// Chapter 4 add-on: an outage that fails every in-flight storage call at once, the calls retried to storage
// afterwards, one run per outage (measured from the lab's `storage.called` events), the model's peak beside them,
// breaker and DLQ gauges, and a paced DLQ replay. Rides on the live widget's lab (lab-addon.js).

import { makeChart, onLab } from './lab-addon.js';
import { setAttr, setText } from './widget/util.js';

const POLICY_LABEL = { none: 'no retries', fixed: 'fixed', exponential: 'no jitter', linear: 'linear',
  full_jitter: 'full jitter' };
const RUN_CLASSES = ['la-d', 'la-c', '', 'la-b']; // one colour per run, by its number (the legend names each)
const RUNS_SHOWN = 4;
const $ = (id) => document.getElementById(id);
let ctx = null, timer = null, lastPeaks = '';
let firstCalls = null; // while a run is set up: job id → its parts' first storage calls so far

const chart = makeChart({ title: 'Storage-call retries per bar after each outage starts', xLabel: 'simulated s after outage',
  yLabel: 'retries', testid: 'ch4-hist' });
$('ch4-charts')?.append(chart.el);

async function refresh() {
  timer = null;
  if (!ctx) return;
  // the bar is the server's (the lab's retry settings: a tenth of full jitter's first-retry window)
  const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}/retries`);
  if (!res.ok) return;
  // issue 18: the herd as the storage dependency sees it — every upload-part call retried, per bar. One run per
  // outage, each in its own colour on ONE y scale (never two runs summed into one bar): the lower peak shows lower
  const d = res.data, st = d.storage, w = d.bucket_s;
  const runs = st.runs.map((r, i) => ({ ...r, n: i + 1 })).filter((r) => r.storage_retries || r.job_retries)
    .slice(-RUNS_SHOWN);
  const bars = [];
  runs.forEach((r, i) => {
    const cls = RUN_CLASSES[(r.n - 1) % RUN_CLASSES.length];
    r.cls = cls;
    r.name = `run ${r.n}, ${POLICY_LABEL[r.policy] || r.policy}`;
    for (const [b, n] of r.histogram) {
      bars.push({ x0: b + (i * w) / runs.length, x1: b + ((i + 1) * w) / runs.length, y: n, cls,
        label: `${r.name}: ${n} at ${b} s` });
    }
  });
  setAttr(chart.el, 'data-policies', runs.map((r) => r.policy).join(' '));
  setAttr(chart.el, 'data-peaks', runs.map((r) => r.peak_per_bucket).join(' '));
  setAttr(chart.el, 'data-bucket', String(w));
  const m = st.model;
  const peaks = runs.map((r) => `${r.name}: peak ${r.peak_per_bucket} of ${r.herd} calls failed together (${r.storage_retries} `
    + `storage calls retried, ${r.job_retries} job retries)`);
  chart.draw({ bars, series: runs.map((r) => ({ name: `${r.name}: peak ${r.peak_per_bucket}`, cls: r.cls, points: [] })),
    hlines: st.callers ? [{ y: m.full_jitter_expected_peak, label: 'model: full-jitter tallest bar' }] : [],
    text: peaks.length ? `Storage calls retried inside the jobs' attempts, per ${w} s bar after each outage starts `
      + `(job retries are counted apart). ${peaks.join('; ')}.` : 'No storage-call retries yet: run the outage.' });
  const text = peaks.length ? `Measured ${peaks.join(', ')}. Model: no jitter puts all ${m.no_jitter_peak_per_bucket} in one bar; ` +
    `full jitter ≈ ${m.full_jitter_mean_per_bucket.toFixed(1)} per bar on average, ${m.full_jitter_expected_peak.toFixed(1)} in the ` +
    `tallest (${m.jitter_peak_reduction_x.toFixed(0)}× lower on average).` : '';
  if (text !== lastPeaks) { lastPeaks = text; setText($('ch4-peaks'), text); }
  const br = d.breaker;
  setText($('ch4-breaker'), br.enabled ? `${br.state.replace('_', '-')} (${br.failures}/${br.threshold} failures)` : 'off');
  setAttr($('ch4-breaker'), 'data-state', br.state);
  setText($('ch4-budget'), `${d.budget.max_attempts} attempts` + (d.budget.retry_budget_s ? `, ${d.budget.retry_budget_s} s` : ', no time budget'));
  const q = d.dlq;
  setText($('ch4-dlq-depth'), `${q.depth} (alert at ${q.depth_threshold})${q.depth_alert ? ' ALERT' : ''}`);
  setAttr($('ch4-dlq-depth'), 'data-alert', String(q.depth_alert));
  setText($('ch4-dlq-rate'), `${q.arrivals_per_min}/min (alert at ${q.rate_threshold})${q.rate_alert ? ' ALERT' : ''}`);
  setAttr($('ch4-dlq-rate'), 'data-alert', String(q.rate_alert));
}

const soon = () => { if (!timer) timer = setTimeout(refresh, 400); };
const status = (t) => setText($('ch4-status'), t);

async function runOutage(ev) {
  ev.preventDefault();
  if (!ctx) return;
  const { api, lab } = ctx, base = `/api/labs/${lab.id}`;
  const policy = $('ch4-policy').value;  // the lab's own setting (synced both ways with the widget's control)
  const set = await api('PATCH', `${base}/settings`, { retry_policy: policy, retry_base: 10, retry_cap: 300, max_attempts: 8,
    vt_seconds: 7200 });
  if (!set.ok) return status('Could not change the retry policy.');
  const n = set.data?.settings?.workers ?? ctx.snapshot?.settings?.workers ?? 0;
  const parts = set.data?.settings?.upload_parts ?? 1;
  // the jobs of chapter 4's outage button (its duration, one source); storage goes down once every part of
  // THESE jobs has made its first call (running is not enough: a part whose first call came after the outage
  // began would fail at its own start, outside the herd; and a run still going finishes first, so the outage
  // never lands on the last run's jobs: one run per outage)
  const job = ctx.meta.scenario_buttons.ch4.find((b) => b.id === 'outage').enqueue;
  status(`Starting ${n} jobs, one per worker, ${parts} upload parts each (a run still going finishes first)…`);
  firstCalls = new Map(); // counted from now (a call may arrive before its job's POST answers)
  const mine = [];
  for (let i = 0; i < n; i += 1) mine.push((await api('POST', `${base}/jobs`, job)).data?.job_id);
  const calls = () => mine.reduce((k, id) => k + (firstCalls.get(id) || 0), 0);
  for (let tries = 0; tries < 480 && calls() < n * parts; tries += 1) await new Promise((r) => setTimeout(r, 250));
  const ready = calls() >= n * parts;
  firstCalls = null;
  if (!ready) return status('The jobs never reached storage, so the outage was not started.');
  const res = await api('POST', `${base}/faults`, { type: 'storage_outage', duration_s: Number($('ch4-outage-s').value) });
  status(res.ok ? `Storage down with ${n} jobs in flight, ${n * parts} storage calls (${policy.replace('_', ' ')}).`
    : `Outage refused: ${JSON.stringify(res.data?.detail)}`);
  soon();
}

async function replay(rate) {
  if (!ctx) return;
  const body = { reason: $('ch4-reason').value || undefined };
  if (rate) body.rate = Number($('ch4-rate').value);
  const res = await ctx.api('POST', `/api/labs/${ctx.lab.id}/dlq/replay`, body);
  if (!res.ok) return status(`Replay refused: ${JSON.stringify(res.data?.detail)}`);
  const k = res.data.replayed.length;
  status(rate ? `Replaying ${k} dead letters, ${body.rate} per simulated second.` : `Replayed ${k} dead letters at once.`);
  soon();
}

$('ch4-outage-form')?.addEventListener('submit', runOutage);
$('ch4-replay-form')?.addEventListener('submit', (e) => { e.preventDefault(); replay(true); });
$('ch4-replay-all')?.addEventListener('click', () => replay(false));

/** One retry-policy control: the panel's menu shows the lab's setting, and choosing here sets the lab (the
 * widget's own control follows through the settings event), so the menu never names a policy the lab is not
 * running and never switches it silently at the next run. */
async function syncPolicy() {
  if (!ctx) return;
  const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}`);
  const p = res.ok ? res.data.settings.retry_policy : null;
  if (p && $('ch4-policy') && $('ch4-policy').value !== p) $('ch4-policy').value = p;
}

$('ch4-policy')?.addEventListener('change', async (e) => {
  if (!ctx) return;
  const res = await ctx.api('PATCH', `/api/labs/${ctx.lab.id}/settings`, { retry_policy: e.target.value });
  status(res.ok ? `Retry policy now ${e.target.selectedOptions[0].textContent} (the lab's setting, in the widget too).`
    : 'Could not change the retry policy.');
  if (!res.ok) syncPolicy();
});

onLab({
  ready(detail) { ctx = detail; lastPeaks = ''; refresh(); syncPolicy(); },
  event(ev) {
    if (firstCalls && ev.type === 'storage.called' && Number(ev.data?.try) === 1) {
      firstCalls.set(ev.job_id, (firstCalls.get(ev.job_id) || 0) + 1);
    }
    if (ev.type === 'settings.changed') syncPolicy();
    if (/^(job\.(retry_scheduled|dead_lettered|replayed|retry_started)|storage\.|breaker\.|fault\.)/.test(ev.type)) soon();
  },
});
