// Chapter 7's add-on, on the widget's lab: the scheduler replicas (real processes), who holds the lock
// and the leader lease, runs and emails per tick, measured runs per tick for each strategy, the margins
// clock skew eats, and the shard buckets. Everything is read from GET /api/labs/{lab}/schedule.

import { makeChart, onLab } from './lab-addon.js';
import { h, setAttr, setText } from './widget/util.js';

const root = document.getElementById('ch7-lab');
const q = (role) => root.querySelector(`[data-role="${role}"]`);
const controls = [...root.querySelectorAll('[data-scenario], [data-action]')];
const REFRESH_MS = 1000;

// One click sets up the lesson's cases (each button carries its settings, from chapters/ch7 CRON_STRATEGIES);
// the widget's settings above then fine-tune them.
// What each strategy does, never what it leads to: the guided steps ask that first (issue 28)
const STRATEGY_TEXT = {
  none: 'No lock: each replica fires the entry on its own clock.',
  lock: 'SET NX EX lock: a replica runs the entry only if it can take the lock.',
  heartbeat: 'The run extends its lock every third of its TTL.',
  leader: 'Leader lease: only the replica holding a renewed lease runs the entry; followers watch the lease.',
};

let ctx = null; // {lab, api}
let timer = null;
let inFlight = false;

const fmt = (n, d = 1) => (n == null ? '–' : Number(n).toLocaleString('en-GB', { maximumFractionDigits: d }));
const plural = (n, one, many = `${one}s`) => `${fmt(n)} ${n === 1 ? one : many}`;

const tickChart = makeChart({ title: 'Runs per tick (newest right)', xLabel: 'tick', yLabel: 'runs',
  testid: 'ch7-tick-chart' });
const shardChart = makeChart({ title: 'Users per bucket', xLabel: 'bucket', yLabel: 'users',
  testid: 'ch7-shard-chart' });
q('chart').append(tickChart.el);
q('shard-chart').append(shardChart.el);

function showError(res) {
  const d = (res && res.data) || {};
  const detail = typeof d.detail === 'object' && d.detail ? Object.values(d.detail).join('; ') : d.detail || '';
  setText(q('error'), res && !res.ok ? `${d.error || `HTTP ${res.status}`}: ${detail}` : '');
}

async function act(body) {
  if (!ctx) return;
  const res = await ctx.api('POST', `/api/labs/${ctx.lab.id}/schedule`, body);
  showError(res);
  if (res.ok) render(res.data.schedule);
}

async function scenario(button) {
  if (!ctx) return;
  const res = await ctx.api('PATCH', `/api/labs/${ctx.lab.id}/settings`, JSON.parse(button.dataset.settings));
  showError(res);
  if (res.ok) await act({ action: 'reset' });
}

function renderReplicas(rep) {
  const list = q('replicas');
  const rows = rep.replicas.map((x) => {
    const badges = [];
    if (x.leader) badges.push(h('span', { class: 'ch7-badge ch7-leader' }, 'leader'));
    if (rep.lock.holder === x.id && !rep.lock.expired) badges.push(h('span', { class: 'ch7-badge ch7-holder' }, 'holds the lock'));
    if (x.running_tick != null) badges.push(h('span', { class: 'ch7-badge ch7-running' }, `running tick ${x.running_tick}`));
    const alive = x.state === 'running';
    const kill = h('button', { type: 'button', class: 'lw-btn lw-small', testid: `ch7-kill-${x.id}`,
      disabled: !alive || ctx.lab.viewer, 'aria-label': `Kill replica ${x.id}` }, 'kill');
    kill.addEventListener('click', () => act({ action: 'kill', replica: x.id }));
    return h('li', { class: `ch7-replica ch7-${x.state}`, 'data-state': x.state, testid: `ch7-replica-${x.id}` },
      h('strong', {}, x.id), ' ',
      h('span', { class: 'ch7-state' }, alive ? `pid ${x.pid}` : x.state), ' ',
      h('span', { class: 'ch7-clock' }, `clock +${fmt(x.offset_s)} s`), ' ', ...badges, ' ', kill);
  });
  // rebuild only when something a learner can see changed (never under a focused button)
  const key = JSON.stringify(rep.replicas.map((x) => [x.id, x.state, x.pid, x.offset_s, x.leader, x.running_tick,
    rep.lock.holder === x.id && !rep.lock.expired]));
  if (list.dataset.key !== key && !list.contains(document.activeElement)) {
    list.dataset.key = key;
    list.replaceChildren(...(rows.length ? rows : [h('li', {}, 'no replicas (set Scheduler replicas above)')]));
  }
}

