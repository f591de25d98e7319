// The history bar: a scrubber over the lab's event stream, replay at a chosen speed, and the
// "try again from here" form. It holds only UI state (where the thumb is, whether a replay runs);
// the widget rebuilds the lab's state at that event from the stream (see `seek` in history.js).
//
// Position n (one past the last event) is "live"; any smaller position is a past moment. The
// slider is a native range input, so arrow keys, Home/End and PageUp/PageDown work, and its
// aria-valuetext says the moment in words.

import { fmtT, h, setAttr, setText } from './util.js';

export const REPLAY_SPEEDS = [1, 5, 20];
const MAX_GAP_S = 1; // a replay skips real pauses longer than this (a paused clock, an idle lab)

export class Scrubber {
  /**
   * els: {box, banner} · opts: {idBase, events(): array, describe(ev): text, onSeek(i), onLive(),
   * onBranchForm(moment): Node, canBranch, trimmed(): whether events older than the first are gone}
   */
  constructor(els, opts) {
    Object.assign(this, opts);
    this.box = els.box;
    this.bannerBox = els.banner;
    this.pos = null; // null = live
    this.playing = false;
    this.speed = 5;
    this.pending = null;
    this.build();
  }

  build() {
    const id = `${this.idBase}-scrub`;
    this.range = h('input', { type: 'range', id, min: 0, max: 0, step: 1, value: 0, testid: 'scrubber',
      'aria-describedby': `${id}-doc` });
    this.range.addEventListener('input', () => this.want(Number(this.range.value)));
    this.where = h('output', { for: id, class: 'lw-scrub-where', testid: 'scrub-where' });
    this.live = h('button', { type: 'button', class: 'lw-btn lw-small lw-primary', testid: 'back-to-live',
      onclick: () => this.goLive() }, 'Back to live');
    this.play = h('button', { type: 'button', class: 'lw-btn lw-small', testid: 'replay-play', 'aria-pressed': 'false',
      onclick: () => this.togglePlay() }, '▶ Replay');
    this.speedSel = h('select', { id: `${id}-speed`, testid: 'replay-speed' },
      REPLAY_SPEEDS.map((s) => h('option', { value: s }, `${s}×`)));
    this.speedSel.value = String(this.speed);
    this.speedSel.addEventListener('change', () => { this.speed = Number(this.speedSel.value); });
    this.status = h('p', { class: 'lw-status', testid: 'replay-status', 'aria-live': 'polite' });
    this.branchBox = h('div', { class: 'lw-branch', testid: 'branch-box', hidden: true });
    this.box.append(
      h('div', { class: 'lw-panel-head' },
        h('label', { for: id, class: 'lw-block-label' }, 'Moment ', h('small', {}, 'the view is rebuilt from the event stream')),
        h('div', { class: 'lw-row lw-wrap lw-scrub-actions' }, this.play,
          h('label', { for: `${id}-speed` }, 'at'), this.speedSel, this.live)),
      h('div', { class: 'lw-scrub-row' }, this.range, this.where),
      h('p', { class: 'lw-doc', id: `${id}-doc` }, 'Arrow keys step one event, Page Up/Down ten; the right end is live. '
        + 'Replay speed is against the run’s own real time (1× = as it happened).'),
      this.status, this.branchBox);
    this.bannerText = h('span', { testid: 'past-banner-text' });
    this.bannerBox.append(h('strong', {}, '⏪ Viewing the past. '), this.bannerText, ' ',
      h('button', { type: 'button', class: 'lw-btn lw-small', onclick: () => this.goLive() }, 'Back to live'));
  }

  /** Coalesce drags to one rebuild per frame. */
  want(i) {
    this.pending = i;
    if (this.raf) return;
    this.raf = requestAnimationFrame(() => {
      this.raf = 0;
      const n = this.events().length;
      const i2 = this.pending;
      this.pending = null;
      if (i2 >= n) this.goLive();
      else this.seekTo(i2);
    });
  }

  seekTo(i) {
    const n = this.events().length;
    if (!n) return;
    this.pos = Math.max(0, Math.min(n - 1, i));
    this.onSeek(this.pos);
    this.showBranchForm();
  }

