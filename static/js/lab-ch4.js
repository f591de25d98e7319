// Chapter 4 add-on: an outage that hits every in-flight job at once, the retry arrivals it causes
// per policy (measured from the lab's events), the model's peak beside them, breaker and DLQ gauges,
// and a paced DLQ replay. Rides on the live widget's lab (lab-addon.js).

import { makeChart, onLab } from './lab-addon.js';
import { setAttr, setText } from './widget/util.js';

const POLICIES = [['exponential', 'no jitter', ''], ['linear', 'linear', 'la-b'], ['full_jitter', 'full jitter', 'la-c']];
const $ = (id) => document.getElementById(id);
let ctx = null, timer = null, lastPeaks = '';

const chart = makeChart({ title: 'Retry arrivals per bucket after the outage starts', xLabel: 'simulated s after outage',
  yLabel: 'retries', testid: 'ch4-hist' });
$('ch4-charts')?.append(chart.el);

async function refresh() {
  timer = null;
  if (!ctx) return;
  const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}/retries`);
  if (!res.ok) return;
  const d = res.data, w = d.bucket_s;
  const bars = [];
  POLICIES.forEach(([p, label, cls], i) => {
    for (const [b, n] of d.policies[p]?.histogram || []) {
      bars.push({ x0: b + (i * w) / 3, x1: b + ((i + 1) * w) / 3, y: n, cls, label: `${label}: ${n} at ${b}s` });
    }
  });
  const m = d.model;
  const peaks = POLICIES.filter(([p]) => d.policies[p]).map(([p, label]) =>
    `${label}: peak ${d.policies[p].first_wave_peak} of ${d.policies[p].first_wave}`);
  chart.draw({ bars, hlines: m.clients ? [{ y: m.full_jitter_peak_per_bucket, label: 'model: full-jitter mean per bucket' }] : [],
    text: peaks.length ? `First retry wave per ${w} s bucket. ${peaks.join('; ')}.` : 'No retries yet: run the outage.' });
  const text = peaks.length ? `Measured ${peaks.join(', ')}. Model: no jitter puts all ${m.clients} in one bucket; ` +
    `full jitter ≈ ${m.full_jitter_peak_per_bucket.toFixed(2)} per bucket, ${m.jitter_peak_reduction_x.toFixed(0)}× lower.` : '';
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
  const policy = $('ch4-policy').value;
  const set = await api('PATCH', `${base}/settings`, { retry_policy: policy, retry_base: 100, retry_cap: 1000, max_attempts: 10,
    vt_seconds: 7200 });
  if (!set.ok) return status('Could not change the retry policy.');
  const n = set.data?.settings?.workers ?? ctx.snapshot?.settings?.workers ?? 0;
  status(`Starting ${n} long jobs, one per worker…`);
  for (let i = 0; i < n; i += 1) await api('POST', `${base}/jobs`, { job_type: 'thumbnail', duration_s: 3000 });
  for (let tries = 0; tries < 240; tries += 1) {
    const s = await api('GET', base);
    if ((s.data?.counts?.running || 0) >= n) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  const res = await api('POST', `${base}/faults`, { type: 'storage_outage', duration_s: Number($('ch4-outage-s').value) });
  status(res.ok ? `Storage down with ${n} jobs in flight (${policy.replace('_', ' ')}).` : `Outage refused: ${JSON.stringify(res.data?.detail)}`);
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

onLab({
  ready(detail) { ctx = detail; lastPeaks = ''; refresh(); },
  event(ev) { if (/^(job\.(retry_scheduled|dead_lettered|replayed|retry_started)|breaker\.|fault\.)/.test(ev.type)) soon(); },
});
