// Classroom extras on every chapter page (issue 10), riding on the live widget's lab like an add-on:
//
// - presenter mode (`?present=1` or the toggle): large type, high contrast, the widget filling the
//   screen; the widget's own keyboard shortcuts keep working (no second key handler here);
// - export the run: events as JSON Lines, counts as CSV (fetched with the lab's token, so a read-only
//   viewer can take the run home too);
// - scenario links: settings in the query string are applied to the learner's own lab, and
//   `?scenario=<id>` shows that scenario with a button that makes it happen;
// - a link to the current set-up (every setting that differs from the chapter's preset);
// - room presence: a page opened from a room checks in every 10 s, so the instructor sees who watches.

import { onLab } from './lab-addon.js';
import { dropSeat, instructorToken, roomSeat } from './widget/room-seat.js';
import { errorText, h, setAttr, setText } from './widget/util.js';

const root = document.getElementById('lab-widget');
const params = new URLSearchParams(location.search);
const PRESENCE_MS = 10000;
let current = null; // the widget's {lab, api, meta} (replaced on reset)
let els = null;

if (root) {
  presenter();
  onLab({ ready: onReady, snapshot: (snap) => updateSetupLink(snap.settings) });
}

function onReady(detail) {
  const first = !current;
  current = detail;
  if (!els) els = buildPanel();
  if (first && params.get('room')) joinRoom(params.get('room'));
  els.roomRow.hidden = Boolean(detail.lab.viewer || !detail.lab.view || params.get('room'));
  applyUrlSettings(detail);
  if (params.get('scenario')) showScenario(detail, params.get('scenario'));
  updateSetupLink(detail.snapshot.settings);
}

// ---- presenter mode ---------------------------------------------------------------------------
function presenter() {
  const btn = h('button', { type: 'button', class: 'lw-btn lw-small cr-present-toggle', testid: 'present-toggle',
    'aria-pressed': 'false', onclick: () => setPresent(!document.documentElement.classList.contains('present'), true) },
  'Presenter mode');
  root.querySelector('.lw-head-status').prepend(btn);
  // the projector covers the page header, so presenter mode carries its own theme switch (theme.js)
  const theme = h('button', { type: 'button', class: 'lw-btn lw-small cr-theme', testid: 'present-theme-toggle',
    'data-role': 'theme-toggle', 'aria-pressed': 'false' }, 'Dark theme');
  btn.after(theme);
  window.awlThemeSync?.();

  function setPresent(on, fromClick) {
    document.documentElement.classList.toggle('present', on);
    btn.setAttribute('aria-pressed', String(on));
    setText(btn, on ? 'Exit presenter mode' : 'Presenter mode');
    const u = new URL(location.href);
    if (on) u.searchParams.set('present', '1'); else u.searchParams.delete('present');
    history.replaceState(history.state, '', u);
    // The Fullscreen API needs a click; from `?present=1` the widget fills the window instead.
    if (fromClick && on && document.fullscreenEnabled && !document.fullscreenElement) {
      document.documentElement.requestFullscreen().catch(() => {});
    } else if (fromClick && !on && document.fullscreenElement) {
      document.exitFullscreen().catch(() => {});
    }
    if (on) root.focus({ preventScroll: true });
  }
  if (params.get('present') === '1') setPresent(true, false);
}

// ---- export + set-up link -----------------------------------------------------------------------
function buildPanel() {
  const status = h('p', { class: 'lw-status', testid: 'export-status', 'aria-live': 'polite' });
  const button = (kind, label) => h('button', { type: 'button', class: 'lw-btn', testid: `export-${kind}`,
    onclick: () => download(kind, status) }, label);
  const setup = h('input', { type: 'text', readonly: true, class: 'lw-share cr-setup', testid: 'setup-url',
    'aria-label': 'Link to this set-up', onfocus: (e) => e.target.select() });
  // folded like the widget's other secondary panels (widget/_widget.html .lw-folds)
  const panel = h('details', { class: 'lw-panel lw-fold cr-export', testid: 'export-panel', 'data-fold': 'export' },
    h('summary', {}, h('h3', { id: 'cr-export-h' }, 'Take the run with you ', h('small', {}, 'export, link to this set-up, open a room'))),
    h('div', { class: 'lw-row lw-wrap' }, button('jsonl', 'Events (JSON Lines)'), button('csv', 'Counts (CSV)')),
    status,
    h('label', { class: 'cr-setup-label' }, 'Link to this set-up ',
      h('small', { class: 'lw-doc' }, 'every setting that differs from the chapter’s preset, in the address')),
    setup);
  (root.querySelector('.lw-bottom') || root).append(panel);
  const roomBtn = h('button', { type: 'button', class: 'lw-btn', testid: 'room-from-lab', onclick: () => roomFromLab(status) },
    'Open a classroom room on this lab');
  const roomRow = h('div', { class: 'lw-row lw-wrap cr-room-row' }, roomBtn,
    h('small', { class: 'lw-doc' }, 'a join code and QR code; students watch this lab or copy it'));
  panel.append(roomRow);
  return { status, setup, roomRow };
}

