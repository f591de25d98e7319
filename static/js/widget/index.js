// Async Work Lab: the live widget on every chapter page (issue 5).
//
// One component, configured by the chapter's preset (`data-preset` on #lab-widget). Everything it
// shows comes from the real lab: the settings schema, presets, event vocabulary, sample clips, fault
// labels and the stream's cap from /api/meta; state from the snapshot (GET /api/labs/{lab}) plus every
// event pushed over the WebSocket. Model = last snapshot ⊕ events after its last_event_id (model.js),
// so a reload or reconnect rebuilds the same numbers; regions are updated in place (keyed), never
// wiped under the learner.
//
// This file boots a widget and wires its parts; each part is a module with one noun:
//   model.js timeline-model.js   the state, folded from snapshot + events (pure: node tests it)
//   lab.js        open, create, reset or replace the lab; the HTTP client
//   boot.js       starts opening the chapter's lab from the page's head, before the rest has loaded
//   stream.js     the WebSocket, resume after the last id, backoff; snapshots
//   history.js    a past moment rebuilt from the stream      branch.js  try again from there
//   controls.js   the controls column: break it, scenarios, dead-letter replay
//   upload.js settings.js clock.js                           the rest of the controls
//   readouts.js workers.js broker.js jobs.js                 the panels that show the lab
//   job-detail.js inspect.js   the open job; a worker's or a lease's internals
//   log.js        event log and screen-reader announcements  keys.js  keyboard shortcuts
//   predict.js predict-model.js   commit a guess, see it beside the measurement (and a room's spread)
//   stepper.js    the chapter's "Try this" steps, acted out one at a time in the lab
//   util.js scrubber.js timeline.js                          helpers, the history bar, the Gantt chart
//
// Every part is installed on one object W (the widget): `W.S` is the state, `W.els` the elements
// built, and each part's functions are reached as `W.name()`, so parts call each other late-bound.
//
// Plain ES modules, no build step, no CDN.

import { errorText, h, narrate, setText } from './util.js';
import { Timeline } from './timeline.js';
import { simNow } from './model.js';
import { early } from './boot.js';
import * as broker from './broker.js';
import * as clock from './clock.js';
import * as controls from './controls.js';
import * as jobs from './jobs.js';
import * as keys from './keys.js';
import * as lab from './lab.js';
import * as predict from './predict.js';
import * as stepper from './stepper.js';
import * as log from './log.js';
import * as readouts from './readouts.js';
import * as settings from './settings.js';
import * as stream from './stream.js';
import * as upload from './upload.js';
import * as workers from './workers.js';

const PARTS = [lab, stream, controls, upload, settings, clock, readouts, workers, broker, jobs, log, keys, predict,
  stepper];

// Parts the first screen does not show load on first use (import()), not before it: the history bar and
// its "try again from here" form when the History fold opens; a job's, a worker's or a lease's internals
// when one is first opened. Until then the stand-ins in boot() load them, then pass the call on.
const LATER = {
  history: () => Promise.all([import('./history.js'), import('./branch.js'), import('./scrubber.js')]),
  inspect: () => Promise.all([import('./job-detail.js'), import('./inspect.js')]),
};

// the chapter's widget (#lab-widget), or the two runs of a compare page (data-lab + data-view)
for (const root of document.querySelectorAll('.lw[data-preset]')) boot(root);

