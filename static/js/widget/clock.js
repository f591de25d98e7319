// The lab's simulated clock: pause, resume, single-step, speed (log-scale stops), and the clock
// readout above the panels.

import { errorText, fmtNum, fmtT, h, nearestIndex, section, setAttr, setText, statusLine } from './util.js';

const SPEED_STOPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
const STEP_CHOICES = [10, 30, 60, 300];

export function install(W) {
  const { S, els } = W;

  function buildClock(full) {
    const kids = [];
    if (full) {
      els.pause = h('button', { type: 'button', class: 'lw-btn', testid: 'clock-pause', 'aria-pressed': 'false',
        onclick: togglePause }, 'Pause');
      const stepSel = h('select', { id: 'lw-step', testid: 'clock-step-size', 'aria-label': 'Step size' },
        STEP_CHOICES.map((v) => h('option', { value: v }, `${v} s`)));
      stepSel.value = '30';
      els.step = h('button', { type: 'button', class: 'lw-btn', testid: 'clock-step',
        onclick: () => clockAction({ action: 'step', seconds: Number(stepSel.value) }) }, 'Step');
      kids.push(h('div', { class: 'lw-row lw-wrap' }, els.pause, els.step, stepSel),
        h('p', { class: 'lw-doc' }, 'Space pauses and resumes, S steps a paused clock; press ? for every shortcut.'));
    }
    const range = h('input', { type: 'range', id: 'lw-speed', testid: 'speed-slider', min: 0,
      max: SPEED_STOPS.length - 1, step: 1 });
    const out = h('output', { for: 'lw-speed', class: 'lw-speed-out', testid: 'speed-value' });
    range.addEventListener('input', () => {
      const v = SPEED_STOPS[Number(range.value)];
      range.setAttribute('aria-valuetext', `${v} times`);
      setText(out, `${v}×`);
    });
    range.addEventListener('change', () => clockAction({ speed: SPEED_STOPS[Number(range.value)] }));
    els.speed = { range, out };
    els.clockStatus = statusLine('clock-status');
    kids.push(h('label', { for: 'lw-speed', class: 'lw-block-label' }, 'Clock speed ', h('small', {}, '(simulated s per real s, log scale)')),
      h('div', { class: 'lw-row' }, range, out), els.clockStatus);
    return section('Clock', ...kids);
  }

  function syncSpeed() {
    if (!els.speed || !S.clock) return;
    const { range, out } = els.speed;
    const sp = S.settings.speed ?? S.clock.speed;
    if (document.activeElement !== range) {
      range.value = String(nearestIndex(SPEED_STOPS, sp));
      range.setAttribute('aria-valuetext', `${fmtNum(sp)} times`);
      setText(out, `${fmtNum(sp)}×`);
    }
  }

  function togglePause() {
    return clockAction(() => ({ action: S.clock && S.clock.paused ? 'resume' : 'pause' }));
  }

  let queue = Promise.resolve();

  /* One clock action: a body, or a function that makes it when its turn comes. Actions go to the server one at
   * a time, in the order they were asked, so a pause asked after a resume is never overtaken by it (the guided
   * step's own resume and the pause at its moment), and a toggle reads the state the one before it left. */
  function clockAction(body) {
    const turn = queue.then(() => send(typeof body === 'function' ? body() : body));
    queue = turn.catch(() => {});
    return turn;
  }

  async function send(body) {
    const res = await W.api('POST', W.labPath('/clock'), body);
    if (res.ok) {
      const c = res.data.clock;
      S.clock = { t: c.t, speed: c.speed, paused: c.paused, at: performance.now() };
      if (body.speed) S.settings = { ...S.settings, speed: c.speed };
      if (els.clockStatus) setText(els.clockStatus, '');
      syncSpeed();
      W.markDirty();
    } else {
      setText(els.clockStatus, errorText(res.data, res.status));
    }
  }

  function renderClock(now) {
    setText(els.clock, `t = ${fmtT(now)} s`);
    const c = S.clock || {};
    const slow = S.slowed && !c.paused
      ? ` asked, running at ${fmtNum(S.slowed.running)}×: ${S.slowed.reason}` : '';
    // disconnected: the last moment seen, held still (stream.js), not a guess at the server's clock
    setText(els.clockSub, S.lost ? '◌ not live: the last moment seen'
      : `${c.paused ? '‖ paused' : '▶ running'} · ${fmtNum(c.speed)}×${slow}`);
    els.clockP.dataset.frozen = S.lost ? 'yes' : 'no';
    els.clockP.dataset.slowed = slow ? 'yes' : 'no';
    els.clockP.dataset.value = String(Math.round(now));
    els.clockP.dataset.paused = c.paused ? 'yes' : 'no';
    if (els.pause) {
      setText(els.pause, c.paused ? 'Resume' : 'Pause');
      setAttr(els.pause, 'aria-pressed', c.paused ? 'true' : 'false');
    }
  }

  return { buildClock, syncSpeed, togglePause, clockAction, renderClock };
}
