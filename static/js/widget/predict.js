// Predictions that count (issue 22): commit a guess before the run, then see it beside what the lab
// measured, with a short why when they differ. Guesses are kept in localStorage (`awl:predictions`).
//
// In a room (`?room=CODE`), the instructor asks the class a question from the room dashboard; every
// page in the room shows it (polled every 3 s, one request at a time), each learner's guess goes to
// the room, and when the instructor's lab has measured the answer the instructor's page posts it: the
// dashboard shows the class's spread beside it, and each learner sees their guess against it.
//
// The measuring itself is pure (predict-model.js) and reads only the widget's model.

import { errorText, h, setAttr, setText } from './util.js';
import { cleanGuess, measure, shown, whyText } from './predict-model.js';
import { instructorToken as roomInstructorToken, roomSeat } from './room-seat.js';

const STORE = 'awl:predictions';
const ROUND_MS = 3000;

export function loadRecord() {
  try { return JSON.parse(localStorage.getItem(STORE) || '[]'); } catch { return []; }
}

function save(entry) {
  const all = loadRecord().filter((e) => !(e.id === entry.id && e.at === entry.at));
  all.push(entry);
  try { localStorage.setItem(STORE, JSON.stringify(all.slice(-200))); } catch { /* full or off: keep going */ }
}

async function post(path, body, token) {
  const headers = { 'Content-Type': 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    const res = await fetch(path, { method: body === undefined ? 'GET' : 'POST', headers,
      body: body === undefined ? undefined : JSON.stringify(body) });
    return { ok: res.ok, status: res.status, data: await res.json().catch(() => null) };
  } catch {
    return { ok: false, status: 0, data: null };
  }
}

