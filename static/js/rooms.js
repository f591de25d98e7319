// Classroom rooms (issue 10): the rooms page (start a room), the join page (watch or follow along)
// and the instructor's dashboard (viewer count, each student lab's headline counts).
//
// Tokens travel only in Authorization headers, never in cookies the room reads, so no other site can
// act for the instructor. The instructor token lives in localStorage (it must outlive the tab that made
// the room); a lab's own token goes where the widget resumes labs from, the lab store's
// `awl:lab:<preset>` — so opening the chapter page after this drives that very lab.

import { call, errorText, h, labStore, setAttr, setText } from './widget/util.js';
import { newRace } from './race.js';

const root = document.querySelector('.rooms[data-page]');

const q = (role) => root.querySelector(`[data-role="${role}"]`);
const roomStore = (code) => `awl:room:${code}`;

/** Hand a lab to the widget: it resumes `awl:lab:<preset>` from the lab store instead of creating one. */
function adoptLab(preset, lab) {
  labStore.set(`awl:lab:${preset}`, { id: lab.lab_id, token: lab.token, view: lab.view_token, ws: lab.ws_url });
}

function roomsPage() {
  const form = q('create');
  const status = q('create-status');
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const btn = form.querySelector('button');
    const [kind, value] = form.elements.start.value.split(':');
    btn.disabled = true;
    setText(status, 'Starting your lab and its workers…');
    const res = await call('POST', '/api/rooms', { [kind]: value, speed: Number(form.elements.speed.value) });
    btn.disabled = false;
    if (res.status !== 201) { setText(status, `Could not create the room: ${errorText(res.data, res.status)}`); return; }
    const d = res.data;
    localStorage.setItem(roomStore(d.code), JSON.stringify({ token: d.instructor_token, lab: d.lab, preset: d.lab.preset }));
    adoptLab(d.lab.preset, d.lab);
    location.assign(d.room_url);
  });
}

function joinPage() {
  const form = q('follow');
  if (!form) return;
  const status = q('follow-status');
  const { code, preset } = root.dataset;
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const btn = form.querySelector('button');
    btn.disabled = true;
    setText(status, 'Starting your own lab with the instructor’s settings…');
    const res = await call('POST', `/api/rooms/${code}/follow`, { name: form.elements.name.value.trim() });
    btn.disabled = false;
    if (res.status !== 201) { setText(status, `Could not start your lab: ${errorText(res.data, res.status)}`); return; }
    adoptLab(preset, res.data);
    location.assign(res.data.chapter_url);
  });
}

/**
 * The hand-off link (`#instructor=…&lab_token=…`) moves the dashboard to another computer, e.g. the
 * classroom's: a URL fragment never reaches the server, so the tokens stay out of every log.
 */
async function fromHandoff(code) {
  const frag = new URLSearchParams(location.hash.slice(1));
  const token = frag.get('instructor'), labToken = frag.get('lab_token');
  if (!token || !labToken) return null;
  history.replaceState(history.state, '', location.pathname);
  const res = await call('GET', `/api/rooms/${code}`);
  if (!res.ok) return null;
  const d = res.data;
  const saved = { token, preset: d.preset,
    lab: { lab_id: d.lab_id, token: labToken, view_token: d.view_token, ws_url: `/ws/labs/${d.lab_id}` } };
  localStorage.setItem(roomStore(code), JSON.stringify(saved));
  return saved;
}

