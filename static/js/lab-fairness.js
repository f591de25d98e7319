// Chapter 6 add-on: drive the per-tier queues of the widget's lab and plot wait percentiles live.
// Waits are measured by the real workers when they start a job; this panel only reads them back.

import { makeChart, onLab } from './lab-addon.js';
import { h, setText } from './widget/util.js';

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
const KEEP = 240;
let cur = null; // {lab, api, gen}
let gen = 0;
let history = [];
let since = null; // the server's last reset (`since`): a reset starts the chart afresh, as its tables do
const chart = makeChart({ title: 'Wait percentiles per tier, live', xLabel: 'lab time (s)',
  yLabel: 'wait (s)', testid: 'ch6-chart' });
$('ch6-charts')?.append(chart.el);

const fmt = (v) => (v == null ? '–' : String(Math.round(v)));

function path(p = '') { return `/api/labs/${cur.lab.id}/fairness${p}`; }

/** `note`: the status line on success, or a function of the answer that makes it. */
async function post(p, body, note) {
  if (!cur) return;
  const res = await cur.api('POST', path(p), body);
  const ok = typeof note === 'function' ? note(res.data) : note;
  setText($('ch6-status'), res.ok ? ok : `Refused: ${res.data?.detail ? JSON.stringify(res.data.detail) : res.status}`);
}

async function patch(changes, note) {
  if (!cur) return;
  const res = await cur.api('PATCH', `/api/labs/${cur.lab.id}/settings`, changes);
  setText($('ch6-status'), res.ok ? note : `Refused: ${JSON.stringify(res.data?.detail ?? res.status)}`);
}

function row(cells, cls) { return h('tr', { class: cls }, cells.map((c, i) => h(i ? 'td' : 'th', i ? {} : { scope: 'row' }, c))); }

function render(d) {
  // what a guided step waits for before it acts: the strategy the server has, and no tier job left over
  const panel = $('lab-ch6');
  panel.dataset.strategy = d.strategy;
  panel.dataset.idle = ['pro', 'free'].every((t) => !d.running[t] && !d.pending[t]) ? 'yes' : 'no';
  const starved = d.pending.free > 0 && d.running.free === 0 && d.running.pro > 0;
  // a walled-off pro pool sits idle while free jobs queue: the cost of a hard reservation
  const walled = ['split', 'separate'].includes(d.strategy);
  const crashes = d.crashes.pro + d.crashes.free;
  const idleReserved = walled && d.pending.free > 0 ? d.pools.pro - d.running.pro : 0;
  $('ch6-tier-rows').replaceChildren(...['pro', 'free'].map((t) => row([
    t, d.pending[t], fmt(d.oldest_wait[t]), d.running[t], d.waits[t].n, d.requeued[t], d.crashes[t], d.dead[t],
    fmt(d.waits[t].p50), fmt(d.waits[t].p95), fmt(d.waits[t].p99),
    fmt(d.used_worker_s[t]), fmt(d.paid_worker_s[t]), `$${d.cost_usd.paid[t].toFixed(4)}`,
  ], t === 'free' && starved ? 'fx-starved' : null)));
  const custs = Object.entries(d.customers).sort((a, b) => (b[1].p95 ?? 0) - (a[1].p95 ?? 0)).slice(0, 12);
  $('ch6-customer-rows').replaceChildren(...custs.map(([c, p]) => row([c, p.n, fmt(p.p50), fmt(p.p95), fmt(p.p99)])));
  if (d.since !== since) history = []; // a guided step's reset, or the button's: this run's lines only
  since = d.since;
  history.push({ t: d.now, pro: d.waits.pro, free: d.waits.free });
  if (history.length > KEEP) history = history.slice(-KEEP);
  const t0 = history[0].t;
  const line = (tier, q) => history.filter((p) => p[tier][q] != null).map((p) => [p.t - t0, p[tier][q]]);
  chart.draw({
    series: [
      { name: 'pro p95', points: line('pro', 'p95'), cls: 'la-c' },
      { name: 'pro p99', points: line('pro', 'p99'), cls: 'la-c', dashed: true },
      { name: 'free p95', points: line('free', 'p95'), cls: 'la-d' },
      { name: 'free p99', points: line('free', 'p99'), cls: 'la-d', dashed: true },
    ],
    text: `Strategy ${d.strategy}. Pro p95 ${fmt(d.waits.pro.p95)} s, free p95 ${fmt(d.waits.free.p95)} s; `
      + `${d.pending.free} free and ${d.pending.pro} pro jobs waiting.${starved ? ' Free is starving: only pro jobs run.' : ''}`
      + (idleReserved > 0 ? ` ${idleReserved} pro-reserved worker${idleReserved > 1 ? 's' : ''} idle while free jobs wait.` : '')
      + (crashes > 0 ? ` Poison jobs took a worker down ${crashes} time${crashes > 1 ? 's' : ''}: ${d.strategy === 'separate'
        ? "only free's own fleet can die" : "any worker can, pro's included"}.` : ''),
  });
  const c = d.cost_usd;
  const ratio = c.pro_paid_to_revenue == null ? 'no pro job finished yet' : `${c.pro_paid_to_revenue.toFixed(3)} of its revenue`;
  setText($('ch6-cost'), `Cost per tier at $${c.model.worker_price_per_hour}/worker-hour: pro paid $${c.paid.pro.toFixed(4)} `
    + `(idle $${c.idle.pro.toFixed(4)}), free paid $${c.paid.free.toFixed(4)} (idle $${c.idle.free.toFixed(4)}). `
    + `Pro capacity cost ${ratio} ($${c.model.pro_revenue_per_job}/pro job); the lesson's 1,000-worker reservation `
    + `costs ${c.model.pro_reservation_cost_to_revenue.toFixed(3)} of pro revenue.`);
  $('lab-ch6').dataset.strategy = d.strategy;
  $('lab-ch6').dataset.started = d.waits.pro.n + d.waits.free.n;
}