/** Open a room on the lab as it is now (settings tuned, jobs run): the instructor's dashboard follows. */
async function roomFromLab(status) {
  const { lab, api } = current;
  const body = { lab_id: lab.id, view_token: lab.view };
  if (params.get('scenario')) body.scenario = params.get('scenario');
  setText(status, 'opening a room…');
  const res = await api('POST', '/api/rooms', body);
  if (res.status !== 201) { setText(status, `Could not open a room: ${errorText(res.data, res.status)}`); return; }
  const d = res.data;
  localStorage.setItem(`awl:room:${d.code}`, JSON.stringify({ token: d.instructor_token, lab: d.lab, preset: d.lab.preset }));
  location.assign(d.room_url);
}

async function download(kind, status) {
  const { lab } = current;
  setText(status, 'preparing…');
  let res;
  try {
    res = await fetch(`/api/labs/${lab.id}/export.${kind}`, { headers: { Authorization: `Bearer ${lab.token}` } });
  } catch {
    setText(status, 'network error: is the server running?');
    return;
  }
  if (!res.ok) { setText(status, errorText(await res.json().catch(() => null), res.status)); return; }
  const blob = await res.blob();
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: `lab-${lab.id}-${kind === 'csv' ? 'counts.csv' : 'events.jsonl'}`, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
  setText(status, `saved ${kind === 'csv' ? 'the counts' : 'the events'} (${blob.size.toLocaleString()} bytes)`);
}

function updateSetupLink(settings) {
  if (!els || !current || !settings) return;
  const preset = current.meta.presets[root.dataset.preset];
  const base = Object.fromEntries(current.meta.settings.map((s) => [s.name, s.default]));
  Object.assign(base, preset ? preset.settings : {});
  const u = new URL(location.pathname, location.origin);
  if (params.get('scenario')) u.searchParams.set('scenario', params.get('scenario'));
  for (const [name, value] of Object.entries(settings)) {
    if (name !== 'speed' && base[name] !== value) u.searchParams.set(name, String(value));
  }
  if (els.setup.value !== u.href) els.setup.value = u.href;
}

// ---- settings from the URL, scenarios ---------------------------------------------------------
async function applyUrlSettings({ lab, api, meta }) {
  if (lab.viewer) return; // a read-only view shows the instructor's settings, whatever the link says
  const names = new Set(meta.settings.map((s) => s.name));
  const changes = Object.fromEntries([...params].filter(([k]) => names.has(k) && k !== 'speed'));
  if (!Object.keys(changes).length) return;
  const applied = `awl:applied:${lab.id}`, wanted = JSON.stringify(changes);
  if (sessionStorage.getItem(applied) === wanted) { // a reload must not send them (and an event) again
    setAttr(root, 'data-url-settings', 'applied');
    return;
  }
  const res = await api('PATCH', `/api/labs/${lab.id}/settings`, changes);
  if (res.ok) {
    sessionStorage.setItem(applied, wanted);
    setAttr(root, 'data-url-settings', 'applied');
  } else {
    setAttr(root, 'data-url-settings', 'refused');
    notice(`The link’s settings were not applied: ${errorText(res.data, res.status)}`);
  }
}

function notice(text) {
  const b = root.querySelector('[data-role="banner"]');
  b.textContent = text;
  b.hidden = false;
}

