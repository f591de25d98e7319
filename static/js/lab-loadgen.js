// Chapter 2's add-on: drive the load generator on the widget's lab and plot what the real run
// measures (jobs in flight L, queue wait, utilisation ρ) beside Little's law and the numbers model.
// Everything shown comes from GET /api/labs/{lab}/loadgen, which reads the real jobs' records.

import { onLab, makeChart } from './lab-addon.js';
import { h, setAttr, setText, fmtNum } from './widget/util.js';

const root = document.getElementById('ch2-lab');
const POLL_MS = 1000;
const MAX_POINTS = 400;
const q = (role) => root.querySelector(`[data-role="${role}"]`);

let ctx = null; // {lab, api}
let timer = null;
let busy = false;
let series = null;
let lastSummary = 0;

const charts = {
  L: makeChart({ title: 'Jobs in flight L(t)', xLabel: 'simulated s', yLabel: 'jobs', testid: 'ch2-chart-L' }),
  wait: makeChart({ title: 'Queue wait (mean, last 600 s)', xLabel: 'simulated s', yLabel: 's', testid: 'ch2-chart-wait' }),
  rho: makeChart({ title: 'Utilisation ρ(t): busy ÷ workers', xLabel: 'simulated s', yLabel: 'ρ', testid: 'ch2-chart-rho' }),
};
q('charts').append(charts.L.el, charts.wait.el, charts.rho.el);

function reset() {
  series = { L: [], lw: [], wait: [], rho: [], backlog: [] };
}
reset();

const fmt = (v, unit = '') => (v == null ? '–' : `${fmtNum(v)}${unit}`);
const fmtRate = (v) => (v == null ? '–' : `${(Math.round(v * 1000) / 1000).toString()}/s`);
const fmtRho = (v) => (v == null ? '∞ (≥ 1)' : (Math.round(v * 100) / 100).toFixed(2));

async function call(method, body) {
  if (!ctx) return null;
  const res = await ctx.api(method, `/api/labs/${ctx.lab.id}/loadgen`, body);
  if (!res.ok) {
    const d = res.data || {};
    const detail = typeof d.detail === 'object' && d.detail ? Object.values(d.detail).join('; ') : d.detail;
    setText(q('error'), `${d.error || `HTTP ${res.status}`}${detail ? `: ${detail}` : ''}`);
    return null;
  }
  setText(q('error'), '');
  return res.data;
}

async function poll() {
  if (busy || !ctx) return;
  busy = true;
  try {
    const data = await call('GET');
    if (data) render(data);
  } finally {
    busy = false;
  }
}

function push(arr, pt) {
  if (arr.length && arr[arr.length - 1][0] >= pt[0]) return;
  arr.push(pt);
  if (arr.length > MAX_POINTS) arr.shift();
}

