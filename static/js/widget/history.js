// The past: any moment rebuilt from the event stream. The live model is put aside untouched and a
// fresh one is folded from the first event up to the chosen one with the same reducer the live view
// uses (model.js replayEvent), so the past can never be drawn differently from how it looked live.
// Live events meanwhile are held, then applied in order on the way back to live.

import { idCmp } from './util.js';
import { emptyModel, initialSettings, replayEvent } from './model.js';

// the state a past moment is rebuilt into; the live values are put aside meanwhile
const MODEL_KEYS = ['settings', 'clock', 'counts', 'workers', 'jobs', 'breaker', 'faults', 'faultUntil', 'tl',
  'redeliveries', 'retries', 'jobRetries', 'runFrom', 'retryBucket', 'deaths', 'dlq', 'history', 'found', 'snapId'];

export function install(W) {
  const { root, S, els } = W;

  function holdLive(ev) {
    const p = S.past;
    const last = p.buffer.length ? p.buffer[p.buffer.length - 1].id : S.lastId;
    if (last && idCmp(ev.id, last) <= 0) return;
    p.buffer.push(ev);
    W.markDirty();
  }

  function resetPastModel() {
    const speed = (S.past.stash.clock || {}).speed;
    Object.assign(S, emptyModel(), {
      settings: initialSettings(S.meta, W.preset, speed),
      clock: { t: 0, speed: speed || 20, paused: true, at: performance.now() },
      dlq: [], history: new Map(), found: new Map(),
    });
    S.past.at = -1;
  }

  /** Show the lab as it stood just after event i (an index into S.events). */
  function seek(i) {
    if (!S.past) {
      const stash = {};
      for (const k of MODEL_KEYS) stash[k] = S[k];
      S.past = { stash, buffer: [], at: -1 };
      root.dataset.view = 'past';
      if (els.controls) els.controls.inert = true; // controls act on the live lab: not from the past
      resetPastModel();
    } else if (i < S.past.at) {
      resetPastModel();
    }
    const now = performance.now();
    for (let k = S.past.at + 1; k <= i; k++) replayEvent(S, S.events[k], now);
    S.past.at = i;
    const ev = S.events[i];
    S.clock = { ...S.clock, t: ev.t_sim, paused: true, at: performance.now() };
    root.dataset.viewEvent = ev.id;
    W.syncControls();
    S.logRebuild = true;
    W.markDirty();
  }

  function goLive() {
    if (!S.past) return;
    const { stash, buffer } = S.past;
    for (const k of MODEL_KEYS) S[k] = stash[k];
    S.past = null;
    root.dataset.view = 'live';
    delete root.dataset.viewEvent;
    if (els.controls) els.controls.inert = false;
    for (const ev of buffer) W.ingest(ev);
    W.syncControls();
    S.logRebuild = true;
    W.refresh();
    W.markDirty();
  }

  /** The event the past view stands at (null when live). */
  const pastAt = () => (S.past ? S.events[S.past.at] : null);

  return { holdLive, seek, goLive, pastAt };
}