async function showScenario({ lab, api }, id) {
  const res = await api('GET', '/api/scenarios');
  const sc = res.ok && res.data.scenarios.find((s) => s.id === id);
  root.querySelector('.cr-scenario')?.remove();
  if (!sc) { notice(`No scenario called “${id}”.`); return; }
  const hint = h('p', { class: 'lw-hint', testid: 'url-scenario-hint', 'aria-live': 'polite' }, sc.hint);
  const run = lab.viewer ? null : h('button', { type: 'button', class: 'lw-btn lw-primary', testid: 'url-scenario-run',
    onclick: async (e) => {
      // the widget's own scenario button commits the guess typed under "Predict first" and measures the run
      const own = sc.button && root.querySelector(`[data-testid="scenario-${sc.button}"]`);
      if (own) { own.click(); setText(hint, `Running. ${sc.hint}`); return; }
      const btn = e.currentTarget; // null once the handler has awaited
      btn.disabled = true;
      setText(hint, await runScenario(api, lab.id, sc));
      btn.disabled = false;
    } }, 'Run the scenario');
  // the answer is told only once the lab has measured it (a verdict for this scenario's run)
  const outcome = h('p', { class: 'lw-hint', testid: 'url-scenario-outcome', hidden: true }, sc.outcome || '');
  root.addEventListener('lab:verdict', (e) => {
    if (sc.outcome && e.detail.scenario === sc.button) outcome.hidden = false;
  });
  const box = h('div', { class: 'cr-scenario', testid: 'url-scenario', 'data-scenario': sc.id },
    h('p', { class: 'cr-scenario-title' }, h('strong', {}, `Scenario: ${sc.title}. `), sc.summary), run, hint, outcome);
  root.querySelector('[data-role="body"]').prepend(box);
  // the page is about this one scenario: its question is the only guess box (the chapter's others are folded away)
  if (sc.button) for (const row of root.querySelectorAll('.lw-pf-row[data-scenario]')) row.hidden = row.dataset.scenario !== sc.button;
}

async function runScenario(api, labId, sc) {
  const fault = async () => {
    const res = await api('POST', `/api/labs/${labId}/faults`, sc.fault);
    return res.ok ? null : `Could not start the fault: ${errorText(res.data, res.status)}`;
  };
  const calls = async () => {
    const res = await api('GET', `/api/labs/${labId}`);
    return res.ok ? [res.data.counts.storage_calls || 0, Number(res.data.settings.upload_parts) || 1] : [0, 1];
  };
  const [calls0] = sc.fault_after_calls ? await calls() : [0];
  if (sc.fault && !sc.fault_after_calls) { const err = await fault(); if (err) return err; }
  const count = sc.enqueue ? (sc.count || 1) : 0;
  for (let i = 0; i < count; i++) {
    const res = await api('POST', `/api/labs/${labId}/jobs`, sc.enqueue);
    if (!res.ok) return `Could not send the job: ${errorText(res.data, res.status)}`;
  }
  if (sc.fault && sc.fault_after_calls) {
    // as the lesson has it: storage goes down under the jobs' calls, once every upload part has called it
    for (let tries = 0; ; tries++) {
      const [now, parts] = await calls();
      if (now >= calls0 + count * parts) break;
      if (tries > 240) return 'The jobs never reached storage, so the outage was not started.';
      await new Promise((r) => setTimeout(r, 250));
    }
    const err = await fault(); if (err) return err;
  }
  return `Running. ${sc.hint}`;
}

// ---- room presence ----------------------------------------------------------------------------
// The page checks in under the seat the room issued it (room-seat.js); the instructor's own lab page
// also shows the instructor token, without which the room refuses to count it as the instructor.
function joinRoom(code) {
  const badge = h('a', { class: 'cr-room', testid: 'room-badge', href: `/join/${encodeURIComponent(code)}` }, 'Room');
  root.querySelector('.lw-head-title').append(badge);
  async function checkIn() {
    const { lab } = current;
    const seat = await roomSeat(code);
    let res = null;
    if (seat) {
      setText(badge, `Room ${seat.display_code}`); // the code as the server writes it, as on the projector
      const headers = { 'Content-Type': 'application/json' };
      const token = instructorToken(code, lab);
      if (token) headers.Authorization = `Bearer ${token}`;
      try {
        res = await fetch(`/api/rooms/${encodeURIComponent(code)}/presence`, {
          method: 'POST', headers, body: JSON.stringify({ client: seat.client, lab_id: lab.viewer ? null : lab.id }) });
      } catch { res = null; }
    }
    if (res && res.status === 404) { setText(badge, 'Room closed'); setAttr(badge, 'data-role-in-room', 'closed'); return; }
    if (res && res.status === 403 && (await res.clone().json().catch(() => ({}))).error === 'not_in_room') {
      dropSeat(code); // a seat the room no longer signs: take a new one next time
    }
    if (res && res.ok) {
      const { role } = await res.json();
      setAttr(badge, 'data-role-in-room', role);
      if (role === 'instructor') badge.href = `/rooms/${encodeURIComponent(code)}`;
      setAttr(badge, 'title', { instructor: 'You are presenting: open the room dashboard',
        student: 'Your own lab; the instructor sees its counts', viewer: 'Watching the instructor’s lab' }[role]);
    }
    setTimeout(checkIn, PRESENCE_MS);
  }
  checkIn();
}