function boot(root) {
  const params = new URLSearchParams(location.search);
  const preset = root.dataset.preset;
  const S = {
    meta: null, schema: new Map(), controls: new Set(), shows: new Set(), lab: null,
    settings: {}, clock: null, counts: {}, workers: new Map(), jobs: new Map(),
    breaker: { state: 'closed' }, faults: {}, snapId: null, lastId: null, events: [],
    tl: new Map(), redeliveries: [], retries: [], jobRetries: [], runFrom: null, deaths: new Map(), faultUntil: {}, dlq: [], dlqFetchedFor: -1,
    log: [], logPending: 0, logRebuild: true, announceQueue: [], selectedJob: null,
    history: new Map(), found: new Map(), foundPrefix: new Map(), pausedForInspect: false, renderMs: [],
    parked: false, // its lab.parked arrived, its lab.resumed not yet: no snapshot re-fetch (stream.js)
    lost: null, // the stream is down: {t} the last simulated moment the page saw (stream.js)
    past: null, // while viewing a past moment: {at, stash (the live model), buffer (live events held)}
    inspect: null, // the worker or lease whose internals are open: {kind: 'worker'|'lease', id}
  };
  const W = {
    root, preset, params, S, els: {}, timeline: null, scrubber: null,
    compact: root.dataset.compact === 'yes', // one run of a compare page: headline counts + timeline
    reduceMotion: matchMedia('(prefers-reduced-motion: reduce)'),
    q: (role) => root.querySelector(`[data-role="${role}"]`),
    labPath: (p = '') => `/api/labs/${S.lab.id}${p}`,
    // disconnected (stream.js), the picture holds at the last moment seen instead of extrapolating past it
    simNow: () => (S.lost && !S.past ? S.lost.t : simNow(S.clock, performance.now())),
    labelOf: (name) => (S.schema.get(name) || {}).label || name,
    emit, banner, markDirty, renderAll,
  };
  // the chapter's own widget: its lab may already be opening (boot.js, started from the page's head)
  W.early = root.id === 'lab-widget' && !root.dataset.lab && early && early.preset === preset ? early.promise : null;
  for (const part of PARTS) Object.assign(W, part.install(W));
  const { q, els } = W;
  const loading = new Map();
  /** Load a LATER group once and install its parts on W (replacing the stand-ins below). */
  function later(name) {
    if (!loading.has(name)) {
      loading.set(name, LATER[name]().then((mods) => {
        for (const m of mods) if (m.install) Object.assign(W, m.install(W));
        if (name === 'history') startHistory(mods[2].Scrubber);
      }));
    }
    return loading.get(name);
  }
  Object.assign(W, {
    later, scrubber: null, isOpen: () => false, renderInspect() {}, renderDetail() {}, renderCountdown() {}, fetchHistorySoon() {},
    openJob: (...a) => later('inspect').then(() => W.openJob(...a)),
    openInspect: (...a) => later('inspect').then(() => W.openInspect(...a)),
  });

  start().catch(fatal);

  async function start() {
    // the vocabulary and the lab are fetched side by side: neither needs the other (an unknown preset is
    // refused by the server too); /api/meta's own failure is the one reported if both fail
    const labP = W.openLab();
    labP.catch(() => {});
    // a chapter's widget asks only its preset's part (data-meta, the URL its page preloads)
    const metaRes = await W.api('GET', root.dataset.meta || '/api/meta');
    if (!metaRes.ok) throw new Error(`could not load /api/meta: ${errorText(metaRes.data, metaRes.status)}`);
    S.meta = metaRes.data;
    for (const s of S.meta.settings) S.schema.set(s.name, s);
    const p = S.meta.presets[preset];
    if (!p) throw new Error(`unknown preset ${preset}`);
    S.controls = new Set(p.controls);
    S.shows = new Set(p.shows);
    setText(q('preset-title'), p.title);
    if (p.pipeline === false) showAddOnFirst();
    const snap = await labP;
    // boot.js opened the lab's socket as soon as the lab was known, and holds what it brought; a widget
    // without one opens its own here, so its handshake runs while the panels are built. Either way nothing
    // it brings is handled before the widget is built, has the snapshot and has announced its lab.
    const held = W.takeHeldSocket();
    if (!held) W.connectWs();
    buildUi();
    W.applySnapshot(snap);
    q('loading').hidden = true;
    q('body').hidden = false;
    root.dataset.state = 'ready';
    root.dataset.labId = S.lab.id;
    // a race page reads every lab's clock at one instant and hands each widget its reading (`lab:clock`),
    // so the labs' readouts tick from the same moment instead of each from its own last snapshot
    root.addEventListener('lab:clock', (e) => {
      const c = e.detail;
      if (S.past || !c) return;
      S.clock = { t: c.t, speed: c.speed, paused: c.paused, at: c.at };
      W.markDirty();
    });
    setInterval(tick, 250);
    W.announceLoop();
    W.startPredictions();
    tick(true);
    W.announceLab(snap);
    if (held) W.connectWs(held);
  }

  /** A lab with no job queue (chapter 7's schedulers): widget.css hides the pipeline's panels, and the
   * chapter's own panel (its add-on, the next .la-panel on the page) takes their place on the first screen,
   * above the settings, so the first screen shows what the steps talk about. */
  function showAddOnFirst() {
    root.dataset.pipeline = 'none';
    const addOn = root.parentElement.querySelector(':scope > .la-panel');
    if (addOn) q('body').prepend(addOn);
  }

  /**
   * Chapter add-ons (templates/_lab_<addon>.html + static/js/lab-<addon>.js) listen on #lab-widget:
   * `lab:ready` {lab, api, meta, snapshot} whenever the widget opens a lab (start, reset, expiry),
   * `lab:event` for every event in stream order, `lab:snapshot` for every snapshot applied. They reuse
   * the widget's lab and token instead of opening their own, so the page drives one real lab.
   * The latest `lab:ready` is also kept on the root (`labReady`): an add-on module that loads after
   * the lab opened (a slow script fetch) starts from it instead of waiting for a ready that has passed.
   */
  function emit(name, detail) {
    if (name === 'lab:ready') root.labReady = detail;
    root.dispatchEvent(new CustomEvent(name, { detail }));
  }

  function fatal(e) {
    const b = q('banner');
    const d = (e && e.data) || {};
    const labs = (d.error === 'client_labs_full' && d.running) || (d.error === 'client_labs_kept' && d.kept) || [];
    if (labs.length) {
      // at a cap of the client's own (labs running, each with a page open; labs kept, parked ones too): offer the
      // way out here, then open this lab
      const status = h('span', { role: 'status' });
      const free = (how) => async () => {
        for (const btn of b.querySelectorAll('button')) btn.disabled = true;
        setText(status, how === 'park' ? 'parking your oldest lab…' : 'closing your oldest lab…');
        try {
          await lab.freeOldest(labs, how);
          W.early = null;
          b.hidden = true;
          q('loading').hidden = false;
          root.dataset.state = '';
          start().catch(fatal);
        } catch (err) {
          setText(status, `that did not work: ${err.message}`);
          for (const btn of b.querySelectorAll('button')) btn.disabled = false;
        }
      };
      const close = h('button', { type: 'button', class: 'lw-btn', testid: 'close-oldest', onclick: free('close') }, 'Close my oldest lab');
      b.replaceChildren(...(d.error === 'client_labs_full' ? [
        h('p', {}, `You already run ${labs.length} labs, each open on a page. `
          + 'Park one (it stops, keeps its history, and resumes when you open its page again) or close it for good.'),
        h('div', { class: 'lw-row lw-wrap' },
          h('button', { type: 'button', class: 'lw-btn', testid: 'park-oldest', onclick: free('park') }, 'Park my oldest lab'), close),
      ] : [
        h('p', {}, `You keep ${labs.length} labs on this server, parked ones included, as many as one reader may. `
          + 'Close your oldest (its history goes with it) to open this one.'),
        h('div', { class: 'lw-row lw-wrap' }, close),
      ]), status);
    } else {
      b.replaceChildren(`The lab could not start: ${(e && e.message) || String(e)} `,
        h('button', { type: 'button', onclick: () => location.reload() }, 'Try again'));
    }
    b.hidden = false;
    q('loading').hidden = true;
    root.dataset.state = 'error';
  }

  function banner(msg) {
    const b = q('banner');
    if (!msg) { b.hidden = true; return; }
    b.textContent = msg;
    b.hidden = false;
  }

  function buildUi() {
    els.conn = root.querySelector('[data-testid="conn-status"]');
    els.clock = q('clock');
    els.clockSub = q('clock-sub');
    els.clockP = root.querySelector('[data-testid="readout-clock"]');
    els.player = q('player');
    els.detail = q('detail');
    W.buildReadouts();
    W.buildScenarios();
    W.buildStepper(); // guided steps: mounts in [data-role=stepper] (templates/_widget.html)
    W.buildControls();
    W.buildLogFilters();
    if (S.controls.has('retry_policy')) W.buildRetryHistogram();
    W.timeline = new Timeline({ axis: q('tl-axis'), rows: q('tl-rows'), empty: q('tl-empty'), parkedKey: q('tl-key-parked') },
      { onOpenJob: (id) => W.openJob(id, true), leases: S.shows.has('lease') });
    const hist = q('history');
    hist.addEventListener('toggle', () => { if (hist.open) later('history'); });
    // only what this chapter has introduced (its chapter home's `shows`): a later chapter's terms stay out
    for (const el of root.querySelectorAll('[data-term]')) if (!S.shows.has(el.dataset.term)) el.hidden = true;
    W.buildFind();
    W.buildHelp();
    if (S.controls.has('kill') && !S.lab.viewer) setText(q('workers-hint'), 'click a busy worker to kill it');
    if (S.lab.viewer && !W.compact) {
      root.classList.add('lw-viewer');
      banner(null);
      const b = q('banner');
      b.textContent = 'Read-only: you are watching the instructor’s lab. Every screen shows the same pipeline.';
      b.hidden = false;
      b.removeAttribute('role');
    }
    els.controls = q('controls');
    if (W.compact) root.classList.add('lw-compact');
    else document.addEventListener('keydown', W.onKey);
    W.reduceMotion.addEventListener?.('change', () => markDirty());
  }

  /** The history bar, built the first time its fold opens (its modules have just loaded). */
  function startHistory(Scrubber) {
    W.scrubber = new Scrubber({ box: q('history'), banner: q('past-banner') }, {
      idBase: root.id, events: () => S.events, describe: (ev) => narrate(ev, S.meta, W.labelOf),
      trimmed: () => !!S.trimmed,
      onSeek: W.seek, onLive: W.goLive, canBranch: !W.compact, onBranchForm: W.branchForm,
    });
    markDirty();
  }

  // ---- rendering: one frame per animation frame at most, a tick every 250 ms (1 s reduced motion)
  let raf = 0;
  function markDirty() {
    if (!raf) raf = requestAnimationFrame(() => { raf = 0; renderAll(); });
  }

  let lastTick = 0;
  function tick(force) {
    const now = performance.now();
    const gap = W.reduceMotion.matches ? 1000 : 250;
    if (!force && (document.hidden || now - lastTick < gap - 20)) return;
    lastTick = now;
    markDirty();
  }

  // render cost, kept so a tool or test can read how long a frame's work takes (root.lwRenderStats())
  root.lwRenderStats = () => {
    const ms = [...S.renderMs].sort((a, b) => a - b);
    const pick = (p) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))];
    return { frames: ms.length, p50: pick(0.5), p95: pick(0.95), max: ms[ms.length - 1] };
  };
  root.lwRenderStats.reset = () => { S.renderMs = []; };

  function renderAll() {
    if (!S.meta || !els.readouts) return;
    const t0 = performance.now();
    renderFrame();
    S.renderMs.push(performance.now() - t0);
    if (S.renderMs.length > 600) S.renderMs.splice(0, S.renderMs.length - 600);
  }

  function renderFrame() {
    const now = W.simNow();
    if (W.scrubber) W.scrubber.sync(S.past ? S.past.buffer.length : 0);
    W.renderClock(now);
    W.renderReadouts(now);
    W.renderWorkers(now);
    W.renderBroker(now);
    W.renderFaults(now);
    W.renderDlq();
    if (els.hist) W.renderRetryHistogram(now);
    W.timeline.render(W.timelineJobs(), now, (id) => (S.jobs.get(id) || {}).state);
    W.renderJobs();
    W.renderLog();
    if (S.selectedJob) { W.renderDetail(); W.renderCountdown(now); }
    W.renderInspect(now);
    W.renderPrediction();
  }
}
