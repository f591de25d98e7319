// The live stream: a WebSocket that resumes after the last event id seen, reconnects with backoff
// (catching up with one plain request meanwhile), and feeds every event, in order, to the model;
// snapshots are fetched (throttled) after events that change more than a progress tick. While it is down
// the picture holds still at the last moment seen (S.lost) and says so over the pipeline: a clock that
// kept counting would run past lease deadlines the page has not seen happen.

import { fmtT, throttled, setText } from './util.js';
import { applySnapshot as foldSnapshot, ingestEvent } from './model.js';
import { socketUrl } from './lab.js';

const QUIET = new Set(['job.progress', 'lease.extended']); // no snapshot re-fetch for these

export function install(W) {
  const { root, S, els } = W;
  let ws = null, wsGen = 0, backoff = 500, notice = 0;

  /** Open the lab's socket, after the last event seen; or take `held`, the one boot.js opened (lab.js heldSocket). */
  function connectWs(held) {
    const gen = ++wsGen;
    let sock;
    if (held) sock = held.sock;
    else {
      try { sock = new WebSocket(socketUrl(S.lab, S.lastId)); } catch { reconnectLater(gen); return; }
    }
    ws = sock;
    const handlers = {};
    handlers.onopen = () => {
      if (gen !== wsGen) return;
      const caughtUp = !!S.lost;
      setConn('live');
      backoff = 500;
      if (caughtUp) refresh(); // the socket resumes after the last id; the snapshot brings the clock's now
    };
    handlers.onmessage = (m) => {
      if (gen !== wsGen) return;
      try { ingest(JSON.parse(m.data)); } catch (e) { console.error('bad event', e); }
    };
    handlers.onclose = (e) => {
      if (gen !== wsGen) return;
      ws = null;
      if (e.code === 4429) { // refused: this address or this lab holds its maximum of live sockets
        setConn('limited');
        W.banner(`Live updates paused: ${e.reason || 'too many open connections'}. Trying again every 15 s.`);
      } else setConn('reconnecting');
      reconnectLater(gen, e.code);
    };
    if (held) held.attach(handlers); // replays, in order, what the socket brought before now
    else Object.assign(sock, handlers);
  }

  function closeWs() {
    wsGen++;
    if (ws) { try { ws.close(); } catch { /* ignore */ } }
    ws = null;
  }

  async function reconnectLater(gen, code) {
    // 1013: server cut a too-slow socket; 4429: over a connection cap, so try again much later
    const delay = code === 1013 ? 150 : code === 4429 ? 15000 : backoff;
    backoff = Math.min(backoff * 2, 10000);
    // While the socket is down, catch up with one plain request (never stacked).
    const res = await W.api('GET', W.labPath(`/events?after=${encodeURIComponent(S.lastId || '0')}`));
    if (gen !== wsGen) return;
    if (res.ok) for (const ev of res.data.events) ingest(ev);
    else if (res.status === 404 && !S.lab.viewer) { await W.labVanished(); return; }
    if (gen !== wsGen || code === 4429) return;
    // no answer at all (or the proxy's "bad gateway"): the server itself is down, not only the socket
    setConn(res.ok || (res.status > 0 && res.status < 502) ? 'reconnecting' : 'down');
    setTimeout(() => { if (gen === wsGen) connectWs(); }, delay * (0.75 + Math.random() * 0.5));
  }

  function setConn(state) {
    const el = els.conn;
    el.dataset.conn = state;
    setText(el, { live: '● live', reconnecting: '○ reconnecting…', connecting: 'connecting…',
      limited: '○ live updates paused (connection limit)', down: '○ server not answering' }[state] || state);
    if (state === 'live') S.lost = null;
    else if (state !== 'connecting' && !S.lost) S.lost = { t: W.simNow() }; // the last moment seen
    showLost(state);
    W.markDirty();
  }

  /** Over the pipeline: what the picture is (frozen, and since when) and what the page is doing about it.
   * A blip (a socket the server cut for being slow, back in 150 ms) is not news: it shows after a second. */
  function showLost(state) {
    clearTimeout(notice);
    const box = W.q('lost');
    if (!S.lost || state === 'limited') { box.hidden = true; delete root.dataset.lost; return; }
    const say = () => {
      if (!S.lost) return;
      root.dataset.lost = state;
      box.dataset.conn = state;
      box.hidden = false;
      sayLost();
    };
    if (box.hidden) notice = setTimeout(say, 1000); else say();
  }

  function sayLost() {
    const box = W.q('lost');
    if (!S.lost || box.hidden) return;
    const at = `What you see stopped at t = ${fmtT(S.lost.t)} s.`;
    setText(W.q('lost-head'), box.dataset.conn === 'down' ? 'The server is not answering' : 'Connection lost');
    setText(W.q('lost-text'), box.dataset.conn === 'down'
      ? `${at} Trying again every few seconds; the picture catches up when the server is back.`
      : `${at} The lab keeps running on the server; reconnecting…`);
  }

  /** One event, in stream order; ids at or below the last seen are ignored (no repeats). */
  function ingest(ev) {
    if (!ev || !ev.id || !ev.type) return;
    if (S.past) { W.holdLive(ev); return; }
    if (S.lost && typeof ev.t_sim === 'number' && ev.t_sim > S.lost.t) { // caught up by the plain request
      S.lost.t = ev.t_sim;
      sayLost();
    }
    if (ev.job_id != null && ev.job_id === S.selectedJob) W.fetchHistorySoon();
    const took = ingestEvent(S, ev, performance.now());
    if (!took) return;
    if (took.live) {
      if (ev.type === 'settings.changed') W.syncControls();
      // parked: no re-fetch until it resumes (a re-fetch is an owner call, which would resume it at once, undoing
      // "Park my oldest lab" asked from another tab; its workers' stops follow the park); opening the page resumes it
      if (ev.type === 'lab.parked' || ev.type === 'lab.resumed') S.parked = ev.type === 'lab.parked';
      if (!QUIET.has(ev.type) && !S.parked) refresh();
    }
    W.addLog(ev, took.live);
    root.dataset.lastEvent = ev.id; // the newest event applied (handy for tests and debugging)
    W.markDirty();
    W.emit('lab:event', ev);
  }

  const refresh = throttled(async () => {
    const lab = S.lab;
    if (!lab) return;
    if (S.past) return; // viewing the past: back to live fetches a fresh snapshot
    const res = await W.api('GET', W.labPath());
    if (S.lab !== lab || S.past) return; // the lab was swapped meanwhile: this answer is about the old one
    if (res.ok) applySnapshot(res.data);
    else if (res.status === 404 && !S.lab.viewer) await W.labVanished();
  }, 500);

  function applySnapshot(snap) {
    if (S.past) return; // a late answer must not overwrite the past being viewed
    foldSnapshot(S, snap, performance.now());
    W.syncControls();
    W.markDirty();
    W.emit('lab:snapshot', snap);
  }

  return { connectWs, closeWs, ingest, refresh, applySnapshot };
}
