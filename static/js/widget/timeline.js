// The timeline: a Gantt chart with one row per job and one lane per attempt.
// Each attempt is a bar from claim to end, labelled with its worker and number; the time it
// waited in the queue is dotted; lease deadlines are ticks; a killed worker's orphaned lease is a
// dashed line up to the moment the reaper notices; and wherever two attempts of the same job ran
// at once the track is hatched ("duplicate overlap"). Rows are keyed, so the job buttons keep focus.

import { fmtT, h, setAttr, setText } from './util.js';

const LANE_PX = 30;
// the mark where a later attempt was queued, by how (the start of its `how` text): a redelivery is the lease
// running out, a retry follows the policy's backoff wait (drawn with the same hourglass), a replay the DLQ, a
// resume the lab's return from a park (no lease ran out)
const MARKS = [['redeliver', '↻'], ['retry', '⧗'], ['replay', '⇡'], ['resume', '▸']];
const MAX_ROWS = 8;
const MAX_LANES = 6;

const OUTCOME_WORD = {
  running: 'running', succeeded: 'done', refused: 'refused (stale)', failed: 'failed',
  killed: 'killed', lost: 'lost', duplicate: 'completed again', crashed: 'crashed', parked: 'stopped by a park',
};

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

function niceStep(span) {
  const raw = span / 6;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/** Time ranges where two or more attempts were running at once. */
export function overlaps(intervals) {
  const pts = [];
  for (const [a, b] of intervals) if (b > a) pts.push([a, 1], [b, -1]);
  pts.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  const out = [];
  let depth = 0, from = null, peak = 0;
  for (const [t, d] of pts) {
    depth += d;
    if (depth >= 2 && from === null) { from = t; peak = depth; }
    if (depth >= 2) peak = Math.max(peak, depth);
    if (depth < 2 && from !== null) { if (t > from) out.push([from, t, peak]); from = null; }
  }
  return out;
}

/** A lease still counting down: the attempt runs, or its worker died and nobody has noticed yet. */
function pendingDeadline(a) {
  return a.deadline != null && a.expiredAt == null
    && (a.end == null || a.outcome === 'killed' || a.outcome === 'crashed');
}

/** The interval an attempt occupied a worker: claim → end (or now while it still runs). */
export function runInterval(a, now) {
  if (a.start == null) return null;
  const end = a.end ?? (a.outcome === 'running' ? now : a.start);
  return [a.start, Math.max(a.start, end)];
}

export class Timeline {
  /** leases: draw lease deadlines (false before the chapter that introduces them: a chapter home's `shows`) */
  constructor(els, { onOpenJob, leases = true }) {
    this.leases = leases;
    this.axis = els.axis;
    this.rows = els.rows;
    this.empty = els.empty;
    this.parkedKey = els.parkedKey; // its legend entry, shown once a park has stopped a run on screen
    this.onOpenJob = onOpenJob;
    this.rowEls = new Map();
  }

  render(model, now, stateOf) {
    const jobs = [...model.values()].sort((a, b) => Number(a.id) - Number(b.id)).slice(-MAX_ROWS);
    this.empty.hidden = jobs.length > 0;
    if (this.parkedKey) this.parkedKey.hidden = !jobs.some((j) => [...j.attempts.values()].some((a) => a.outcome === 'parked'));
    this.axis.hidden = !jobs.length;
    if (!jobs.length) {
      this.rows.replaceChildren();
      this.rowEls.clear();
      this.axis.replaceChildren();
      return;
    }
    // domain: first enqueue of the visible jobs → now, stretched to show pending lease deadlines
    let t0 = Infinity, t1 = now;
    for (const j of jobs) {
      for (const a of j.attempts.values()) {
        for (const t of [a.queuedAt, a.start]) if (t != null) t0 = Math.min(t0, t);
        if (this.leases && pendingDeadline(a)) t1 = Math.max(t1, a.deadline);
      }
      if (j.created != null) t0 = Math.min(t0, j.created);
    }
    if (!Number.isFinite(t0)) t0 = now - 60;
    const span = Math.max(60, t1 - t0) * 1.04;
    t1 = t0 + span;
    const x = (t) => Math.min(100, Math.max(0, ((t - t0) / span) * 100));
    const w = (a, b) => Math.max(0.25, x(b) - x(a));
    this.renderAxis(t0, t1, span, x, now);

    const seen = new Set();
    for (const j of jobs) {
      seen.add(j.id);
      let row = this.rowEls.get(j.id);
      if (!row) {
        row = this.makeRow(j.id);
        this.rowEls.set(j.id, row);
      }
      this.updateRow(row, j, now, stateOf(j.id), x, w);
    }
    for (const [id, row] of this.rowEls) {
      if (!seen.has(id)) { row.li.remove(); this.rowEls.delete(id); }
    }
    // keep DOM order = id order without touching rows already in place
    let prev = null;
    for (const j of jobs) {
      const li = this.rowEls.get(j.id).li;
      const want = prev ? prev.nextSibling : this.rows.firstChild;
      if (li !== want) this.rows.insertBefore(li, want);
      prev = li;
    }
  }

  renderAxis(t0, t1, span, x, now) {
    const step = niceStep(span);
    let html = '';
    const xNow = x(now);
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const xt = x(t);
      if (xt > xNow - 9 && xt < xNow + 4) continue; // leave room for the "now" label
      html += `<span class="lw-tl-tick" style="left:${xt.toFixed(3)}%">${fmtT(t)} s</span>`;
    }
    html += `<span class="lw-tl-now" style="left:${x(now).toFixed(3)}%">now</span>`;
    if (this.axisHtml !== html) { this.axis.innerHTML = html; this.axisHtml = html; }
  }

  makeRow(id) {
    const open = h('button', { type: 'button', class: 'lw-tl-open', testid: `tl-open-${id}`,
      onclick: () => this.onOpenJob(id) }, `Job ${id}`);
    const meta = h('span', { class: 'lw-tl-meta' });
    const sr = h('span', { class: 'lw-sr' });
    const track = h('div', { class: 'lw-tl-track', 'aria-hidden': 'true' });
    const li = h('li', { class: 'lw-tl-row', testid: `tl-job-${id}`, 'data-job': id },
      h('div', { class: 'lw-tl-label' }, open, meta, sr), track);
    return { li, open, meta, sr, track, html: '' };
  }

  updateRow(row, j, now, state, x, w) {
    const attempts = [...j.attempts.values()].sort((a, b) => a.n - b.n).slice(-MAX_LANES);
    const intervals = attempts.map((a) => runInterval(a, now)).filter(Boolean);
    const dup = overlaps(intervals);
    setAttr(row.li, 'data-state', state || '');
    setAttr(row.li, 'data-overlap', dup.length ? 'yes' : null);
    setText(row.meta, [j.video, state].filter(Boolean).join(' · '));
    row.track.style.height = `${Math.max(1, attempts.length) * LANE_PX + 4}px`;

    let html = '';
    for (const [a, b, peak] of dup) {
      html += `<div class="lw-tl-overlap" data-testid="tl-overlap" style="left:${x(a).toFixed(3)}%;width:${w(a, b).toFixed(3)}%"`
        + ` title="${peak} attempts of job ${esc(j.id)} running at the same time, t=${fmtT(a)}–${fmtT(b)} s">`
        + `${x(b) - x(a) > 14 ? `<span>${peak}× at once</span>` : x(b) - x(a) > 3 ? `<span>${peak}×</span>` : ''}</div>`;
    }
    const sr = [`Job ${j.id}${j.video ? ` (${j.video})` : ''}${state ? `, ${state}` : ''}.`];
    attempts.forEach((a, lane) => {
      const top = lane * LANE_PX + 2;
      let inner = '';
      const waitFrom = a.queuedAt ?? (a.n === 1 ? j.created : null);
      const waitTo = a.start ?? (a.end == null ? now : null);
      if (waitFrom != null && waitTo != null && waitTo > waitFrom) {
        inner += `<div class="lw-tl-wait" style="left:${x(waitFrom).toFixed(3)}%;width:${w(waitFrom, waitTo).toFixed(3)}%"`
          + ` title="attempt ${a.n} waiting in the queue"></div>`;
      }
      if (a.n > 1 && a.queuedAt != null && a.how) {
        const [kind, glyph] = MARKS.find(([k]) => a.how.startsWith(k)) || MARKS[0];
        inner += `<span class="lw-tl-mark lw-tl-${kind}" data-testid="tl-mark-${kind}" style="left:${x(a.queuedAt).toFixed(3)}%"`
          + ` title="${esc(a.how)} at t=${fmtT(a.queuedAt)} s">${glyph}</span>`;
      }
      if (a.backoffFrom != null && a.backoffTo != null && a.backoffTo > a.backoffFrom) {
        // the retry policy's wait after this attempt failed: its own glyph, never the redelivery arrow
        const left = Math.max(0, a.backoffTo - Math.max(now, a.backoffFrom));
        const say = left > 0 ? `next try in ${fmtT(left)} s` : `waited ${fmtT(a.backoffTo - a.backoffFrom)} s`;
        inner += `<div class="lw-tl-backoff" data-testid="tl-backoff" style="left:${x(a.backoffFrom).toFixed(3)}%;`
          + `width:${w(a.backoffFrom, a.backoffTo).toFixed(3)}%" title="backoff after attempt ${a.n} failed: ${say}">`
          + `<span aria-hidden="true">⧗</span>${w(a.backoffFrom, a.backoffTo) > 12 ? ` ${say}` : ''}</div>`;
        sr.push(`Backoff after attempt ${a.n}: ${say}.`);
      }
      const iv = runInterval(a, now);
      const word = OUTCOME_WORD[a.outcome] || a.outcome || 'running';
      if (iv) {
        const label = `${a.worker || '?'} · attempt ${a.n} · ${word}`;
        inner += `<div class="lw-tl-bar" data-testid="tl-attempt-${esc(j.id)}-${a.n}" data-outcome="${esc(a.outcome || 'running')}"`
          + ` style="left:${x(iv[0]).toFixed(3)}%;width:${w(iv[0], iv[1]).toFixed(3)}%"`
          + ` title="${esc(label)}, t=${fmtT(iv[0])}–${fmtT(iv[1])} s"><span>${esc(label)}</span></div>`;
        sr.push(`Attempt ${a.n} on ${a.worker || '?'} from t=${fmtT(iv[0])} s to ${a.end == null && a.outcome === 'running' ? 'now' : `t=${fmtT(iv[1])} s`}: ${word}.`);
      } else {
        sr.push(`Attempt ${a.n} waiting in the queue.`);
      }
      if (!this.leases) { html += `<div class="lw-tl-lane" style="top:${top}px">${inner}</div>`; return; }
      if (a.deadAt != null && (a.outcome === 'killed' || a.outcome === 'crashed')) {
        const until = a.expiredAt ?? (a.deadline != null ? Math.min(now, a.deadline) : null);
        if (until != null && until > a.deadAt) {
          inner += `<div class="lw-tl-orphan" style="left:${x(a.deadAt).toFixed(3)}%;width:${w(a.deadAt, until).toFixed(3)}%"`
            + ` title="nobody is working on it, but the lease still runs: nothing happens until it expires">`
            + `${a.outcome === 'killed' ? '<span>lease still running</span>' : ''}</div>`;
        }
      }
      if (a.expiredAt != null) {
        const at = a.expiredDeadline ?? a.expiredAt;
        inner += `<span class="lw-tl-lease lw-tl-expired" data-testid="tl-lease-expired" style="left:${x(at).toFixed(3)}%"`
          + ` title="lease of attempt ${a.n} expired at t=${fmtT(at)} s"></span>`;
        sr.push(`Its lease expired at t=${fmtT(at)} s.`);
      } else if (pendingDeadline(a)) {
        inner += `<span class="lw-tl-lease" data-testid="tl-lease" style="left:${x(a.deadline).toFixed(3)}%"`
          + ` title="lease deadline of attempt ${a.n}: t=${fmtT(a.deadline)} s"></span>`;
      }
      html += `<div class="lw-tl-lane" style="top:${top}px">${inner}</div>`;
    });
    for (const [a, b, peak] of dup) sr.push(`${peak} attempts ran at once from t=${fmtT(a)} to ${fmtT(b)} s.`);
    if (row.html !== html) { row.track.innerHTML = html; row.html = html; }
    setText(row.sr, sr.join(' '));
  }
}