function lockText(view, what, ttlName) {
  if (!view.holder) return `free (${what} ${view.fence ? `taken ${plural(view.fence, 'time')} so far` : 'never taken'})`;
  if (view.expired) return `expired, last held by ${view.holder} (${ttlName} ran out ${fmt(-view.remaining_s)} s ago)`;
  return `${view.holder}, ${fmt(view.remaining_s)} s left on its clock · fence ${view.fence}`;
}

function renderCounts(rep) {
  const t = rep.totals;
  const mine = rep.by_strategy[rep.settings.cron_strategy];
  const vals = { ...t, runs_per_tick: mine ? fmt(mine.runs_per_tick, 2) : '–' };
  for (const td of root.querySelectorAll('[data-c]')) setText(td, String(vals[td.dataset.c] ?? '–'));
  const ticks = rep.ticks.filter((x) => x.tick <= rep.last_complete_tick);
  const bars = ticks.map((x, i) => ({ x0: i, x1: i + 1, y: Math.max(x.runs, 0.05),
    cls: x.runs === 0 ? 'la-b' : x.runs > 1 ? 'la-d' : 'la-c',
    label: `tick ${x.tick}: ${plural(x.runs, 'run')}${x.by.length ? ` by ${x.by.join(', ')}` : ''}`
      + `${x.catch_up ? ', catch-up' : ''}, ${plural(x.emails, 'email')}` }));
  const last = ticks[ticks.length - 1];
  tickChart.draw({ bars, hlines: [{ y: 1, cls: 'la-model', label: 'one run per tick' }], xMax: Math.max(10, ticks.length),
    yMax: Math.max(2, ...ticks.map((x) => x.runs)) + 0.5,
    text: last ? `Last complete tick ${last.tick}: ${plural(last.runs, 'run')}${last.by.length ? ` (${last.by.join(', ')})` : ''}. `
      + `${plural(t.duplicate_runs, 'duplicate run')}, ${plural(t.missed_ticks, 'missed tick')} since the count started.` : 'No complete tick yet.' });
  setAttr(root.querySelector('[data-testid="ch7-tick-chart"]'), 'data-ticks', String(ticks.length));
}

function renderByStrategy(rep) {
  const rows = Object.entries(rep.by_strategy).map(([name, s]) => h('tr', { 'data-strategy': name, testid: `ch7-by-${name}` },
    h('th', { scope: 'row' }, name), h('td', {}, fmt(s.ticks)), h('td', { class: 'ch7-rpt' }, fmt(s.runs_per_tick, 2)),
    h('td', {}, `${s.min_runs}–${s.max_runs}`), h('td', {}, fmt(s.overlaps)), h('td', {}, fmt(s.missed_ticks))));
  const body = q('by-strategy');
  const key = JSON.stringify(rep.by_strategy);
  if (body.dataset.key === key) return;
  body.dataset.key = key;
  body.replaceChildren(...(rows.length ? rows : [h('tr', {}, h('td', { colspan: 6 }, 'no complete tick yet'))]));
}

function renderMargins(rep) {
  const m = rep.margin;
  const line = (name, label, x) => h('li', { 'data-ok': String(x.ok), testid: `ch7-margin-${name}` },
    `${label}: ${fmt(x.timeout_s)} s − ${fmt(x.covers_s)} s ${x.covers} − ${fmt(x.clock_skew_s)} s skew = `,
    h('strong', {}, `${fmt(x.margin_s)} s`), x.ok ? '' : ' — gone: a replica can take it while its holder lives');
  q('margins').replaceChildren(line('lock', 'Lock TTL', m.lock), line('heartbeat', 'Heartbeat lock', m.heartbeat),
    line('leader', 'Leader lease', m.leader), h('li', {}, modelBox));
  // the model's answers stay folded (and stay open once opened: the box is kept across refreshes)
  modelText.textContent = `${fmt(rep.model.no_lock_runs_per_tick)} runs per tick with no lock; a dead leader is replaced `
    + `within ${fmt(rep.model.leader_failover_max_s)} s; a tick counts as missed after ${fmt(rep.model.missed_tick_after_s)} s.`;
}