function render(d) {
  const { state, now, measured: m, model: x, ordering, autoscale } = d;
  root.dataset.state = state.on ? 'running' : 'stopped';
  root.dataset.generated = state.generated;
  const ro = ctx.lab.viewer;
  q('start').textContent = state.on ? 'Apply λ' : 'Start load';
  q('start').disabled = ro;
  q('stop').disabled = ro || !state.on;
  q('mix').disabled = ro || state.on;  // the mix is chosen on start
  if (state.on) q('mix').value = state.mix;
  q('peak').disabled = ro || !state.on;
  setAttr(q('peak'), 'aria-pressed', state.peak ? 'true' : 'false');
  setText(q('rate-hint'), state.on
    ? `running at λ = ${fmtRate(state.effective_rate)}${state.peak ? ` (peak ${state.peak_factor}× of ${fmtRate(state.rate)})` : ''}; ${state.generated} jobs generated${state.shed ? `, ${state.shed} shed at the ${state.max_in_flight}-in-flight bound` : ''}`
    : `for ρ = 0.8 on ${x.workers} workers: λ = ${fmtRate(0.8 * x.workers / x.W)}`);

  const t = now.t;
  if (state.on || now.in_flight) {
    push(series.L, [t, now.in_flight]);
    if (now.shed) push(series.backlog, [t, now.backlog]);  // past the lab's bound: shed arrivals still count
    if (m.lambda_W != null) push(series.lw, [t, m.lambda_W]);
    if (m.queue_wait != null) push(series.wait, [t, m.queue_wait]);
    if (now.workers) push(series.rho, [t, now.busy / now.workers]);
  }
  const x0 = series.L.length ? series.L[0][0] : t;
  const shift = (pts) => pts.map(([a, b]) => [a - x0, b]);
  const waitModel = x.mmc_wait;
  charts.L.draw({
    series: [{ name: 'measured L(t)', points: shift(series.L) }, { name: 'λ × W measured', points: shift(series.lw), cls: 'la-b' },
      ...(series.backlog.length ? [{ name: 'in flight + shed arrivals (an unbounded queue)', points: shift(series.backlog), cls: 'la-c' }] : [])],
    hlines: x.rho != null ? [{ y: x.L, label: `model L = λW = ${fmt(x.L)}` }] : [],
    text: `Now ${now.in_flight} jobs in flight; time-averaged L ${fmt(m.L)} vs λW ${fmt(m.lambda_W)}; model ${fmt(x.L)}.${now.shed ? ` The lab holds at most ${state.max_in_flight} jobs; ${now.shed} more arrivals were shed (counted, not run), so a real, unbounded queue would now hold ${now.backlog} and still be growing.` : ''}`,
  });
  charts.wait.draw({
    series: [{ name: 'measured queue wait', points: shift(series.wait), cls: 'la-c' }],
    hlines: waitModel != null ? [{ y: waitModel, label: `model (Erlang C) ${fmt(waitModel, ' s')}` }] : [],
    text: `Mean queue wait ${fmt(m.queue_wait, ' s')}; model ${waitModel == null ? 'unbounded (ρ ≥ 1)' : fmt(waitModel, ' s')}; lesson's W/(1−ρ) ${x.approx_wait == null ? '∞' : fmt(x.approx_wait, ' s')}.`,
  });
  charts.rho.draw({
    series: [{ name: 'busy ÷ workers', points: shift(series.rho), cls: 'la-d' }],
    hlines: [{ y: 1, label: 'ρ = 1' }, ...(x.rho != null && x.rho < 1 ? [{ y: x.rho, cls: 'la-b', label: `model ρ = ${fmtRho(x.rho)}` }] : [])],
    yMax: 1.1,
    text: `Utilisation over the window ${fmtRho(m.rho)}; model ρ = λW/c = ${fmtRho(x.rho)}.`,
  });

  const cells = {
    lambda: [fmtRate(m.lambda), fmtRate(x.lambda)], L: [fmt(m.L), fmt(x.L)], lambda_W: [fmt(m.lambda_W), ''],
    W_done: [fmt(m.W_done, ' s'), fmt(x.W, ' s')], queue_wait: [fmt(m.queue_wait, ' s'), x.mmc_wait == null ? '∞' : `${fmt(x.mmc_wait, ' s')} (Erlang C) · ${x.approx_wait == null ? '∞' : fmt(x.approx_wait, ' s')} (W/(1−ρ))`],
    rho: [fmtRho(m.rho), fmtRho(x.rho)],
  };
  for (const [k, [mv]] of Object.entries(cells)) setText(root.querySelector(`[data-m="${k}"]`), mv);
  setText(root.querySelector('[data-x="lambda"]'), cells.lambda[1]);
  setText(root.querySelector('[data-x="L"]'), cells.L[1]);
  setText(root.querySelector('[data-x="L2"]'), `${fmt(x.L)} (= ${fmtRate(x.lambda)} × ${fmt(x.W)} s)`);
  setText(root.querySelector('[data-x="W"]'), cells.W_done[1]);
  setText(root.querySelector('[data-x="wait"]'), cells.queue_wait[1]);
  setText(root.querySelector('[data-x="rho"]'), cells.rho[1]);

  // the spoken summary changes at most every 10 s, so a screen reader is not flooded
  const key = `${state.on}:${m.arrivals > 0}`;
  if (Date.now() - lastSummary > 10000 || !state.on || root.dataset.spoken !== key) {
    root.dataset.spoken = key;
    lastSummary = Date.now();
    setText(q('summary'), m.arrivals
      ? `${m.arrivals} arrivals measured: L = ${fmt(m.L)} jobs in flight, λW = ${fmt(m.lambda_W)}. ${x.rho == null || x.rho >= 1 ? 'The pool is past ρ = 1: the queue grows without bound.' : `Model ρ = ${fmtRho(x.rho)}, suggested pool for ρ ≤ 0.8: ${x.workers_for_target}.`}`
      : (state.on ? 'Load running: waiting for the first arrivals…' : 'Start the load to measure L, λ and W on the real workers.'));
  }

  setText(q('autoscale'), autoscale.on
    ? `On: target drain ${fmt(autoscale.target_wait, ' s')}, floor ${autoscale.floor}, boot lag ${fmt(autoscale.boot_lag, ' s')}.`
    : 'Off (switch it on in the widget’s settings).');
  setText(q('pool'), `Pool: ${now.workers} running, ${now.busy} busy, ${now.booting} booting, ${now.draining} draining; queue ${now.queued}.`);

  const box = root.querySelector('[data-testid="ch2-ordering"]');
  box.dataset.ok = String(ordering.ok);
  const rel = (a, b) => (a < b ? '<' : '≥');
  const ex = ordering.exec_timeout;
  setText(q('order-line'), `exec timeout ${ex ? `${fmt(ex, ' s')} ${rel(ex, ordering.vt_seconds)}` : 'none ·'} VT ${fmt(ordering.vt_seconds, ' s')} ${rel(ordering.vt_seconds, ordering.lock_ttl)} lock TTL ${fmt(ordering.lock_ttl, ' s')} (slowest job p99 ${fmt(ordering.p99, ' s')})`);
  const list = q('order-checks');
  const okKey = ordering.checks.map((c) => c.ok).join();
  if (list.dataset.key !== okKey) {
    list.dataset.key = okKey;
    list.replaceChildren(...ordering.checks.map((c) => h('li', { 'data-ok': String(c.ok) },
      c.ok ? c.rule : `${c.rule} violated: ${c.detail}`)));
    setAttr(list, 'role', ordering.ok ? null : 'alert');
  }
}

q('form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const rate = Number(root.querySelector('#ch2-rate').value);
  const on = root.dataset.state === 'running';
  const data = await call('POST', on ? { action: 'rate', rate } : { action: 'start', rate, seed: 1, mix: q('mix').value });
  if (data) {
    if (!on) reset();
    render(data);
  }
});
q('stop').addEventListener('click', async () => { const d = await call('POST', { action: 'stop' }); if (d) render(d); });
q('peak').addEventListener('click', async () => {
  const pressed = q('peak').getAttribute('aria-pressed') === 'true';
  const d = await call('POST', { action: pressed ? 'unpeak' : 'peak' });
  if (d) render(d);
});

onLab({
  ready({ lab, api }) {
    ctx = { lab, api };
    reset();
    root.dataset.labId = lab.id;
    if (lab.viewer) root.querySelector('#ch2-rate').disabled = true;
    if (!timer) timer = setInterval(poll, POLL_MS);
    poll();
  },
});
