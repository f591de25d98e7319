// Guided steps (issue 28): the chapter's "Try this" list, one step at a time, inside the lab.
//
// The steps are a chapter home's STEPS (served by /api/meta `steps`), each naming a claim of that home
// whose test proves what it shows. A step sets the lab up with the widget's own scenario buttons and
// settings, asks its question (predict.js commits the guess and measures the run), acts (a kill or a cut
// lease when the run's job is claimed), pauses the clock at the moment that matters, points at the element
// that shows it, and when the run has settled says in one sentence what the lab measured. Every step acts
// (tests/unit/test_steps.py). Each "Try this" item in the prose gets a button that opens the stepper at that step.
//
// At the pause the card docks: a bar fixed to the bottom of the screen (its title, status, verdict and
// Continue), with the panel it points at scrolled into the room above it, so the next move is where the
// learner is looking. It stays docked until the step changes, when it returns to the top of the lab.

import { writesSettled } from './lab.js';
import { errorText, fmtT, h, narrate, setText } from './util.js';
import { cleanGuess, shown, whyText } from './predict-model.js';

const LOOK = 'lw-step-look';
const DOCKED = 'lw-step-docked';
const HOLD_MS = 8000; // how long a pause keeps its panel in place unless the learner moves first

export function install(W) {
  const { S, root, preset } = W;
  let steps = [];
  let at = 0;
  let run = null; // the step being acted out: {step, p (its S.predict), all: events since it started, ids, done: Set}
  let els = null;

  function buildStepper() {
    if (els || W.compact || S.lab.viewer) return;
    steps = (S.meta.steps || {})[preset] || [];
    const mount = W.q('stepper');
    if (!mount || !steps.length) return;
    const hid = `${root.id}-step-h`;
    els = {
      mount,
      head: h('h3', { id: hid, tabindex: '-1', testid: 'stepper-count' }),
      body: h('div', { class: 'lw-step-body' }),
      status: h('p', { class: 'lw-step-status', testid: 'stepper-status', role: 'status', 'aria-live': 'polite' }),
      verdict: h('p', { class: 'lw-step-verdict', testid: 'stepper-verdict', role: 'status' }),
      says: h('p', { class: 'lw-step-says', testid: 'stepper-says', hidden: true }),
      nav: h('div', { class: 'lw-row lw-wrap lw-step-nav' }),
    };
    // the step's buttons share the heading's row, so the card stays short enough for the pipeline to fit
    // under it on the first screen (1280×800)
    const box = h('section', { class: 'lw-stepper', testid: 'stepper', 'aria-labelledby': hid },
      h('div', { class: 'lw-step-top' }, els.head,
        h('div', { class: 'lw-row lw-wrap lw-step-tools' }, els.nav,
          h('button', { type: 'button', class: 'lw-btn lw-small', testid: 'stepper-leave', onclick: leave }, 'Play freely'))),
      els.body, els.status, els.verdict, els.says);
    els.box = box;
    // the docked bar's height, for the page's scroll padding: a focused control never hides under it (WCAG 2.4.11);
    // a bar that grew over the panel it points at (the verdict arrived after the pause) brings the panel back up
    new ResizeObserver(() => { padForDock(); keepInView(); }).observe(box);
    // and a page whose content above the panel grew or shrank while paused has moved it; so has the panel's own
    // growth (its words, its rows) where the page's height does not change (a taller column beside it)
    els.lookSize = new ResizeObserver(() => keepInView());
    els.lookSize.observe(document.body);
    els.opener = h('button', { type: 'button', class: 'lw-btn', testid: 'stepper-open', hidden: true,
      onclick: () => open(at) }, `Guided steps (${steps.length})`);
    mount.replaceChildren(box, els.opener);
    mount.hidden = false;
    root.addEventListener('lab:event', (e) => onEvent(e.detail));
    root.addEventListener('lab:verdict', () => { if (run && run.p === S.predict) settled(); });
    linkProse();
    show(0);
  }

  // ---- the prose: a "Do this step in the lab" button beside every Try-this item ------------------
  function linkProse() {
    const prose = document.querySelector('.prose');
    if (!prose || root.id !== 'lab-widget') return;
    const marker = [...prose.querySelectorAll('h2, h3, p')].find((el) => /^Try this/.test(el.textContent.trim()));
    const list = marker && [...prose.querySelectorAll('ol')].find(
      (ol) => marker.compareDocumentPosition(ol) & Node.DOCUMENT_POSITION_FOLLOWING);
    if (!list) return;
    [...list.children].slice(0, steps.length).forEach((li, i) => {
      li.append(' ', h('button', { type: 'button', class: 'lw-btn lw-small lw-step-link', testid: `step-link-${i + 1}`,
        onclick: () => { open(i); root.scrollIntoView({ block: 'start', behavior: W.reduceMotion.matches ? 'auto' : 'smooth' }); } },
      `Do step ${i + 1} in the lab`));
    });
  }

  function open(i) {
    els.box.hidden = false;
    els.opener.hidden = true;
    show(i);
    els.head.focus({ preventScroll: true });
  }

  async function leave() {
    await stopRun();
    dock(false);
    els.box.hidden = true;
    els.opener.hidden = false;
    els.opener.focus();
  }

  // ---- the bar at the pause -------------------------------------------------------------------------
  function dock(on) {
    if (on === els.box.classList.contains(DOCKED)) return;
    els.box.classList.toggle(DOCKED, on);
    els.mount.dataset.docked = on ? 'yes' : 'no';
    padForDock();
  }

  function padForDock() {
    const docked = els.box.classList.contains(DOCKED);
    const html = document.documentElement;
    html.classList.toggle('lw-step-docking', docked);
    html.style.setProperty('--lw-dock-h', docked ? `${Math.ceil(els.box.offsetHeight) + 16}px` : '0px');
  }

  /** At a pause, the outlined panel back into view if the docked bar now covers its top, or the page moved it up
   * past the top of the screen (or of the pinned strip there). */
  function keepInView() {
    const el = document.querySelector(`.${LOOK}`);
    if (!el || !els.box.classList.contains(DOCKED)) return;
    const r = el.getBoundingClientRect();
    const top = parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop) || 0;
    if (r.top < top || r.top + Math.min(r.height, 100) > els.box.getBoundingClientRect().top) bring(el);
  }

  /** The panel into the room the bar leaves: centred between any pinned strip at the top (the phone's queue
   * strip, html's scroll-padding-top) and the bar, or from the top of that room if it is taller than it. */
  function bring(panel) {
    const top = parseFloat(getComputedStyle(document.documentElement).scrollPaddingTop) || 0;
    const room = els.box.getBoundingClientRect().top - top;
    const r = panel.getBoundingClientRect();
    const gap = Math.max(8, (room - r.height) / 2);
    // to a place on the page, not by an amount: a second call while the first scroll still glides lands the same
    window.scrollTo({ top: window.scrollY + r.top - top - gap, behavior: W.reduceMotion.matches ? 'auto' : 'smooth' });
  }

  /** For the first seconds of a pause, whatever moves the panel without resizing anything observed (a late row
   * beside it, the browser's own scroll adjustments) is undone as well; the learner's own wheel, touch, key or
   * pointer ends that watch at once, so their scrolling is never fought. */
  function hold(mine) {
    const quit = new AbortController();
    const end = performance.now() + HOLD_MS;
    let glide = performance.now(); // the last scroll event: a scroll still gliding is left to land
    const opts = { passive: true, capture: true, signal: quit.signal };
    for (const t of ['wheel', 'touchstart', 'keydown', 'pointerdown']) addEventListener(t, () => quit.abort(), opts);
    addEventListener('scroll', () => { glide = performance.now(); }, opts);
    const tick = () => {
      if (quit.signal.aborted) return;
      if (run !== mine || !mine.paused || performance.now() > end) { quit.abort(); return; }
      if (performance.now() - glide > 150) keepInView();
      setTimeout(tick, 200);
    };
    setTimeout(tick, 200);
  }

  // ---- one step: ask, then act it out (or reveal) ----------------------------------------------------
  async function show(i) {
    await stopRun();
    const fromBar = els.box.classList.contains(DOCKED);
    dock(false);
    at = Math.max(0, Math.min(steps.length - 1, i));
    const step = steps[at];
    els.mount.dataset.step = String(at + 1);
    setText(els.head, `Step ${at + 1} of ${steps.length}: ${step.title}`);
    setText(els.status, '');
    setText(els.verdict, '');
    // the lab's own status and hint lines speak of the step before: a new step starts with none
    for (const el of root.querySelectorAll('.lw-status, .lw-hint')) if (!el.closest('.la-panel')) setText(el, '');
    // nor the prediction card's verdict of the step before (this step's comes with its run)
    const card = root.querySelector('[data-testid="predict"]');
    if (card && (!S.predict || S.predict.result)) card.hidden = true;
    delete els.verdict.dataset.measured;
    delete els.status.dataset.paused;
    els.says.hidden = true;
    const spec = step.predict || {};
    const fid = `${root.id}-step-guess`;
    // the guess and its button on one line under the question: the card stays short on the first screen
    const run = h('button', { type: 'submit', class: 'lw-btn lw-primary', testid: 'stepper-run' }, 'Lock in my guess and run');
    let field;
    if (spec.kind === 'choice') {
      field = h('fieldset', {}, h('legend', {}, spec.question), h('div', { class: 'lw-row lw-step-answer' },
        ...spec.choices.map(([v, label]) => h('label', { class: 'lw-radio' },
          h('input', { type: 'radio', name: fid, value: v, testid: `stepper-choice-${v}` }), ` ${label}`)), run));
    } else {
      const num = spec.kind === 'number';
      field = [h('label', { for: fid, testid: 'stepper-question' }, spec.question), h('div', { class: 'lw-row lw-step-answer' },
        h('input', num
          ? { type: 'number', id: fid, testid: 'stepper-guess', min: spec.min, max: spec.max, step: 1, inputmode: 'numeric', class: 'lw-num' }
          : { type: 'text', id: fid, testid: 'stepper-guess', class: 'lw-step-text', autocomplete: 'off' }),
        spec.unit ? h('span', { class: 'lw-unit' }, spec.unit) : null, run)];
    }
    const form = h('form', { class: 'lw-step-form', testid: 'stepper-form', novalidate: true }, field);
    form.addEventListener('submit', (e) => { e.preventDefault(); go(form); });
    els.body.replaceChildren(form);
    nav();
    if (fromBar) { // Next, Back or Again was pressed in the bar: the new step's question is the next move
      root.scrollIntoView({ block: 'start', behavior: W.reduceMotion.matches ? 'auto' : 'smooth' });
      els.head.focus({ preventScroll: true });
    }
  }

  function nav(extra = []) {
    const had = els.nav.contains(document.activeElement); // its button goes: the bar keeps the keyboard
    els.nav.replaceChildren(...extra,
      h('button', { type: 'button', class: 'lw-btn', testid: 'stepper-back', disabled: at === 0, onclick: () => show(at - 1) }, '← Back'),
      h('button', { type: 'button', class: 'lw-btn', testid: 'stepper-next', disabled: at === steps.length - 1,
        onclick: () => show(at + 1) }, 'Next →'));
    if (had) els.head.focus({ preventScroll: true });
  }

  async function go(form) {
    const step = steps[at];
    const spec = step.predict || {};
    const input = form.querySelector('input:checked') || form.querySelector('input[type="number"], input[type="text"]');
    const raw = input ? input.value : '';
    let guess = null;
    if (raw !== '' && spec.kind) {
      guess = cleanGuess(spec, raw);
      if (guess == null) {
        setText(els.status, `Enter a whole number from ${spec.min} to ${spec.max}, or leave it empty to just watch.`);
        input.focus();
        return;
      }
    }
    for (const x of form.querySelectorAll('input, button')) x.disabled = true;
    await act(step, guess);
  }

  function rerunButton() {
    return h('button', { type: 'button', class: 'lw-btn', testid: 'stepper-rerun', onclick: () => show(at) }, 'Run this step again');
  }

  async function act(step, guess) {
    const spec = step.predict;
    run = { step, p: null, all: [], ids: new Set(), done: new Set(), paused: false, moment: null, after: null,
      jobless: step.do.some((a) => a.click && !a.on) }; // a panel's set-up (a schedule), not a job's act
    const mine = run;
    els.mount.dataset.runAfter = S.lastId || '0'; // the run watches the events after this one (a test reads the same)
    setText(els.status, 'Setting the lab up as the step says…');
    nav([rerunButton()]);
    // the answer waits for the moment: a DLQ that is full before its replay is not the step's answer yet
    const p = await W.commitAndRun(spec, guess, () => start(step, mine),
      { scenario: `step:${step.claim}`, events: [], hold: true });
    if (run !== mine) return;
    run.p = p;
    if (!p) { setText(els.status, 'The step could not start; see the message above the lab.'); return; }
    sync();
    if (!run.moment) setText(els.status, 'Running. The clock pauses at the moment that matters.');
  }

  /** The step's set-up, in order; resolves to the run's job ids (null if something was refused). */
  async function start(step, mine) {
    for (const a of step.do) {
      if (run !== mine) return null;
      if (a.on) continue; // acted when its event arrives (sync)
      if (a.settings) {
        const res = await W.api('PATCH', W.labPath('/settings'), a.settings);
        if (!res.ok) { setText(els.status, `Could not apply: ${errorText(res.data, res.status)}`); return null; }
        S.settings = res.data.settings;
        W.syncControls();
      } else if (a.scenario) {
        const s = (S.meta.scenario_buttons[preset] || []).find((b) => b.id === a.scenario);
        const btn = root.querySelector(`[data-testid="scenario-${a.scenario}"]`);
        const hint = root.querySelector('[data-testid="scenario-hint"]');
        const jobs = s && btn ? await W.runScenario(s, btn, hint) : null;
        if (jobs == null) return null;
        jobs.forEach((id) => mine.ids.add(String(id)));
      } else if (a.click) {
        if (!await operate(a)) { setText(els.status, 'The control this step presses is not on the page.'); return null; }
      } else if (a.api) { // a set-up the page has no button for (a load left running by the step before)
        const [method, path, body] = a.api;
        const res = await W.api(method, W.labPath(path), body);
        if (!res.ok) { setText(els.status, `Could not set the lab up: ${errorText(res.data, res.status)}`); return null; }
      } else if (a.wait) { // a panel catching up with that set-up (its own poll): [testid, attribute, value]
        const [id, attr, value] = a.wait;
        if (!await control(id, (x) => x.getAttribute(attr) === value)) { setText(els.status, 'The lab did not get ready for this step.'); return null; }
      } else if (a.fault) {
        const res = await W.api('POST', W.labPath('/faults'), a.fault);
        if (!res.ok) { setText(els.status, `Could not start the fault: ${errorText(res.data, res.status)}`); return null; }
      } else if (a.enqueue) {
        const res = await W.postJob(a.enqueue);
        if (!res.ok) { setText(els.status, `Could not send the job: ${errorText(res.data, res.status)}`); return null; }
        mine.ids.add(String(res.data.job_id));
      }
      sync();
    }
    mine.setupId = S.lastId || '0'; // the set-up is done: its moment is an event after this one
    els.mount.dataset.setupId = mine.setupId; // (a test reads the same)
    sync();
    return [...mine.ids];
  }

  /** The page's own control, once `ready(el)` holds (checked every 100 ms for 60 s: a button may wait for the lab,
   * as the inline handler's waits for the server's transcode after a 504); null if it never does. */
  async function control(testid, ready) {
    for (let i = 0; i < 600; i++) {
      const el = document.querySelector(`[data-testid="${testid}"]`);
      if (el && ready(el)) return el;
      await new Promise((r) => { setTimeout(r, 100); });
    }
    return null;
  }

  /** Pick an option of one of the page's own selects (the DLQ's reasons), once the option is offered. */
  async function choose(testid, value) {
    const el = await control(testid, (x) => [...x.options].some((o) => o.value === value));
    if (el) { el.value = value; el.dispatchEvent(new Event('change', { bubbles: true })); }
    return !!el;
  }

  /** Press one of the page's own controls (a chapter panel's button), once it is enabled; `answered`: and wait
   * until what it sent (a panel's POST) has been answered, so the step's next act lands after it. */
  async function press(testid, answered = false) {
    const el = await control(testid, (x) => !x.disabled);
    el?.click();
    if (el && answered) await writesSettled();
    return !!el;
  }

  /** Type into one of the page's own fields (a panel's rate, its job count), as the learner would. */
  async function fill(testid, value) {
    const el = await control(testid, (x) => !x.disabled);
    if (el) { el.value = String(value); el.dispatchEvent(new Event('input', { bubbles: true })); el.dispatchEvent(new Event('change', { bubbles: true })); }
    return !!el;
  }

  /** A step's use of the page's controls: its fields filled, its options picked, then its button pressed. */
  async function operate(a) {
    const filled = await Promise.all(Object.entries(a.fill || {}).map(([id, v]) => fill(id, v)));
    const picked = await Promise.all(Object.entries(a.choose || {}).map(([id, v]) => choose(id, v)));
    return filled.every(Boolean) && picked.every(Boolean) && press(a.click, a.answered);
  }

  // ---- the run's events: triggers, the moment, the measurement's input ------------------------------
  function onEvent(ev) {
    if (!run) return;
    run.all.push(ev); // kept from the start: a claim may arrive before the enqueue's answer names the job
    sync();
  }

  function sync() {
    if (!run) return;
    // a step that presses a chapter panel's control (a schedule, no jobs) watches every event after it
    // (and a lab-wide event, such as an outage ending, is every run's)
    const mine = run.jobless ? run.all : run.all.filter((e) => e.job_id == null || run.ids.has(String(e.job_id)));
    // its figure reads what came after its set-up: a jobless step watches every event, and jobs the step before
    // left going (released as its set-up reset the panel) are not this step's runs
    const measured = run.jobless && run.setupId ? mine.filter((e) => later(e.id, run.setupId)) : mine;
    if (S.predict && S.predict.scenario === `step:${run.step.claim}`) S.predict.events = measured;
    for (const [i, a] of run.step.do.entries()) {
      if (!a.on || run.done.has(i)) continue;
      const ev = mine.filter((e) => e.type === a.on)[(a.n || 1) - 1]; // its n-th such event (the first by default)
      if (!ev) continue;
      run.done.add(i);
      run.after = ev;
      trigger(a, ev);
    }
    // the moment comes after the step's own acts: a leader elected after the kill, not the one it killed
    const acted = run.step.do.every((a, i) => !a.on || run.done.has(i));
    const anchor = run.step.moment_after ? mine.find((e) => e.type === run.step.moment_after) : run.after;
    const want = Object.entries(run.step.moment_data || {});
    // never before the set-up is done; and an event that is not one of the step's own jobs' counts only after it
    // (a lab-wide one, a burst the step before left going). The step's own jobs' count from their start: a lab
    // fast enough (200×) may pass the moment before the set-up's last answer is back (36 retries at 10 s)
    const own = (e) => !run.jobless && e.job_id != null;
    const m = !run.moment && run.step.moment && acted && run.setupId && (anchor || !run.step.moment_after)
      && mine.slice(mine.indexOf(anchor) + 1).filter((e) => (own(e) || later(e.id, run.setupId))
        && e.type === run.step.moment && want.every(([k, v]) => (e.data || {})[k] === v))[Math.min(run.step.moment_n || 1, run.landed || Infinity) - 1];
    if (m) moment(m);
  }

  /** Is stream id `a` ("ms-seq") after `b`? */
  function later(a, b) {
    const [am, as] = String(a).split('-').map(Number), [bm, bs] = String(b).split('-').map(Number);
    return am > bm || (am === bm && (as || 0) > (bs || 0));
  }

  /** A kill or a cut lease when the step's event comes (its job's claim, its first tenth): the clock holds
   * still while it lands. A control of the page (the DLQ's replay by reason) is used as the learner would, on
   * the running clock. */
  async function trigger(a, ev) {
    const mine = run;
    if (a.settings) { // the pool resized, a setting changed, as the learner would mid-run
      const res = await W.api('PATCH', W.labPath('/settings'), a.settings);
      if (res.ok) { S.settings = res.data.settings; W.syncControls(); }
    }
    if (a.click) {
      if (!await operate(a)) setText(els.status, 'The control this step presses is not on the page.');
      return;
    }
    if (!a.kill && !a.kills && !a.expire) return;
    await W.clockAction({ action: 'pause' });
    if (a.kill && ev.worker_id) await W.api('POST', W.labPath(`/workers/${encodeURIComponent(ev.worker_id)}/kill`), {});
    if (a.kills) { // rapid kills: the workers that claimed the step's jobs (read from the claims themselves, not the
      // workers panel, which may not have drawn the last one yet), one after another; a pool slow to answer is asked
      // again. The moment then waits for as many redeliveries as kills landed on a job of the step, never more.
      const holders = new Map();
      for (const e of mine.all) if (e.type === 'job.claimed' && mine.ids.has(String(e.job_id))) holders.set(String(e.job_id), e.worker_id);
      let landed = 0;
      for (const id of [...new Set(holders.values())].slice(0, a.kills)) {
        for (let tries = 0; tries < 3; tries += 1) {
          const res = await W.api('POST', W.labPath(`/workers/${encodeURIComponent(id)}/kill`), {});
          if (res.ok && mine.ids.has(String(res.data.job_id))) landed += 1;
          if (res.ok || res.status === 409 || res.status === 429) break; // done, or nothing to kill, or not ours to retry
          await new Promise((r) => setTimeout(r, 300));
        }
      }
      mine.landed = landed;
    }
    if (a.expire) await W.api('POST', W.labPath(`/jobs/${encodeURIComponent(ev.job_id)}/lease/expire`), {});
    if (run === mine && !mine.moment) await W.clockAction({ action: 'resume' }); // unless its moment came meanwhile
  }

  async function moment(ev) {
    const mine = run;
    mine.moment = ev;
    els.mount.dataset.momentId = ev.id; // the event it paused at (a test reads the same one back)
    if (S.predict && S.predict.scenario === `step:${mine.step.claim}`) {
      S.predict.hold = false; // measured from now
      S.predict.moment = ev; // a `moment:` measure reads the moment's own figure, `events:` counts up to it
      S.predict.panel = panelFigure;
    }
    await W.clockAction({ action: 'pause' });
    if (run !== mine) { await W.clockAction({ action: 'resume' }); return; } // the learner moved on meanwhile
    run.paused = true;
    dock(true);
    const el = look(run.step.look);
    const what = el ? nameOf(el) : '';
    const line = `Paused at t = ${fmtT(ev.t_sim)} s: ${narrate(ev, S.meta, W.labelOf)}.`;
    setText(els.status, `${line} ${what ? `Look at “${what}”. ` : ''}Continue to let the run finish.`);
    callout(run.p && run.p.result ? els.says.textContent : `${line} Press Continue in the step bar when you have looked.`);
    els.status.dataset.paused = 'yes';
    const go = h('button', { type: 'button', class: 'lw-btn lw-primary', testid: 'stepper-continue', onclick: resume }, 'Continue ▶');
    nav([go, rerunButton()]);
    // the learner's last act was the step's own button (now disabled): Continue is where their keyboard goes
    // next; focus that is elsewhere (a setting being typed) stays there
    const f = document.activeElement;
    if (!f || f === document.body || els.box.contains(f)) go.focus({ preventScroll: true });
    if (el) bring(el); // once the bar has its words: the room above it is what is left
    hold(run);
  }

  /** A figure a chapter panel measured itself (the watchers' rows): its element's attribute, once the panel
   * has finished its round (its data-state is no longer `watching`); null until then. */
  function panelFigure(testid, attr) {
    const el = document.querySelector(`[data-testid="${testid}"]`);
    const panel = el && el.closest('.la-panel');
    if (!el || (panel && panel.dataset.state === 'watching')) return null;
    const v = Number(el.getAttribute(attr));
    return el.hasAttribute(attr) && Number.isFinite(v) ? v : null;
  }

  function look(testid) {
    unlook();
    const el = testid && (root.querySelector(`[data-testid="${testid}"]`) || document.querySelector(`[data-testid="${testid}"]`));
    if (!el) return null;
    const panel = el.closest('.lw-panel') || el;
    if (panel.tagName === 'DETAILS') panel.open = true; // a folded panel (the DLQ) is unfolded to be seen
    panel.classList.add(LOOK);
    els.lookSize.observe(panel);
    // the step's words travel with the element they point at, so the reader need not look back up
    els.callout = h('div', { class: 'lw-step-callout', testid: 'stepper-callout', 'aria-hidden': 'true' },
      h('strong', {}, `Step ${at + 1}: `), h('span', {}, ''));
    const summary = panel.querySelector(':scope > summary');
    // a narrow element (a readout tile) would be stretched by the words: they go above its row instead
    if (panel.getBoundingClientRect().width < 280 && panel.parentElement) panel.parentElement.before(els.callout);
    else if (panel.tagName === 'TABLE') panel.before(els.callout); // a table holds rows only
    else if (summary) summary.after(els.callout); else panel.prepend(els.callout);
    return panel;
  }

  function callout(text) {
    if (els.callout) setText(els.callout.lastChild, text);
  }

  function unlook() {
    for (const el of document.querySelectorAll(`.${LOOK}`)) {
      el.classList.remove(LOOK);
      els.lookSize.unobserve(el);
    }
    els.callout?.remove();
    els.callout = null;
  }

  /** What the learner sees as the element's name: its heading's own words, else its label or first line. */
  function nameOf(el) {
    const head = el.querySelector('h3, h4, figcaption, caption'); // a panel's heading, a chart's or table's caption
    const own = () => [...el.childNodes].filter((n) => n !== els.callout).map((n) => n.textContent).join(' ');
    const name = (head ? head.firstChild.textContent : el.getAttribute('aria-label') || own()).trim().split('\n')[0];
    return name.length > 60 ? `${name.slice(0, 59)}…` : name; // a list's whole text is not its name
  }

  async function resume() {
    if (!run || !run.paused) return;
    const mine = run;
    mine.paused = false;
    delete els.status.dataset.paused;
    await W.clockAction({ action: 'resume' });
    if (run !== mine) return;
    setText(els.status, mine.p && mine.p.result ? 'Running on.' : 'Running on; the answer appears when the run has settled.');
    nav([rerunButton()]); // Continue is gone (here, or by a verdict that came first): the bar keeps the keyboard
  }

  /** The verdict is in (predict.js): say what the lab measured, with its own numbers. */
  function settled() {
    const { step, p } = run;
    // the scenario's hint asked the question this verdict answers: it is not left asking it
    for (const el of root.querySelectorAll('.lw-hint')) if (!el.closest('.la-panel')) setText(el, '');
    const m = p.result;
    const t = run.moment ? fmtT(run.moment.t_sim) : '–';
    const text = whyText({ why: step.says || '' }, S.settings, m).replace('{moment_t}', t);
    const right = p.guess != null && String(p.guess) === String(m.value);
    setText(els.verdict, `${p.guess == null ? 'No guess this time.' : right ? '✓ Right.' : '✗ Not this time.'} `
      + `Your guess: ${shown(p.spec, p.guess)}; the lab measured ${shown(p.spec, m.value)}.`);
    els.verdict.dataset.measured = String(m.number);
    says(text);
    callout(text);
    if (!run.paused) nav([rerunButton()]); // paused at its moment: Continue stays offered
  }

  function says(text) {
    setText(els.says, text);
    els.says.hidden = false;
  }

  async function stopRun() {
    const r = run;
    run = null;
    unlook();
    if (r && r.paused) await W.clockAction({ action: 'resume' });
  }

  return { buildStepper };
}