async function poll(myGen) {
  // one request at a time: the next poll waits for this response (no stacking on a slow server)
  while (myGen === gen && cur) {
    const res = await cur.api('GET', path());
    if (myGen !== gen) return;
    if (res.ok && res.data) render(res.data);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

function wire() {
  $('ch6-strategy').addEventListener('change', (e) =>
    patch({ fairness: e.target.value }, `Strategy now: ${e.target.selectedOptions[0].textContent}.`));
  $('ch6-traffic').addEventListener('click', (e) => {
    const on = e.target.getAttribute('aria-pressed') !== 'true';
    const rate = on ? Number($('ch6-rate').value) : 0;
    patch({ arrival_rate: rate, pro_share: Number($('ch6-share').value) },
      on ? `Traffic on: ${rate} jobs/s.` : 'Traffic off.');
    e.target.setAttribute('aria-pressed', String(on));
    setText(e.target, on ? 'Stop traffic' : 'Start traffic');
  });
  $('ch6-noisy').addEventListener('click', () => post('/noisy-neighbour', { burst: 60, others: 9 },
    'Customer f0 dropped 60 jobs; nine other free customers submitted one each.'));
  $('ch6-spike-pro').addEventListener('click', () => post('/spike', { tier: 'pro', duration_s: 300 }, 'Pro traffic doubled for 300 s.'));
  $('ch6-spike-free').addEventListener('click', () => post('/spike', { tier: 'free', duration_s: 300 }, 'Free traffic doubled for 300 s.'));
  $('ch6-poison').addEventListener('click', () => post('/poison', { tier: 'free', count: 3 }, (d) =>
    `${d.enqueued} poison free jobs queued: each takes its worker down, comes back, and is dead-lettered after `
    + `${d.crashes_each} crashes. Watch which workers die, and pro's p95.`));
  $('ch6-reset').addEventListener('click', () => { history = []; post('/reset', {}, 'Measurements cleared.'); });
}

if ($('lab-ch6') && onLab({
  ready({ lab, api, snapshot }) {
    cur = { lab, api };
    gen += 1;
    history = [];
    const st = snapshot?.settings || {};
    if (st.fairness) $('ch6-strategy').value = st.fairness;
    poll(gen);
  },
})) wire();