  goLive() {
    this.stop();
    if (this.pos === null) return;
    this.pos = null;
    this.branchBox.hidden = true;
    this.branchBox.replaceChildren();
    this.branchAt = null;
    setText(this.status, '');
    this.onLive();
  }

  showBranchForm() {
    if (!this.canBranch || this.playing) return;
    const ev = this.events()[this.pos];
    if (this.branchAt === ev.id) return;
    const box = this.branchBox;
    // keep the learner's edits while they work in the form
    if (box.contains(document.activeElement)) return;
    this.branchAt = ev.id;
    box.replaceChildren(this.onBranchForm(ev));
    box.hidden = false;
  }

  togglePlay() {
    if (this.playing) { this.stop(); setText(this.status, 'Replay paused.'); return; }
    const evs = this.events();
    if (!evs.length) return;
    if (this.pos === null || this.pos >= evs.length - 1) this.seekTo(0);
    this.playing = true;
    this.branchBox.hidden = true;
    this.budget = 0;
    this.last = performance.now();
    setText(this.status, `Replaying at ${this.speed}× from t=${fmtT(evs[this.pos].t_sim)} s.`);
    this.timer = setInterval(() => this.stepReplay(), 50);
    this.sync();
  }

  stop() {
    if (!this.playing) return;
    this.playing = false;
    clearInterval(this.timer);
    if (this.pos !== null) this.showBranchForm();
    this.sync();
  }

  /** Advance by the real time elapsed × speed, through the events' own t_real gaps. */
  stepReplay() {
    const evs = this.events();
    const now = performance.now();
    this.budget += ((now - this.last) / 1000) * this.speed;
    this.last = now;
    let i = this.pos;
    while (i + 1 < evs.length) {
      const gap = Math.min(MAX_GAP_S, Math.max(0, (evs[i + 1].t_real || 0) - (evs[i].t_real || 0)));
      if (gap > this.budget) break;
      this.budget -= gap;
      i++;
    }
    if (i !== this.pos) { this.pos = i; this.onSeek(i); }
    if (i >= evs.length - 1) {
      this.stop();
      setText(this.status, `Replay finished at the last recorded event (t=${fmtT(evs[i].t_sim)} s).`);
    }
  }

  /** Reflect position, length and mode; called from the widget's render. */
  sync(buffered = 0) {
    const evs = this.events();
    const n = evs.length;
    const past = this.pos !== null;
    const pos = past ? this.pos : n;
    const trimmed = this.trimmed();
    const key = `${n}|${pos}|${buffered}|${this.playing}|${this.pending}|${trimmed}`;
    if (key === this.synced) return; // nothing moved: no DOM work this frame
    this.synced = key;
    setAttr(this.range, 'max', String(n));
    if (this.pending === null && Number(this.range.value) !== pos) this.range.value = String(pos);
    let text;
    if (!past) {
      text = !n ? 'live · no events yet' : trimmed
        ? `live · the newest ${n.toLocaleString('en')} events (older ones were trimmed)` : `live · ${n.toLocaleString('en')} events so far`;
    } else {
      const ev = evs[pos];
      text = `t=${fmtT(ev.t_sim)} s · event ${(pos + 1).toLocaleString('en')} of ${n.toLocaleString('en')}: ${this.describe(ev)}`;
    }
    setText(this.where, text);
    setAttr(this.range, 'aria-valuetext', text);
    setAttr(this.box, 'data-mode', past ? 'past' : 'live');
    this.live.hidden = !past;
    setText(this.play, this.playing ? '‖ Pause replay' : '▶ Replay');
    setAttr(this.play, 'aria-pressed', this.playing ? 'true' : 'false');
    this.bannerBox.hidden = !past;
    if (past) {
      setText(this.bannerText, `t=${fmtT(evs[pos].t_sim)} s, rebuilt from ${(pos + 1).toLocaleString('en')} events. `
        + (trimmed ? `The stream keeps only its newest events, so this view starts at t=${fmtT(evs[0].t_sim)} s: `
          + 'jobs and counts from before then are missing. ' : '')
        + (buffered ? `${buffered.toLocaleString('en')} live event${buffered === 1 ? '' : 's'} held until you return.`
          : 'Live updates are held until you return.'));
    }
  }
}
