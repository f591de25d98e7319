// The event log (every event in plain words, filtered by type, job or worker; the filters narrow the
// timeline too), held still while the learner reads, and the screen-reader announcements: one polite
// summary every ANNOUNCE_MS at most.

import { fmtT, h, idCmp, narrate, setAttr, setText } from './util.js';
import { filterTimeline } from './timeline-model.js';

const LOG_SHOW = 150;
const ANNOUNCE_MS = 2000;
const ANNOUNCE = new Set(['job.enqueued', 'job.claimed', 'lease.expired', 'job.redelivered',
  'job.succeeded', 'job.failed', 'job.retry_scheduled', 'job.dead_lettered', 'job.replayed',
  'job.duplicate_blocked', 'job.duplicate_completed', 'job.lost', 'worker.killed', 'worker.died',
  'fault.started', 'fault.ended', 'breaker.opened', 'breaker.closed', 'clock.paused',
  'clock.resumed', 'clock.stepped']);
// Spoken at once, not held for the next batch: the learner just did it (a kill) or must not miss it.
export const URGENT = new Set(['worker.killed', 'worker.died', 'job.dead_lettered', 'job.lost']);
const IMPORTANT = new Set([...ANNOUNCE].filter((t) => !['job.enqueued', 'job.claimed'].includes(t)));

/** Does a log entry pass the filters {type, job, worker}? */
export function logMatches(e, { type, job, worker }) {
  if (job && String(e.job) !== job) return false;
  if (worker && e.worker !== worker) return false;
  if (type === 'all') return true;
  if (type === 'default') return !e.types.every((t) => t === 'job.progress');
  if (type === 'important') return e.types.some((t) => IMPORTANT.has(t));
  return e.types.includes(type);
}

