// Races (issue 22): the races page (set one up) and a race's page (start it, compare the runs live).
//
// The race token (to start it) lives in localStorage under `awl:race:<id>`, like a room's instructor
// token; anyone else with the link watches read-only. The comparison table is polled one request at a
// time (the next waits for the answer); each cell that differs from the first lab says so with ▲/▼
// and the signed difference, never by colour alone.

import { call, errorText, setAttr, setText } from './widget/util.js';

const page = document.querySelector('[data-page="races"], [data-page="race"]');
const store = (id) => `awl:race:${id}`;

/** Open a race's labs (paused at t = 0) and go to its page; the creator keeps its token. */
export async function newRace(raceId, statusEl, extra = {}) {
  setText(statusEl, 'Opening one lab per variant and starting their workers…');
  const res = await call('POST', '/api/races', { race: raceId, ...extra });
  if (res.status !== 201) { setText(statusEl, `Could not set up the race: ${errorText(res.data, res.status)}`); return null; }
  localStorage.setItem(store(res.data.race_id), JSON.stringify({ token: res.data.token }));
  return res.data;
}

function racesPage() {
  for (const btn of page.querySelectorAll('button[data-race]')) {
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      const d = await newRace(btn.dataset.race, btn.closest('li').querySelector('[data-role="status"]'));
      btn.disabled = false;
      if (d) location.assign(d.url);
    });
  }
}

function racePage() {
  const id = page.dataset.raceId;
  const q = (role) => page.querySelector(`[data-role="${role}"]`);
  let saved = null;
  try { saved = JSON.parse(localStorage.getItem(store(id)) || 'null'); } catch { saved = null; }
  const startBtn = q('start');
  const status = q('status');
  const params = new URLSearchParams(location.search);

  // presenter mode: large type, the grid filling the screen (classroom.css-like, in race.css)
  const present = q('present');
  const setPresent = (on) => {
    document.documentElement.classList.toggle('present', on);
    present.setAttribute('aria-pressed', String(on));
    setText(present, on ? 'Exit presenter mode' : 'Presenter mode');
    const u = new URL(location.href);
    if (on) u.searchParams.set('present', '1'); else u.searchParams.delete('present');
    history.replaceState(history.state, '', u);
  };
  present.addEventListener('click', () => setPresent(!document.documentElement.classList.contains('present')));
  if (params.get('present') === '1') setPresent(true);
  q('link').addEventListener('focus', (e) => e.target.select());

  if (saved && saved.token && page.dataset.state !== 'running') {
    startBtn.hidden = false;
    startBtn.disabled = true;
    setText(startBtn, 'Waiting for the workers…');
    startBtn.addEventListener('click', async () => {
      startBtn.disabled = true;
      setText(status, 'Sending the same jobs and fault to every lab…');
      const res = await call('POST', `/api/races/${id}/start`, {}, saved.token);
      if (!res.ok) {
        setText(status, `Could not start: ${errorText(res.data, res.status)}`);
        startBtn.disabled = false;
        return;
      }
      startBtn.hidden = true;
      page.dataset.state = 'running';
      setText(status, 'Running: the same input went into every lab at t = 0.');
    });
  }

  // one y scale for every lane's retry histogram: each lane reports its tallest bar (`lab:hist-peak`), and every
  // lane is handed the tallest of all (`lab:hist-scale`), so a bar half as tall holds half as many retries
  const histPeaks = new Map();
  page.addEventListener('lab:hist-peak', (e) => {
    const lane = e.target.closest('[id^="run-"]');
    if (!lane) return;
    histPeaks.set(lane.id, e.detail.peak);
    const max = Math.max(...histPeaks.values());
    page.dataset.histMax = String(max);
    for (const id of histPeaks.keys()) document.getElementById(id).dispatchEvent(new CustomEvent('lab:hist-scale', { detail: { max } }));
  });

  const fmt = (v) => (v == null ? '–' : Number(v).toLocaleString('en'));
  function fill(d) {
    const first = d.labs[0];
    const at = performance.now();
    for (const lab of d.labs) {
      // one reading of every lab's clock, the same instant for all: each widget ticks on from it
      if (lab.clock) document.getElementById(`run-${lab.side}`)?.dispatchEvent(new CustomEvent('lab:clock', { detail: { ...lab.clock, at } }));
      const clockTd = page.querySelector(`[data-clock="${lab.side}"]`);
      // the lanes share one timeline; when real work holds it, the readout says how fast it really runs
      const slowed = lab.clock && lab.clock.slowed && !lab.clock.paused ? ` (slowed to ${fmt(lab.clock.effective)}×)` : '';
      if (clockTd) setText(clockTd, lab.clock ? `t = ${fmt(Math.round(lab.clock.t))} s${lab.clock.paused ? ' (held)' : slowed}` : 'expired');
      for (const [key] of d.watch) {
        const td = page.querySelector(`tr[data-count="${key}"] td[data-side="${lab.side}"]`);
        if (!td) continue;
        const v = lab.counts ? lab.counts[key] : null;
        const base = first.counts ? first.counts[key] : null;
        const diff = v != null && base != null && lab !== first ? v - base : 0;
        const text = diff ? `${fmt(v)} ${diff > 0 ? '▲' : '▼'} ${diff > 0 ? '+' : '−'}${fmt(Math.abs(diff))} vs A` : fmt(v);
        setText(td, text);
        setAttr(td, 'data-value', v == null ? null : String(v));
        setAttr(td, 'data-diff', diff > 0 ? 'up' : diff < 0 ? 'down' : 'same');
      }
    }
  }

  async function poll() {
    const res = await call('GET', `/api/races/${id}`);
    if (res.ok) {
      fill(res.data);
      if (res.data.started && page.dataset.state !== 'running') {
        page.dataset.state = 'running';
        startBtn.hidden = true;
        setText(status, 'Running: the same input went into every lab at t = 0.');
      } else if (!res.data.started && !startBtn.hidden) {
        startBtn.disabled = !res.data.ready;
        setText(startBtn, res.data.ready ? 'Start the race' : 'Waiting for the workers…');
        if (res.data.ready && !status.dataset.said) {
          status.dataset.said = 'yes';
          setText(status, 'Every lab is ready and held at t = 0. Start the race when everyone is watching.');
        }
      }
      page.dataset.ready = res.data.ready ? 'yes' : 'no';
    } else if (res.status === 404) {
      setText(status, 'This race has expired.');
      return;
    }
    setTimeout(poll, 1000);
  }
  poll();
}

if (page) (page.dataset.page === 'races' ? racesPage : racePage)();
