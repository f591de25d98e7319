// The worker cards: one per worker process (state, pid, progress, fleet, a stale duplicate's
// warning), keyed so focus survives updates; a click SIGKILLs a busy worker, "inspect" opens its
// internals (inspect.js).

import { fmtDur, h, setAttr, setText } from './util.js';
import { effectiveWorker } from './model.js';

const KILLABLE = ['busy', 'idle', 'draining', 'rewiring']; // worker states with a live process to SIGKILL

export function install(W) {
  const { S, q } = W;
  const workerEls = new Map();

  function workerLabel(w, now) {
    switch (w.state) {
      case 'busy': return `busy: job ${w.job_id} · attempt ${w.attempt ?? '?'}`;
      case 'idle': return w.crashedJob != null ? `idle: poison job ${w.crashedJob} crashed its work horse` : 'idle: waiting for work';
      case 'dead': {
        const died = S.deaths.get(w.id);
        const left = died != null ? died + (S.settings.respawn_delay || 0) - now : null;
        return left != null && left > 0 ? `dead: respawns in ~${fmtDur(left)}` : 'dead: respawning soon';
      }
      case 'respawning': return 'respawning: new process starting';
      case 'booting': return `booting: takes jobs after its ${fmtDur(w.bootLag ?? S.settings.boot_lag)} boot lag`;
      case 'draining': return 'draining: finishes its job, takes no more';
      case 'rewiring': return `restarting: finishes its job, then serves ${w.serves ?? 'its new fleet'}`;
      default: return w.state;
    }
  }

  function renderWorkers(now) {
    const list = q('workers');
    const canKill = S.controls.has('kill') && !S.lab.viewer;
    const seen = new Set();
    const ordered = [...S.workers.values()].map((w) => effectiveWorker(S, w))
      .sort((a, b) => Number(a.id.slice(1)) - Number(b.id.slice(1)));
    ordered.forEach((w, idx) => {
      seen.add(w.id);
      let e = workerEls.get(w.id);
      if (!e) {
        const name = h('span', { class: 'lw-w-name' }, w.id, h('span', { class: 'lw-w-fleet' }));
        const state = h('span', { class: 'lw-w-state' });
        const pid = h('span', { class: 'lw-w-pid' });
        const fill = h('span', { class: 'lw-w-fill' });
        const bar = h('span', { class: 'lw-w-bar', role: 'progressbar', 'aria-valuemin': '0', 'aria-valuemax': '100',
          'aria-label': `${w.id} progress` }, fill);
        const act = h('span', { class: 'lw-w-act' });
        const stale = h('span', { class: 'lw-w-stale' });
        const card = h(canKill ? 'button' : 'div', { class: 'lw-worker', testid: `worker-${w.id}`,
          type: canKill ? 'button' : null, onclick: canKill ? () => clickWorker(w.id) : null },
        // spaces between the parts: the text a voice user reads off the card is the start of its name
        h('span', { class: 'lw-w-top' }, name, ' ', pid), ' ', state, ' ', bar, ' ', stale, ' ', act);
        const wid = w.id;
        const inspect = h('button', { type: 'button', class: 'lw-linkish lw-w-inspect', testid: `worker-inspect-${wid}`,
          'aria-expanded': 'false', 'aria-label': `inspect ${wid}: its jobs, pid and state`,
          onclick: () => W.openInspect('worker', wid) }, 'inspect');
        const li = h('li', {}, card, inspect);
        e = { li, card, name, state, pid, bar, fill, act, stale, inspect, fleet: name.lastChild };
        workerEls.set(w.id, e);
      }
      const label = workerLabel(w, now);
      const job = w.state === 'busy' ? S.jobs.get(w.job_id) : null;
      const isStale = !!(job && w.attempt != null && job.attempt > w.attempt);
      setText(e.stale, isStale ? `⚠ duplicate: its lease ran out, attempt ${job.attempt} owns job ${job.id} now` : '');
      e.card.dataset.stale = isStale ? 'yes' : 'no';
      e.card.dataset.state = w.state;
      e.card.dataset.fleet = w.fleet || 'shared';
      setText(e.fleet, w.fleet ? ` · ${w.fleet}` : '');
      setAttr(e.card, 'title', w.fleet ? `serves ${w.fleet} jobs only (a fleet of its own)` : null);
      setText(e.state, label);
      setText(e.pid, w.pid ? `pid ${w.pid}` : 'no process');
      const pct = w.state === 'busy' ? Math.max(0, Math.min(100, w.progress || 0)) : 0;
      e.fill.style.width = `${pct}%`;
      setAttr(e.bar, 'aria-valuenow', pct);
      e.bar.hidden = w.state !== 'busy';
      const killable = canKill && KILLABLE.includes(w.state);
      setText(e.act, killable ? (w.state === 'busy' ? '✕ click to kill (SIGKILL)' : '✕ kill') : '');
      if (canKill) {
        setAttr(e.card, 'aria-disabled', killable ? null : 'true');
        // WCAG 2.5.3: the name starts with the card's visible text, in its visible order ("w1 pid 19115
        // idle: waiting for work ✕ kill"), so a voice user can say what they see; the SIGKILL hint follows.
        const visible = [e.name.textContent, e.pid.textContent, label, e.stale.textContent, e.act.textContent]
          .filter(Boolean).join(' ');
        setAttr(e.card, 'aria-label', `${visible}${killable ? '. Press to kill it with SIGKILL' : ''}`);
      }
      setAttr(e.inspect, 'aria-expanded', W.isOpen('worker', w.id) ? 'true' : 'false');
      const at = list.children[idx];
      if (at !== e.li) list.insertBefore(e.li, at || null);
    });
    for (const [id, e] of workerEls) if (!seen.has(id)) { e.li.remove(); workerEls.delete(id); }
  }

  function clickWorker(id) {
    const w = S.workers.get(id);
    if (!w || !KILLABLE.includes(w.state)) return;
    W.killWorker(id);
  }

  return { workerLabel, renderWorkers };
}