export function install(W) {
  const { S, els, q } = W;
  const logWorkers = new Set(), logTypes = new Set();
  let tlFilterKey = '';

  function buildLogFilters() {
    const sel = q('log-type');
    // "one type" lists the types this lab has sent so far: a chapter's log names nothing it has not shown
    els.logTypes = h('optgroup', { label: 'one type' });
    sel.append(h('option', { value: 'default' }, 'all but progress ticks'),
      h('option', { value: 'important' }, 'key moments only'),
      h('option', { value: 'all' }, 'everything'), els.logTypes);
    sel.addEventListener('change', () => { S.logRebuild = true; W.markDirty(); });
    q('log-job').addEventListener('input', () => { S.logRebuild = true; W.markDirty(); });
    q('log-worker').addEventListener('change', () => { S.logRebuild = true; W.markDirty(); });
    const list = q('log');
    list.addEventListener('scroll', () => { if (list.scrollTop < 4 && S.logPending) W.markDirty(); });
    q('log-more').addEventListener('click', () => { list.scrollTop = 0; S.logRebuild = true; renderLog(true); });
  }

  const panelOpen = () => Boolean(S.selectedJob || S.inspect || (els.help && els.help.open));

  function addLog(ev, live) {
    const text = narrate(ev, S.meta, W.labelOf);
    const last = S.log[S.log.length - 1];
    if ((ev.type === 'job.redelivered' || ev.type === 'job.dead_lettered') && last && last.types[0] === 'lease.expired'
        && last.job === ev.job_id && Math.abs(last.t - ev.t_sim) < 1) {
      last.types.push(ev.type);
      last.text += `; ${text.replace(new RegExp(`^job ${ev.job_id} `), '')}`;
      if (last.el) setText(last.el.lastChild, last.text);
      if (live && URGENT.has(ev.type)) urgent(last);
      else if (live && last.announced) S.announceQueue.push(last);
      return;
    }
    if (!logTypes.has(ev.type)) {
      logTypes.add(ev.type);
      const types = [...logTypes].sort();
      els.logTypes.insertBefore(h('option', { value: ev.type }, ev.type), els.logTypes.children[types.indexOf(ev.type)] || null);
    }
    const entry = { id: ev.id, t: ev.t_sim, types: [ev.type], job: ev.job_id ?? (ev.data && ev.data.job_id) ?? null,
      worker: ev.worker_id ?? null, text, el: null, announced: live && ANNOUNCE.has(ev.type) };
    if (entry.worker && !logWorkers.has(entry.worker)) {
      logWorkers.add(entry.worker);
      const sel = q('log-worker');
      const ids = [...logWorkers].sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
      sel.insertBefore(h('option', { value: entry.worker }, entry.worker), sel.options[ids.indexOf(entry.worker) + 1] || null);
    }
    S.log.push(entry);
    if (S.log.length > 5000) S.log.splice(0, 1000);
    if (live && URGENT.has(ev.type)) urgent(entry);
    else if (entry.announced) S.announceQueue.push(entry);
    S.logPending++;
  }

  // the event log's filters (job, worker, one type) narrow the timeline to the jobs they touch
  function filters() {
    const type = q('log-type').value;
    return { type, oneType: !['default', 'important', 'all'].includes(type) ? type : null,
      job: q('log-job').value.trim().replace(/^#/, ''), worker: q('log-worker').value };
  }

  function timelineJobs() {
    const f = filters();
    const note = [f.job && `job ${f.job}`, f.worker && `worker ${f.worker}`, f.oneType && `events of type ${f.oneType}`].filter(Boolean);
    const key = note.join('|');
    if (key !== tlFilterKey) {
      tlFilterKey = key;
      const el = q('tl-filter');
      el.hidden = !note.length;
      el.replaceChildren(...(note.length ? [`Showing only jobs with ${note.join(' and ')} (the event log’s filters). `,
        h('button', { type: 'button', class: 'lw-linkish', testid: 'tl-filter-clear', onclick: clearFilters }, 'Show all')] : []));
    }
    return filterTimeline(S.tl, f);
  }

  function clearFilters() {
    q('log-type').value = 'default';
    q('log-job').value = '';
    q('log-worker').value = '';
    S.logRebuild = true;
    W.markDirty();
  }

  function logItem(e) {
    if (e.el) { setAttr(e.el, 'data-type', e.types.join(' ')); return e.el; } // built once, reused by every rebuild
    const li = h('li', { class: 'lw-log-item', testid: 'log-item', 'data-type': e.types.join(' '), 'data-job': e.job ?? '',
      'data-worker': e.worker ?? '', 'data-id': e.id },
      h('span', { class: 'lw-log-t' }, `t=${fmtT(e.t)} s`), h('span', { class: 'lw-log-text' }, e.text));
    e.el = li;
    return li;
  }

  function renderLog(forceFlush) {
    const list = q('log');
    const sel = document.getSelection();
    // hold still while the learner reads: scrolled down, selecting text, or a panel open
    const holding = !forceFlush && !S.logRebuild && (list.scrollTop > 4 || panelOpen()
      || (sel && !sel.isCollapsed && list.contains(sel.anchorNode)));
    const more = q('log-more');
    if (holding) {
      if (S.logPending) {
        more.hidden = false;
        setText(more, `${S.logPending} new event${S.logPending === 1 ? '' : 's'}: show`);
      }
      return;
    }
    more.hidden = true;
    const f = filters();
    if (S.logRebuild || S.logPending > LOG_SHOW) {
      const items = [];
      // in the past, start from the newest entry at or before the moment (entries are in stream order)
      let from = S.log.length - 1;
      if (S.past) {
        const at = W.pastAt().id;
        let lo = 0, hi = S.log.length;
        while (lo < hi) { const mid = (lo + hi) >> 1; if (idCmp(S.log[mid].id, at) > 0) hi = mid; else lo = mid + 1; }
        from = lo - 1;
      }
      for (let i = from; i >= 0 && items.length < LOG_SHOW; i--) if (logMatches(S.log[i], f)) items.push(logItem(S.log[i]));
      list.replaceChildren(...items);
      S.logRebuild = false;
    } else if (S.logPending) {
      const fresh = [];
      for (let i = S.log.length - S.logPending; i < S.log.length; i++) if (i >= 0 && logMatches(S.log[i], f)) fresh.push(logItem(S.log[i]));
      list.prepend(...fresh.reverse());
      while (list.children.length > LOG_SHOW) list.lastChild.remove();
    }
    S.logPending = 0;
    q('log-empty').hidden = list.children.length > 0;
  }

  /**
   * Urgent events go to their own live region at once (a microtask gathers what arrived together, so
   * three kills in one WebSocket frame are one sentence), and leave the polite batch.
   */
  let urgentBatch = null;
  function urgent(entry) {
    S.announceQueue = S.announceQueue.filter((e) => e !== entry);
    if (!urgentBatch) {
      urgentBatch = [];
      queueMicrotask(() => {
        const texts = [...new Set(urgentBatch)].map((e) => e.text);
        urgentBatch = null;
        const el = q('announcer-urgent');
        if (!el) return;
        // the same words twice in a row would not be re-read: a trailing no-break space makes it new
        const msg = `${texts.join('. ')}.`;
        el.textContent = el.textContent === msg ? `${msg}\u00a0` : msg;
      });
    }
    urgentBatch.push(entry);
  }

  /**
   * A timeout chain, not setInterval: an interval that fired late (a busy main thread) fires its next
   * one on the old schedule, so two announcements could land a fraction of ANNOUNCE_MS apart.
   */
  function announceLoop() {
    flushAnnouncements();
    setTimeout(announceLoop, ANNOUNCE_MS);
  }

  /** One polite announcement per ANNOUNCE_MS at most, summarising what happened. */
  function flushAnnouncements() {
    const qd = S.announceQueue;
    if (!qd.length) return;
    S.announceQueue = [];
    const uniq = [...new Set(qd)];
    const texts = uniq.map((e) => e.text);
    const msg = texts.length <= 3 ? texts.join('. ')
      : `${texts.length} updates. Latest: ${texts.slice(-2).join('. ')}`;
    setText(q('announcer'), `${msg}.`);
  }

  return { buildLogFilters, addLog, timelineJobs, renderLog, announceLoop };
}
