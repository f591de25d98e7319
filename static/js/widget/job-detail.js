// The open job: its attempts (from the server's fold of the stream when fetched, the live timeline's
// own record until then), fences, CAS refusals, retry delays, files and payload, with a lease
// countdown; optionally the clock pauses while a panel is open.

import { fmtT, h, setText, stateWord, throttled } from './util.js';
import { PAUSE_PREF } from './jobs.js';

export function install(W) {
  const { S, els, q } = W;
  let detailKey = '';

  function openJob(id, fromTimeline) {
    S.selectedJob = S.selectedJob === id && !fromTimeline ? null : id;
    // the rows on screen stay put while the panel under them is open (no new job pushes it down)
    const rows = [...q('jobs').children].map((li) => li.dataset.testid.replace('job-row-', ''));
    S.heldJobs = S.selectedJob && rows.length ? rows : null;
    if (S.selectedJob) fetchHistory();
    pauseForInspect(Boolean(S.selectedJob));
    if (S.selectedJob) els.detail.closest('details').open = true; // opened from the timeline: unfold the jobs
    renderDetail(true);
    W.markDirty();
    if (fromTimeline && S.selectedJob) {
      els.detail.scrollIntoView({ block: 'nearest', behavior: W.reduceMotion.matches ? 'auto' : 'smooth' });
    }
  }

  // the open job's internals from the API (every attempt with its fence, CAS refusals, retry delays, files)
  async function fetchHistory() {
    const id = S.selectedJob;
    if (id == null) return;
    const res = await W.api('GET', W.labPath(`/jobs/${encodeURIComponent(id)}?include=history`));
    if (res.ok && res.data.history) { S.history.set(id, res.data.history); W.markDirty(); }
  }
  const fetchHistorySoon = throttled(fetchHistory, 300);

  function pauseForInspect(opening) {
    if (S.lab.viewer || !S.controls.has('clock') || !S.clock) return;
    if (opening && localStorage.getItem(PAUSE_PREF) === '1' && !S.clock.paused) {
      S.pausedForInspect = true;
      W.clockAction({ action: 'pause' });
    } else if (!opening && S.pausedForInspect) {
      S.pausedForInspect = false;
      if (S.clock.paused) W.clockAction({ action: 'resume' });
    }
  }

  function renderCountdown(now) {
    const el = els.detail.querySelector('[data-testid="lease-countdown"]');
    const j = W.jobById(S.selectedJob);
    if (!el || !j) return;
    const left = j.lease_deadline != null && j.state === 'running' ? j.lease_deadline - now : null;
    setText(el, left == null ? 'no lease held' : left > 0 ? `${Math.ceil(left)} s left (t=${fmtT(j.lease_deadline)} s)`
      : `expired at t=${fmtT(j.lease_deadline)} s`);
  }

  function renderDetail(force) {
    const box = els.detail;
    const id = S.selectedJob;
    const j = id != null ? W.jobById(id) : null;
    if (!j) { box.hidden = true; box.replaceChildren(); detailKey = ''; return; }
    // hold still while the learner selects text or works inside the panel
    const sel = document.getSelection();
    if (!force && ((sel && !sel.isCollapsed && box.contains(sel.anchorNode)) || box.contains(document.activeElement))) return;
    const tj = S.tl.get(id);
    const hist = S.past ? null : S.history.get(id); // the server's fold knows the future: not for the past
    const key = JSON.stringify([j, tj ? [...tj.attempts.values()] : null, hist]);
    if (!force && key === detailKey) return;
    detailKey = key;
    // the server's fold of the stream when we have it; the live timeline's own record until then
    const rows = hist ? hist.attempts.map((a) => h('tr', { testid: `attempt-${a.attempt}` },
      h('td', {}, a.attempt), h('td', {}, a.worker || '–'), h('td', {}, a.start != null ? fmtT(a.start) : 'queued'),
      h('td', {}, a.end != null ? fmtT(a.end) : '–'), h('td', {}, a.outcome || (a.start != null ? 'running' : 'queued'),
        a.error ? ` · ${a.error}` : ''), h('td', {}, String(a.fence)),
      h('td', {}, a.lease_deadline != null ? `t=${fmtT(a.lease_deadline)}` : '–')))
      : (tj ? [...tj.attempts.values()] : []).sort((a, b) => a.n - b.n).map((a) => h('tr', { testid: `attempt-${a.n}` },
        h('td', {}, a.n), h('td', {}, a.worker || '–'), h('td', {}, a.start != null ? fmtT(a.start) : 'queued'),
        h('td', {}, a.end != null ? fmtT(a.end) : '–'),
        h('td', {}, a.outcome || 'queued', a.expiredAt != null ? ` · lease expired at ${fmtT(a.expiredAt)}` : '', a.error ? ` · ${a.error}` : ''),
        h('td', {}, String(a.n)), h('td', {}, a.deadline != null ? `t=${fmtT(a.deadline)}` : '–')));
    const cas = hist ? hist.cas_refused : [];
    const delays = hist ? hist.retry_delays : [];
    const files = hist ? hist.output_files : [];
    box.replaceChildren(...[
      h('div', { class: 'lw-detail-head' }, h('h4', {}, `Job ${id}: ${stateWord(j.state)}`),
        h('button', { type: 'button', class: 'lw-btn lw-small', testid: 'detail-close', onclick: () => openJob(id) }, 'Close')),
      h('dl', {},
        h('dt', {}, 'attempt'), h('dd', {}, String(j.attempt)),
        h('dt', {}, 'lease deadline'), h('dd', { testid: 'lease-countdown' }),
        j.dlq_reason ? [h('dt', {}, 'DLQ reason'), h('dd', {}, j.dlq_reason)] : null,
        j.last_error ? [h('dt', {}, 'last error'), h('dd', {}, j.last_error)] : null),
      h('table', { class: 'lw-attempts' }, h('caption', {}, 'Attempts (simulated seconds; CAS outcome per attempt)'),
        h('thead', {}, h('tr', {}, ['#', 'worker', 'start', 'end', 'outcome', 'fence', 'lease until'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows)),
      h('p', { class: 'lw-doc', testid: 'detail-cas' }, cas.length
        ? `CAS refused ${cas.length} transition${cas.length === 1 ? '' : 's'}: ${cas.map((c) => `attempt ${c.attempt} at t=${fmtT(c.t)} (${c.reason})`).join('; ')}`
        : 'CAS refused nothing: every transition carried the current fence.'),
      delays.length ? h('p', { class: 'lw-doc', testid: 'detail-retries' },
        `Retry delays drawn: ${delays.map((d) => `${d.delay} s after attempt ${d.attempt}`).join(', ')}`) : null,
      files.length ? h('p', { class: 'lw-doc', testid: 'detail-files' }, `Files written: ${files.join(', ')}`) : null,
      h('details', {}, h('summary', {}, 'Payload'), h('pre', {}, JSON.stringify(j.payload, null, 2)))].filter(Boolean));
    box.hidden = false;
  }

  return { openJob, fetchHistorySoon, pauseForInspect, renderCountdown, renderDetail };
}
