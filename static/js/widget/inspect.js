// Inspect a worker or a lease: a panel with its internals (a worker's pid, state, current job and
// the attempts it ran; a lease's holder, fence, heartbeats, deadline and countdown). Both read the
// timeline model, so they work in the past too.

import { fmtDur, fmtT, h, setText, stateWord } from './util.js';
import { effectiveWorker } from './model.js';
import { workerAttempts } from './timeline-model.js';

export function install(W) {
  const { S, q } = W;
  let inspectKey = '';

  const isOpen = (kind, id) => !!(S.inspect && S.inspect.kind === kind && S.inspect.id === id);

  function openInspect(kind, id) {
    const closing = isOpen(kind, id);
    S.inspect = closing ? null : { kind, id };
    inspectKey = '';
    W.pauseForInspect(!closing);
    W.markDirty();
  }

  function closeInspect() {
    S.inspect = null;
    W.pauseForInspect(false);
    W.markDirty();
  }

  function renderInspect(now) {
    const boxes = { worker: q('worker-detail'), lease: q('lease-detail') };
    const want = S.inspect;
    for (const [kind, box] of Object.entries(boxes)) {
      if (!want || want.kind !== kind) { if (!box.hidden) { box.hidden = true; box.replaceChildren(); } }
    }
    if (!want) return;
    const box = boxes[want.kind];
    const sel = document.getSelection();
    const holding = (sel && !sel.isCollapsed && box.contains(sel.anchorNode)) || box.contains(document.activeElement);
    if (want.kind === 'worker') renderWorkerPanel(box, want.id, now, holding);
    else renderLeasePanel(box, want.id, now, holding);
    box.hidden = false;
  }

  function panelHead(title, testid) {
    return h('div', { class: 'lw-detail-head' }, h('h4', {}, title),
      h('button', { type: 'button', class: 'lw-btn lw-small', testid, onclick: closeInspect }, 'Close'));
  }

  function renderWorkerPanel(box, id, now, holding) {
    const w = S.workers.get(id);
    const runs = workerAttempts(S.tl, id);
    const key = JSON.stringify([w, runs.slice(0, 8).map(({ job, a }) => [job, a.n, a.end, a.outcome]), S.deaths.get(id)]);
    if (holding || key === inspectKey) return;
    inspectKey = key;
    const st = w ? effectiveWorker(S, w) : null;
    const current = st && st.state === 'busy' ? st.job_id : null;
    const open = (job) => h('button', { type: 'button', class: 'lw-linkish', onclick: () => W.openJob(job, true) }, `job ${job}`);
    box.replaceChildren(
      panelHead(`Worker ${id}: ${st ? st.state : 'gone'}`, 'worker-detail-close'),
      h('dl', {},
        h('dt', {}, 'state'), h('dd', { testid: 'worker-detail-state' }, st ? W.workerLabel(st, now) : 'stopped: no longer in the pool'),
        h('dt', {}, 'pid'), h('dd', { testid: 'worker-detail-pid' }, w && w.pid ? String(w.pid) : 'no process'),
        h('dt', {}, 'current job'), h('dd', { testid: 'worker-detail-current' }, current != null ? [open(current), ` · attempt ${st.attempt ?? '?'}`] : 'none'),
        S.deaths.has(id) ? [h('dt', {}, 'last death'), h('dd', {}, `t=${fmtT(S.deaths.get(id))} s`)] : null),
      h('table', { class: 'lw-attempts', testid: 'worker-detail-jobs' },
        h('caption', {}, runs.length ? `Attempts this worker ran (${runs.length}), newest first` : 'This worker has run nothing yet'),
        h('thead', {}, h('tr', {}, ['job', 'attempt', 'start', 'end', 'outcome'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, runs.slice(0, 8).map(({ job, a }) => h('tr', { testid: `worker-run-${job}-${a.n}` },
          h('td', {}, open(job)), h('td', {}, String(a.n)), h('td', {}, fmtT(a.start)),
          h('td', {}, a.end != null ? fmtT(a.end) : '–'), h('td', {}, a.outcome || 'running'))))));
  }

  function renderLeasePanel(box, jobId, now, holding) {
    const j = S.jobs.get(jobId);
    const tj = S.tl.get(jobId);
    const a = j && tj ? tj.attempts.get(j.attempt) : null;
    const key = JSON.stringify([j && [j.state, j.attempt, j.worker, j.lease_deadline], a && [a.leaseStart, a.extended, a.expiredAt]]);
    if (!holding && key !== inspectKey) {
      inspectKey = key;
      box.replaceChildren(
        panelHead(`Lease on job ${jobId}`, 'lease-detail-close'),
        h('dl', {},
          h('dt', {}, 'held by'), h('dd', { testid: 'lease-detail-worker' }, j && j.worker ? `${j.worker}, attempt ${j.attempt}` : '–'),
          h('dt', {}, 'fence'), h('dd', { testid: 'lease-detail-fence' }, j ? `${j.attempt}: a write carrying an older attempt number is refused` : '–'),
          h('dt', {}, 'taken at'), h('dd', {}, a && a.start != null ? `t=${fmtT(a.start)} s` : '–'),
          h('dt', {}, 'heartbeats'), h('dd', { testid: 'lease-detail-extended' }, a && a.extended ? `extended ${a.extended} time${a.extended === 1 ? '' : 's'}` : 'none'),
          h('dt', {}, 'deadline'), h('dd', { testid: 'lease-detail-deadline' }),
          h('dt', {}, 'counts down'), h('dd', { testid: 'lease-detail-countdown' })),
        h('button', { type: 'button', class: 'lw-btn lw-small', testid: 'lease-detail-job', onclick: () => W.openJob(jobId, true) },
          `Open job ${jobId}’s internals`));
    }
    // the countdown moves every frame, whatever else holds still
    const dl = j && j.state === 'running' ? j.lease_deadline : null;
    setText(box.querySelector('[data-testid="lease-detail-deadline"]'), dl != null ? `t=${fmtT(dl)} s` : 'no lease held now');
    setText(box.querySelector('[data-testid="lease-detail-countdown"]'), dl == null ? (j && j.state === 'running' ? 'expired: being redelivered' : `job is ${stateWord(j && j.state)}`)
      : dl - now > 0 ? `${Math.ceil(dl - now)} s left` : `expired ${fmtDur(now - dl)} ago: the reaper is on it`);
  }

  return { isOpen, openInspect, closeInspect, renderInspect };
}