const modelText = h('span', {});
const modelBox = h('details', { testid: 'ch7-model' }, h('summary', {}, 'The model’s answers (open once you have predicted)'),
  modelText);

function renderShard(rep) {
  const s = rep.shard;
  shardChart.draw({ bars: s.sizes.map((n, i) => ({ x0: i, x1: i + 1, y: n, cls: 'la-c', label: `bucket ${i}: ${n} users` })),
    hlines: [{ y: s.expected, cls: 'la-model', label: 'even spread' }], xMax: s.buckets,
    text: `${fmt(s.users)} users in ${fmt(s.buckets)} buckets by SHA-256: ${Math.min(...s.sizes)}–${Math.max(...s.sizes)} per bucket.` });
  const on = rep.settings.cron_shard;
  setText(q('shard'), `${on ? 'Sharding on: each tick mails its own bucket' : `Sharding off: the day's first tick mails all ${fmt(s.users)} users at once`}. `
    + `χ² = ${fmt(s.chi_square, 2)} on ${s.df} degrees of freedom (0.1 % critical value ${fmt(s.critical_0_1pct, 2)}): `
    + `${s.even ? 'consistent with an even spread' : 'NOT an even spread'}.`);
}

function render(rep) {
  if (!rep) return;
  // the live region says only what changed by the learner's hand; the tick number sits beside it
  setText(q('strategy'), `${STRATEGY_TEXT[rep.settings.cron_strategy] || ''} Tick every ${fmt(rep.settings.cron_interval)} s, `
    + `runs take ${fmt(rep.settings.cron_task_s)} s.`);
  setText(q('now'), `Now tick ${rep.tick} (t = ${fmt(rep.now, 0)} s).`);
  setAttr(q('strategy'), 'data-strategy', rep.settings.cron_strategy);
  renderReplicas(rep);
  // a leader can be killed only while there is one (the API refuses otherwise): the button says so first
  setAttr(root.querySelector('[data-action="kill-leader"]'), 'disabled',
    Boolean(ctx.lab.viewer) || !rep.replicas.some((x) => x.leader));
  setText(q('lock'), lockText(rep.lock, 'the lock was', 'its TTL'));
  setText(q('leader'), rep.settings.cron_strategy === 'leader' || rep.leader.holder ? lockText(rep.leader, 'the lease was', 'the lease') : 'not in use');
  const fo = rep.failovers[0];
  setText(q('failover'), !fo ? 'none yet' : `${fo.from} → ${fo.to}`
    + (fo.gap_s != null ? `: no leader for ${fmt(fo.gap_s)} s after ${fo.from} was killed (lease ${fmt(fo.lease)} s)` : ` (lease taken over from a live ${fo.from})`));
  renderCounts(rep);
  renderByStrategy(rep);
  renderMargins(rep);
  renderShard(rep);
  setAttr(root, 'data-state', 'ready');
}

async function refresh() {
  if (!ctx || inFlight) return; // never stack requests: the next one waits for this answer
  inFlight = true;
  try {
    const res = await ctx.api('GET', `/api/labs/${ctx.lab.id}/schedule`);
    if (res.ok) render(res.data);
  } finally {
    inFlight = false;
  }
}

for (const b of root.querySelectorAll('[data-scenario]')) b.addEventListener('click', () => scenario(b));
const ACTIONS = {
  'kill-holder': { action: 'kill', replica: 'holder' },
  'kill-leader': { action: 'kill', replica: 'leader' },
  slow: { action: 'slow', duration_s: 100 },
  down: { action: 'down', duration_s: 330 },
  reset: { action: 'reset' },
};
for (const b of root.querySelectorAll('[data-action]')) b.addEventListener('click', () => act(ACTIONS[b.dataset.action]));

onLab({
  ready({ lab, api }) {
    ctx = { lab, api };
    for (const b of controls) b.disabled = Boolean(lab.viewer);
    q('replicas').dataset.key = '';
    clearInterval(timer);
    timer = setInterval(refresh, REFRESH_MS);
    refresh();
  },
});