async function dashboard() {
  const { code, preset, labUrl, presentUrl } = root.dataset;
  let saved = await fromHandoff(code);
  try { saved = saved || JSON.parse(localStorage.getItem(roomStore(code)) || 'null'); } catch { saved = null; }
  if (['127.0.0.1', 'localhost', '[::1]'].includes(location.hostname)) q('host-hint').hidden = false;
  if (!saved || !saved.token) {
    q('not-instructor').hidden = false;
    root.dataset.state = 'viewer';
    return;
  }
  q('dash').hidden = false;
  q('dash-more').hidden = false;
  const handoff = q('handoff');
  handoff.value = `${location.origin}${location.pathname}#${new URLSearchParams({ instructor: saved.token, lab_token: saved.lab.token })}`;
  handoff.addEventListener('focus', () => handoff.select());
  const open = (present) => {
    adoptLab(preset, saved.lab);
    if (present) { location.assign(presentUrl); return; } // the projector: the lab fills this screen
    // "Open my lab" keeps the dashboard in its tab and opens the lab beside it (every tab shares the lab store).
    // Popups blocked: this tab.
    if (!window.open(labUrl, '_blank')) location.assign(labUrl);
  };
  q('open-present').addEventListener('click', () => open(true));
  q('open-lab').addEventListener('click', () => open(false));
  q('close').addEventListener('click', async () => {
    if (!confirm('Close this room? The join code stops working; labs already open keep running until idle.')) return;
    const res = await call('DELETE', `/api/rooms/${code}`, undefined, saved.token);
    if (res.ok || res.status === 404) { localStorage.removeItem(roomStore(code)); location.assign('/rooms'); }
    else setText(q('dash-status'), errorText(res.data, res.status));
  });

  const viewers = root.querySelector('[data-testid="room-viewers"]');
  const studentsN = root.querySelector('[data-testid="room-students"]');
  const rows = q('rows');
  const rowFor = new Map();

  function row(id, name, watchUrl) {
    let tr = rowFor.get(id);
    if (!tr) {
      const label = watchUrl
        ? h('a', { href: watchUrl, title: `Watch ${name}'s lab, read-only (put it on the projector)` }, name) : name;
      tr = h('tr', { 'data-lab': id, testid: `room-row-${id}` }, h('th', { scope: 'row' }, label),
        ...['done', 'redelivered', 'dead', 'lost'].map((k) => h('td', { class: 'num', 'data-count': k }, '–')),
        h('td', { 'data-role': 'passed' }, '–'), h('td', { 'data-role': 'live' }, ''));
      rowFor.set(id, tr);
      rows.append(tr);
    }
    return tr;
  }

  function fill(tr, counts, state, passed) {
    const cell = tr.querySelector('[data-role="passed"]');
    setText(cell, passed && passed.length ? passed.map((c) => `✓ ${c}`).join(', ') : '–');
    setAttr(cell, 'data-passed', passed && passed.length ? passed.join(' ') : null);
    for (const td of tr.querySelectorAll('[data-count]')) {
      const v = counts ? counts[td.dataset.count] : null;
      setText(td, v == null ? '–' : String(v));
      setAttr(td, 'data-value', v == null ? null : String(v));
    }
    setText(tr.querySelector('[data-role="live"]'), state);
    setAttr(tr, 'data-state', state);
  }

  // ---- prediction rounds: ask, then watch the guesses arrive beside the measured answer ----------
  const askSel = q('ask-q');
  q('ask').addEventListener('submit', async (e) => {
    e.preventDefault();
    const res = await call('POST', `/api/rooms/${code}/round`, { prediction: askSel.value }, saved.token);
    if (!res.ok) setText(q('dash-status'), `Could not ask: ${errorText(res.data, res.status)}`);
    else renderRound(res.data.round);
  });

  let racesBuilt = false;
  function raceButtons(d) {
    const card = q('races-card');
    card.hidden = !d.races.length;
    if (racesBuilt || !d.races.length) return;
    racesBuilt = true;
    q('races').replaceChildren(...d.races.map((rc) => h('button', { type: 'button', class: 'rooms-btn', testid: `room-race-${rc.id}`,
      onclick: async (e) => {
        const btn = e.currentTarget;
        btn.disabled = true;
        const made = await newRace(rc.id, q('race-status'));
        if (made) {
          const res = await call('POST', `/api/rooms/${code}/race`, { race_id: made.race_id }, saved.token);
          if (res.ok) location.assign(`${made.url}?present=1`);
          else setText(q('race-status'), errorText(res.data, res.status));
        }
        btn.disabled = false;
      } }, `${rc.title} (${rc.variants.length} labs)`)));
  }

  function predictions(d) {
    raceButtons(d);
    const card = q('predict-card');
    card.hidden = !d.predictions.length;
    if (askSel.options.length !== d.predictions.length) {
      // the scenario first: two scenarios may ask the same question of different set-ups
      askSel.replaceChildren(...d.predictions.map((p) => h('option', { value: p.id }, `${p.scenario}: ${p.question}`)));
    }
    renderRound(d.round);
  }

  const label = (spec, v) => (spec.kind === 'choice' ? ((spec.choices.find(([c]) => c === String(v)) || [])[1] ?? String(v))
    : `${v}${spec.unit ? ` ${Number(v) === 1 ? spec.unit.replace(/s$/, '') : spec.unit}` : ''}`);
  let lastRound = '';
  function renderRound(rd) {
    const box = q('round');
    const key = JSON.stringify(rd);
    if (key === lastRound) return;
    lastRound = key;
    if (!rd) { box.replaceChildren(h('p', { class: 'rooms-note' }, 'No question asked yet.')); return; }
    const spec = rd.prediction;
    const spread = rd.spread || {};
    const values = spec.kind === 'choice' ? spec.choices.map(([v]) => JSON.stringify(v))
      : Object.keys(spread).sort((a, b) => Number(a) - Number(b));
    const measured = rd.measured == null ? null : JSON.stringify(rd.measured);
    if (measured != null && !values.includes(measured)) values.push(measured);
    if (spec.kind !== 'choice') values.sort((a, b) => Number(a) - Number(b));
    const max = Math.max(1, ...Object.values(spread));
    const total = Object.values(spread).reduce((a, b) => a + b, 0);
    const right = measured == null ? 0 : spread[measured] || 0;
    box.replaceChildren(
      h('p', { class: 'room-round-q' }, h('strong', {}, `Question ${rd.n}: `), spec.question),
      h('table', { class: 'room-spread', testid: 'room-spread' },
        h('caption', {}, `${total} guess${total === 1 ? '' : 'es'}${measured == null ? ', waiting for your lab to measure the answer'
          : `; the lab measured ${label(spec, rd.measured)}: ${right} of ${total} right`}`),
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'guess'), h('th', { scope: 'col' }, 'students'), h('th', { scope: 'col' }, h('span', { class: 'rooms-sr' }, 'share')))),
        h('tbody', {}, values.map((v) => {
          const n = spread[v] || 0;
          const isM = measured === v;
          return h('tr', { 'data-guess': JSON.parse(v), 'data-measured': isM ? 'yes' : null, testid: `room-spread-${JSON.parse(v)}` },
            h('th', { scope: 'row' }, label(spec, JSON.parse(v)), isM ? ' ← measured' : ''),
            h('td', { class: 'num', 'data-value': String(n) }, String(n)),
            h('td', {}, h('span', { class: 'room-bar', style: `width: ${Math.round((n / max) * 100)}%` })));
        }))),
      measured != null && rd.why ? h('p', { class: 'room-why' }, h('strong', {}, 'Why: '), rd.why) : null);
  }

  // One request at a time: the next poll waits for this answer (stacked polls hang a busy page).
  async function poll() {
    const res = await call('GET', `/api/rooms/${code}/status`, undefined, saved.token);
    if (res.ok) {
      const d = res.data;
      setText(viewers, String(d.viewers));
      setAttr(viewers, 'data-value', String(d.viewers));
      setText(studentsN, String(d.students.length));
      setAttr(studentsN, 'data-value', String(d.students.length));
      fill(row(d.lab_id, 'Your lab (on the projector)'), d.counts, d.lab_alive ? 'live' : 'expired', d.passed);
      for (const s of d.students) fill(row(s.lab_id, s.name, s.watch_url), s.counts, !s.alive ? 'expired' : s.live ? 'live' : 'away', s.passed);
      predictions(d);
      setText(q('dash-status'), '');
      root.dataset.state = 'ready';
    } else if (res.status === 404) {
      setText(q('dash-status'), 'This room has closed or expired.');
      root.dataset.state = 'closed';
      return;
    } else if (res.status === 403) {
      setText(q('dash-status'), 'This browser’s instructor token does not open this room.');
      root.dataset.state = 'forbidden';
      return;
    } else {
      setText(q('dash-status'), `Could not refresh: ${errorText(res.data, res.status)}`);
    }
    setTimeout(poll, 2000);
  }
  poll();
}

if (root) ({ rooms: roomsPage, join: joinPage, room: dashboard })[root.dataset.page]?.();