export function install(W) {
  const { root, S, params } = W;
  const room = params.get('room');
  let box = null; // the prediction card
  let round = null; // the room's open question, if any: {n, prediction, measured, …}
  let roundGuess = null; // {n, value} this learner sent for it

  /** The room's instructor token, if this browser opened the room and this is the room's lab. */
  const instructorToken = () => roomInstructorToken(room, S.lab);

  function card() {
    if (!box) {
      const hid = `${root.id}-predict-h`;
      box = h('section', { class: 'lw-predict', testid: 'predict', 'aria-labelledby': hid, hidden: true },
        h('h3', { id: hid }, 'Your prediction'), h('div', { class: 'lw-predict-body' }),
        h('p', { class: 'lw-predict-record', testid: 'predict-record' }));
      const scn = W.q('scenarios');
      scn.after(box);
    }
    return box;
  }

  function record() {
    const all = loadRecord().filter((e) => e.measured != null && e.guess != null);
    const right = all.filter((e) => e.right).length;
    setText(card().querySelector('.lw-predict-record'),
      all.length ? `Your predictions so far: ${right} of ${all.length} right (kept in this browser).` : '');
  }

  /** The question as a form: a number field or a set of choices, explained in place when invalid. */
  function guessForm(spec, { runLabel, onGuess }) {
    const fid = `${root.id}-guess`;
    const err = h('p', { class: 'lw-predict-error', id: `${fid}-err`, testid: 'predict-error', 'aria-live': 'polite' });
    let field;
    if (spec.kind === 'choice') {
      field = h('fieldset', { class: 'lw-predict-choices' }, h('legend', {}, spec.question),
        spec.choices.map(([v, label], i) => h('label', { class: 'lw-radio' },
          h('input', { type: 'radio', name: fid, value: v, id: i === 0 ? fid : null, testid: `predict-choice-${v}` }), ` ${label}`)));
    } else {
      field = h('div', { class: 'lw-predict-num' },
        h('label', { for: fid }, spec.question),
        h('div', { class: 'lw-row' },
          h('input', { type: 'number', id: fid, testid: 'predict-guess', min: spec.min, max: spec.max, step: 1,
            inputmode: 'numeric', 'aria-describedby': `${fid}-err`, required: true }),
          spec.unit ? h('span', { class: 'lw-unit' }, spec.unit) : null));
    }
    const form = h('form', { class: 'lw-predict-form', novalidate: true }, field, err,
      h('div', { class: 'lw-row lw-wrap' },
        h('button', { type: 'submit', class: 'lw-btn lw-primary', testid: 'predict-commit' }, runLabel)));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const raw = spec.kind === 'choice' ? (form.querySelector('input:checked') || {}).value : form.querySelector('input').value;
      const value = cleanGuess(spec, raw);
      if (value == null) {
        const input = form.querySelector('input');
        setAttr(input, 'aria-invalid', 'true');
        setText(err, spec.kind === 'choice' ? 'Pick one answer first.'
          : `Enter a whole number from ${spec.min} to ${spec.max}.`);
        input.focus();
        return;
      }
      onGuess(value);
    });
    return form;
  }

  function show(...kids) {
    const c = card();
    c.hidden = false;
    c.querySelector('.lw-predict-body').replaceChildren(...kids);
    record();
  }

  // ---- predict first: each scenario's question sits beside the scenario buttons before anything runs;
  // pressing the button commits whatever guess is in its field (none is fine: then the lab just shows
  // what it measured), locks it, and runs. An invalid guess is explained in place and nothing runs.
  const rows = new Map(); // scenario id → {input(s), err, spec}

  function buildPredictFirst(list, box) {
    const asks = list.filter((s) => s.predict);
    if (!asks.length || S.lab.viewer) return;
    const body = h('div', { class: 'lw-pf-list' }, asks.map((s) => {
      const spec = s.predict;
      const fid = `${root.id}-pf-${s.id}`;
      const err = h('span', { class: 'lw-predict-error', id: `${fid}-err`, testid: `predict-error-${s.id}`, 'aria-live': 'polite' });
      let field, inputs;
      if (spec.kind === 'choice') {
        inputs = spec.choices.map(([v, label]) => h('label', { class: 'lw-radio' },
          h('input', { type: 'radio', name: fid, value: v, testid: `predict-choice-${s.id}-${v}` }), ` ${label}`));
        field = h('fieldset', { class: 'lw-pf-row', 'data-scenario': s.id, 'aria-describedby': `${fid}-err` },
          h('legend', {}, h('strong', {}, `${s.label}: `), spec.question), h('span', { class: 'lw-pf-choices' }, inputs), err);
      } else {
        inputs = [h('input', { type: 'number', id: fid, testid: `predict-guess-${s.id}`, min: spec.min, max: spec.max, step: 1,
          inputmode: 'numeric', 'aria-describedby': `${fid}-err`, class: 'lw-pf-num' })];
        field = h('div', { class: 'lw-pf-row', 'data-scenario': s.id }, h('label', { for: fid }, h('strong', {}, `${s.label}: `), spec.question),
          h('span', { class: 'lw-row' }, inputs[0], spec.unit ? h('span', { class: 'lw-unit' }, spec.unit) : null), err);
      }
      rows.set(s.id, { field, err, spec });
      // Enter in a guess commits it: the same as pressing the scenario's button
      field.addEventListener('keydown', (e) => {
        if (e.key !== 'Enter' || e.target.tagName !== 'INPUT') return;
        e.preventDefault();
        W.root.querySelector(`[data-testid="scenario-${s.id}"]`)?.click();
      });
      return field;
    }));
    const details = h('details', { class: 'lw-predict-first', testid: 'predict-first', open: true },
      h('summary', {}, 'Predict first: type a guess, then press its scenario. The lab measures the answer.'), body);
    box.append(details);
  }

  function readGuess(s) {
    const row = rows.get(s.id);
    if (!row) return { value: null };
    const spec = row.spec;
    const raw = spec.kind === 'choice' ? (row.field.querySelector('input:checked') || {}).value : row.field.querySelector('input').value;
    if (raw == null || raw === '') return { value: null, row };
    const value = cleanGuess(spec, raw);
    if (value == null) return { invalid: true, row };
    return { value, row };
  }

  /** A scenario button with a prediction: commit the guess in its field (if any), lock it, run, measure. */
  async function runPredicted(s, btn, hint) {
    const spec = s.predict;
    const { value: guess, invalid, row } = readGuess(s);
    if (invalid) {
      const input = row.field.querySelector('input');
      setAttr(input, 'aria-invalid', 'true');
      setText(row.err, `Enter a whole number from ${spec.min} to ${spec.max}, or leave it empty to just watch.`);
      input.focus();
      return;
    }
    if (row) {
      setText(row.err, '');
      for (const input of row.field.querySelectorAll('input')) { input.removeAttribute('aria-invalid'); input.disabled = true; }
    }
    await commitAndRun(spec, guess, () => W.runScenario(s, btn, hint), { scenario: s.id, row });
  }

  /**
   * Commit a guess (null: just watching), start the run (`start` resolves to its job ids, or null when it
   * did not start) and measure it when it settles. The stepper (stepper.js) commits its steps' guesses
   * here too; `extra` rides on S.predict (a step keeps the run's events there for `gap:` measures).
   */
  async function commitAndRun(spec, guess, start, extra = {}) {
    S.predict = { spec, guess, jobs: null, counts0: { ...S.counts }, at: Date.now(), ...extra };
    const p = S.predict;
    renderPending();
    if (guess != null && room && round && round.prediction.id === spec.id && !instructorToken()) sendGuess(guess);
    const jobs = await start();
    if (S.predict !== p) return p;
    if (jobs == null) { unlock(p); S.predict = null; show(h('p', {}, 'The scenario did not start, so nothing was measured.')); return null; }
    p.jobs = jobs;
    W.markDirty();
    return p;
  }

  function unlock(p) {
    if (!p || !p.row) return;
    for (const input of p.row.field.querySelectorAll('input')) {
      input.disabled = false;
      if (input.type === 'number') input.value = ''; else input.checked = false;
    }
  }

  function renderPending() {
    const p = S.predict;
    show(h('p', { class: 'lw-predict-q' }, p.spec.question),
      h('p', { class: 'lw-predict-line', testid: 'predict-pending', role: 'status' },
        p.guess == null ? 'No guess: just watching. ' : `Your guess: ${shown(p.spec, p.guess)}. `,
        'Running; the answer appears here when the run has settled.'));
  }

  /** Called every frame: once the run settles, the guess beside the measurement, and why. */
  function renderPrediction() {
    const p = S.predict;
    if (!p || !p.jobs || p.result || p.hold) return; // a guided step holds its answer until its moment
    const m = measure(p.spec, S, p);
    if (!m) return;
    p.result = m;
    unlock(p);
    const right = p.guess != null && String(p.guess) === String(m.value);
    const why = whyText(p.spec, S.settings, m);
    save({ id: p.spec.id, preset: W.preset, question: p.spec.question, guess: p.guess, measured: m.value,
      number: m.number, right, at: p.at });
    const verdict = p.guess == null ? 'No guess this time.' : right ? 'Right.' : 'Not this time.';
    show(h('p', { class: 'lw-predict-q' }, p.spec.question),
      h('dl', { class: 'lw-predict-vs', testid: 'predict-result', 'data-right': right ? 'yes' : 'no' },
        h('div', {}, h('dt', {}, 'your guess'), h('dd', { testid: 'predict-your' }, shown(p.spec, p.guess))),
        h('div', {}, h('dt', {}, 'the lab measured'), h('dd', { testid: 'predict-measured' }, shown(p.spec, m.value)))),
      h('p', { class: 'lw-predict-verdict', role: 'status' }, h('strong', {}, `${right ? '✓' : p.guess == null ? '·' : '✗'} ${verdict} `),
        right || !why ? '' : h('span', { testid: 'predict-why' }, `Why: ${why}`)));
    W.emit('lab:verdict', { id: p.spec.id, scenario: p.scenario, guess: p.guess, measured: m.value, number: m.number, right });
    const token = instructorToken();
    if (token && round && round.prediction.id === p.spec.id && round.measured == null) {
      post(`/api/rooms/${encodeURIComponent(room)}/round/result`, { n: round.n, measured: m.value, number: m.number, why }, token);
    }
  }

  // ---- a room's question -------------------------------------------------------------------------
  async function sendGuess(value) {
    roundGuess = { n: round.n, value };
    const seat = await roomSeat(room); // one guess per seat the room issued, not per id a page invents
    if (!seat) return { ok: false, status: 0, data: null };
    return post(`/api/rooms/${encodeURIComponent(room)}/round/guesses`, { client: seat.client, n: round.n, value });
  }

  function renderRound() {
    if (!round) return;
    const spec = round.prediction;
    const mine = roundGuess && roundGuess.n === round.n ? roundGuess.value : null;
    if (S.predict && S.predict.spec.id === spec.id && instructorToken()) return; // the instructor ran it: their own card
    if (round.measured != null) {
      const right = mine != null && String(mine) === String(round.measured);
      show(h('p', { class: 'lw-predict-q' }, h('strong', {}, 'Class question: '), spec.question),
        h('dl', { class: 'lw-predict-vs', testid: 'predict-result', 'data-right': right ? 'yes' : 'no' },
          h('div', {}, h('dt', {}, 'your guess'), h('dd', { testid: 'predict-your' }, shown(spec, mine))),
          h('div', {}, h('dt', {}, 'the instructor’s lab measured'), h('dd', { testid: 'predict-measured' }, shown(spec, round.measured)))),
        h('p', { class: 'lw-predict-verdict', role: 'status' }, h('strong', {}, right ? '✓ Right. ' : mine == null ? '' : '✗ Not this time. '),
          right ? '' : h('span', { testid: 'predict-why' }, `Why: ${round.why || ''}`)));
      return;
    }
    if (instructorToken()) {
      show(h('p', { class: 'lw-predict-q', testid: 'predict-class' }, h('strong', {}, 'The class is predicting: '), spec.question),
        h('p', {}, `${round.count} guess${round.count === 1 ? '' : 'es'} so far. Press the matching scenario button when everyone has guessed;`
          + ' the measured answer goes to every screen in the room.'));
      return;
    }
    if (mine != null) {
      show(h('p', { class: 'lw-predict-q' }, h('strong', {}, 'Class question: '), spec.question),
        h('p', { testid: 'predict-pending', role: 'status' }, `Your guess: ${shown(spec, mine)}. Waiting for the instructor’s lab to measure it.`));
      return;
    }
    if (card().querySelector(`form[data-round="${round.n}"]`)) return; // already asking: keep what is typed
    const form = guessForm(spec, { runLabel: 'Lock in my guess', onGuess: async (value) => {
      const res = await sendGuess(value);
      if (!res.ok) { roundGuess = null; setText(card().querySelector('.lw-predict-error'), errorText(res.data, res.status)); return; }
      renderRound();
    } });
    form.dataset.round = String(round.n);
    show(h('p', { class: 'lw-predict-scn' }, h('strong', {}, 'Your instructor asks the room. '), 'Commit a guess before the run.'), form);
  }

  let raceEl = null;
  function raceLink(url) {
    if (!url || (raceEl && raceEl.getAttribute('href') === url)) return;
    if (!raceEl) {
      raceEl = h('a', { class: 'lw-btn lw-race-link', testid: 'room-race-link' }, 'Your instructor started a race: watch it side by side →');
      W.q('body').prepend(raceEl);
    }
    raceEl.setAttribute('href', url);
  }

  async function pollRound() {
    // the room knows this page by its seat, so a reload keeps the guess already sent
    const seat = await roomSeat(room);
    const mine = seat ? `?client=${encodeURIComponent(seat.client)}` : '';
    const res = await post(`/api/rooms/${encodeURIComponent(room)}/round${mine}`);
    if (res.ok) {
      const next = res.data.round;
      const changed = JSON.stringify(next) !== JSON.stringify(round);
      if (next && round && next.n !== round.n) roundGuess = null;
      round = next;
      if (res.data.your_guess != null && round && !roundGuess) roundGuess = { n: round.n, value: res.data.your_guess };
      if (changed) renderRound();
      raceLink(res.data.race_url);
    }
    if (res.status !== 404) setTimeout(pollRound, ROUND_MS);
  }

  function startPredictions() {
    if (room && !W.compact) pollRound();
  }

  return { buildPredictFirst, runPredicted, commitAndRun, renderPrediction, startPredictions };
}
