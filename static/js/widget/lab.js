// The lab behind the widget: the HTTP client, opening this tab's lab for the preset (or a read-only
// viewer link), creating one, resetting it, replacing it when it expired, and the "Lab" controls
// (reset, share a read-only link).

import { errorText, h, labStore, section, setText, statusLine } from './util.js';

let writing = 0; // calls that change something (any method but GET) under way, from any caller on the page
const onSettled = [];

/** Resolves once no call that changes something is under way: a control a step pressed (a panel's POST) has been
 * answered before the step's next act, so the two land in the order the step names them. */
export function writesSettled() {
  return writing ? new Promise((done) => { onSettled.push(done); }) : Promise.resolve();
}

/** fetch() with the lab's token (and `extra` headers); never throws: {ok, status, data} (status 0 on a network error). */
export function makeApi(getLab) {
  return async function call(method, path, body, extra = {}) {
    const write = method !== 'GET';
    if (write) writing += 1;
    try {
      return await send(getLab(), method, path, body, extra);
    } finally {
      if (write && --writing === 0) for (const done of onSettled.splice(0)) done();
    }
  };
}

async function send(lab, method, path, body, extra) {
  const headers = { ...extra };
  if (lab && lab.token) headers.Authorization = `Bearer ${lab.token}`;
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) { headers['Content-Type'] = 'application/json'; payload = JSON.stringify(body); }
  let res;
  try {
    res = await fetch(path, { method, headers, body: payload, credentials: 'same-origin' });
  } catch {
    return { ok: false, status: 0, data: null };
  }
  let data = null;
  if ((res.headers.get('content-type') || '').includes('json')) data = await res.json().catch(() => null);
  return { ok: res.ok, status: res.status, data };
}

const JOB_TRIES = 4; // one job POST and up to three resends of it

/** A fresh Idempotency-Key: 128 random bits (getRandomValues works on a plain-http classroom address too). */
function newJobKey() {
  return [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * POST one job under an Idempotency-Key of its own, resent with the same key while the answer is lost (the
 * connection dropped: status 0) or the first try is still being served (409 request_in_progress): the
 * server replays the job it made, so one click makes one job however the network behaves.
 */
export async function postJob(api, path, body) {
  const headers = { 'Idempotency-Key': newJobKey() };
  let res = null;
  for (let tried = 0; tried < JOB_TRIES; tried += 1) {
    if (tried) await new Promise((done) => setTimeout(done, 400 * tried));
    res = await api('POST', path, body, headers);
    const inProgress = res.status === 409 && res.data && res.data.error === 'request_in_progress';
    if (res.status !== 0 && !inProgress) return res;
  }
  return res;
}

/** A refusal the page can act on: keeps the server's answer (a 429 at the running-lab cap lists the labs). */
export class LabRefused extends Error {
  constructor(res) {
    super(errorText(res.data, res.status));
    this.status = res.status;
    this.data = res.data;
  }
}

/**
 * Open the lab a widget for `preset` shows: a read-only viewer link's lab (`viewLab` + `viewToken`), else
 * this browser's lab for the preset (labStore), else a new one. Resolves {lab, snap, socket, note?} (`note`: why
 * the tab's lab was replaced, when it expired). Pure of any
 * widget state, so a page can start it before the widget's modules have loaded (boot.js). With `live`, the
 * lab's socket opens as soon as the lab is known (a new lab's: beside the snapshot's fetch) and holds what
 * it brings until the widget attaches (`socket`, see heldSocket); without it `socket` is null.
 */
/**
 * The lab of the room this browser opened as its instructor (rooms.js keeps it in localStorage, which every tab
 * shares), so a presenter link opened in another tab shows that lab, not a new idle one the room never sees.
 */
function roomLab(room) {
  if (!room) return null;
  try {
    const rec = JSON.parse(localStorage.getItem(`awl:room:${room}`) || 'null');
    const lab = rec && rec.token && rec.lab;
    return lab && lab.lab_id && lab.token ? { id: lab.lab_id, token: lab.token, view: lab.view_token, ws: lab.ws_url } : null;
  } catch { return null; }
}

export async function openLab({ preset, viewLab, viewToken, speed, storeKey, room = null, live = false }) {
  if (viewLab && viewToken) {
    const lab = { id: viewLab, token: viewToken, viewer: true };
    const res = await makeApi(() => lab)('GET', `/api/labs/${viewLab}`);
    if (res.ok) return { lab, snap: res.data, socket: live ? heldSocket(lab) : null };
    throw new Error(`this read-only link no longer opens a lab (${errorText(res.data, res.status)})`);
  }
  // a room's page in the browser that runs the room: the room's lab; else this browser's own lab for the chapter
  const saved = roomLab(room) || labStore.get(storeKey);
  if (saved && saved.id && saved.token) {
    const res = await makeApi(() => saved)('GET', `/api/labs/${saved.id}`);
    if (res.ok && (!res.data.preset || res.data.preset === preset)) {
      labStore.set(storeKey, saved);
      return { lab: saved, snap: res.data, socket: live ? heldSocket(saved) : null };
    }
    if (!res.ok && ![401, 403, 404].includes(res.status)) throw new LabRefused(res);
    // past its idle TTL: the page says so in words (the server's sentence) over the fresh lab it starts
    if (res.data && res.data.error === 'lab_expired') return { ...await createLab({ preset, speed, storeKey, live }), note: res.data.detail };
  }
  return createLab({ preset, speed, storeKey, live });
}

/** A new lab for the preset, remembered by this browser; resolves {lab, snap, socket} (see openLab). The POST carries no token. */
export async function createLab({ preset, speed, storeKey, live = false }) {
  const body = { preset };
  if (speed) body.speed = speed;
  const res = await makeApi(() => null)('POST', '/api/labs', body);
  if (res.status !== 201) throw new LabRefused(res);
  const d = res.data;
  const lab = { id: d.lab_id, token: d.token, view: d.view_token, ws: d.ws_url };
  labStore.set(storeKey, lab);
  const socket = live ? heldSocket(lab) : null;
  if (d.snapshot) return { lab, snap: d.snapshot, socket }; // the POST's answer carries it (app/routes/labs.py)
  const snap = await makeApi(() => lab)('GET', `/api/labs/${d.lab_id}`);
  if (!snap.ok) {
    if (socket) socket.sock.close();
    throw new Error(errorText(snap.data, snap.status));
  }
  return { lab, snap: snap.data, socket };
}

/** The lab's live stream, resuming after event id `after` (the token rides in the URL: a WebSocket sends no header). */
export function socketUrl(lab, after) {
  const u = new URL(lab.ws || `/ws/labs/${lab.id}`, location.href);
  u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  u.searchParams.set('after', after || '0');
  u.searchParams.set('token', lab.token);
  return u;
}

/**
 * A socket opened before the widget can handle its frames, from the stream's start (as the widget's own
 * first socket is). Its handshake then runs while the page's modules load and its panels are built. Every
 * frame, and its open and close, is kept in order until `attach(handlers)` replays them to the widget's
 * handlers and hands those the socket: nothing is lost or reordered.
 */
export function heldSocket(lab) {
  const sock = new WebSocket(socketUrl(lab, '0'));
  const held = [];
  sock.onopen = (e) => held.push(['onopen', e]);
  sock.onmessage = (e) => held.push(['onmessage', e]);
  sock.onclose = (e) => held.push(['onclose', e]);
  return {
    lab, sock,
    attach(handlers) {
      Object.assign(sock, handlers);
      for (const [name, e] of held.splice(0)) handlers[name](e);
    },
  };
}

/**
 * The oldest of the client's labs a refusal lists ({lab_id, since}: a client_labs_full answer's `running`, a
 * client_labs_kept answer's `kept`), parked or closed by its owner cookie, or by the token this browser
 * remembers for it: the way out a learner at a cap is offered in place.
 */
export async function freeOldest(labs, how) {
  const oldest = [...labs].sort((a, b) => a.since - b.since)[0];
  const lab = labStore.byId(oldest.lab_id) || { id: oldest.lab_id };
  const call = makeApi(() => lab);
  const res = how === 'park' ? await call('POST', `/api/labs/${lab.id}/park`)
    : await call('DELETE', `/api/labs/${lab.id}`);
  if (!res.ok) throw new Error(errorText(res.data, res.status));
}

/** What opening this widget's lab needs: its preset, a viewer link (data attributes or the URL), speed. */
export function openArgs(root, params) {
  const preset = root.dataset.preset;
  return { preset, viewLab: root.dataset.lab || params.get('lab'), viewToken: root.dataset.view || params.get('view'),
    speed: Number(params.get('speed')) || null, storeKey: `awl:lab:${preset}`, room: params.get('room') };
}

export function install(W) {
  const { root, S, els, q, params } = W;
  const api = makeApi(() => S.lab);
  let swapping = null; // the reset or re-create in progress: a 404 meanwhile must not start another

  function announceLab(snapshot) {
    W.emit('lab:ready', { lab: S.lab, api, meta: S.meta, snapshot });
  }

  let held = null; // boot.js's socket for this lab, until the widget takes it (takeHeldSocket)

  /** This widget's lab (the one boot.js started opening, if it did): sets S.lab, resolves the snapshot. */
  async function open() {
    const { lab, snap, socket, note } = await (W.early || openLab(openArgs(root, params)));
    S.lab = lab;
    held = socket;
    // an expired lab's sentence, or a term's old lab whose outputs were cleared to make room (history kept)
    const said = note || (snap && snap.outputs_cleared && snap.outputs_cleared.note);
    if (said) W.banner(said);
    return snap;
  }

  /** The socket boot.js opened for the current lab, once (null if none): stream.js attaches it. */
  function takeHeldSocket() {
    const socket = held && held.lab === S.lab ? held : null;
    held = null;
    return socket;
  }

  /**
   * S.lab keeps pointing at the old lab until the new one exists: renders, ticks and in-flight
   * snapshot fetches run during the POST, and must never find S.lab null.
   */
  async function recreate() {
    const { lab, snap } = await createLab(openArgs(root, params));
    S.lab = lab;
    return snap;
  }

  async function resetLab() {
    if (swapping) return;
    const btn = els.reset;
    btn.disabled = true;
    setText(els.resetStatus, 'resetting…');
    try {
      await swapLab(async () => {
        if (S.lab && !S.lab.viewer) await api('DELETE', `/api/labs/${S.lab.id}`);
      });
      setText(els.resetStatus, 'fresh lab started');
      updateShare();
    } catch (e) {
      setText(els.resetStatus, `reset failed: ${e.message}`);
    } finally {
      btn.disabled = false;
    }
  }

  /** Replace the lab with a fresh one of the same preset (reset, or the old one expired). One at a time. */
  function swapLab(before) {
    if (swapping) return swapping;
    swapping = (async () => {
      if (W.scrubber) W.scrubber.goLive();
      W.closeWs();
      await before();
      labStore.remove(openArgs(root, params).storeKey);
      clearModel();
      const snap = await recreate();
      W.applySnapshot(snap);
      root.dataset.labId = S.lab.id;
      W.connectWs();
      announceLab(snap);
    })().finally(() => { swapping = null; });
    return swapping;
  }

  function clearModel() {
    Object.assign(S, {
      counts: {}, workers: new Map(), jobs: new Map(), snapId: null, lastId: null, events: [],
      tl: new Map(), redeliveries: [], retries: [], jobRetries: [], runFrom: null, deaths: new Map(), faultUntil: {}, dlq: [], dlqFetchedFor: -1,
      log: [], logPending: 0, logRebuild: true, announceQueue: [], selectedJob: null,
      history: new Map(), found: new Map(), foundPrefix: new Map(), pausedForInspect: false, inspect: null, heldJobs: null,
      parked: false,
    });
    els.player.removeAttribute('src');
    els.player.load();
    q('player-wrap').hidden = true;
    W.renderDetail();
    W.renderAll();
  }

  function labVanished() {
    return swapLab(async () => W.banner('This lab was removed after being idle, so a fresh one was started.'));
  }

  // Reset deletes the run, so it asks first, in the page (a modal <dialog>: Esc or "Keep" cancels, focus
  // goes back to what had it), whether it came from the button or the R key.
  let confirmBox = null, confirmFrom = null;
  function askReset() {
    if (swapping || (confirmBox && confirmBox.open)) return;
    if (!confirmBox) {
      const hid = `${root.id}-reset-h`;
      const keep = h('button', { type: 'button', class: 'lw-btn', testid: 'reset-cancel', onclick: () => confirmBox.close() }, 'Keep this lab');
      confirmBox = h('dialog', { class: 'lw-help lw-confirm', testid: 'reset-confirm', 'aria-labelledby': hid, 'aria-describedby': `${hid}-d` },
        h('h3', { id: hid }, 'Reset the lab?'),
        h('p', { id: `${hid}-d` }, 'This deletes its workers, files and history, and starts a fresh lab from the chapter’s preset.'),
        h('div', { class: 'lw-row' }, keep, h('button', { type: 'button', class: 'lw-btn lw-danger', testid: 'reset-confirm-yes',
          onclick: () => { confirmBox.close(); resetLab(); } }, 'Reset now')));
      confirmBox.addEventListener('close', () => {
        const back = confirmFrom;
        confirmFrom = null;
        if (back && back.isConnected && back !== document.body) back.focus();
        if (!back || document.activeElement !== back) root.focus({ preventScroll: true }); // e.g. the reset button, disabled meanwhile
      });
      root.append(confirmBox);
    }
    confirmFrom = document.activeElement;
    confirmBox.showModal();
    confirmBox.querySelector('[data-testid="reset-cancel"]').focus();
  }

  function buildLabSection() {
    els.reset = h('button', { type: 'button', class: 'lw-btn', testid: 'reset-lab', onclick: askReset }, 'Reset lab');
    els.resetStatus = statusLine('reset-status');
    els.share = h('input', { type: 'text', readonly: true, class: 'lw-share', testid: 'share-url',
      'aria-label': 'Read-only link to this lab', onfocus: (e) => e.target.select() });
    const shareBox = h('details', { class: 'lw-share-box' },
      h('summary', {}, 'Show this lab on other screens'),
      h('p', { class: 'lw-doc' }, 'Anyone with this link watches this same lab live, read-only (for a class on a projector).'),
      els.share);
    updateShare();
    return section('Lab', h('div', { class: 'lw-row lw-wrap' }, els.reset,
      h('small', { class: 'lw-doc' }, 'Deletes this lab (workers, files, history) and starts a fresh one.')),
    els.resetStatus, shareBox);
  }

  function updateShare() {
    if (!els.share || !S.lab || !S.lab.view) return;
    const u = new URL(location.pathname, location.origin);
    u.searchParams.set('lab', S.lab.id);
    u.searchParams.set('view', S.lab.view);
    els.share.value = u.href;
  }

  /** This lab's own job POST (postJob): one click, one job. */
  const postLabJob = (body) => postJob(api, W.labPath('/jobs'), body);
  return { api, postJob: postLabJob, announceLab, openLab: open, takeHeldSocket, resetLab, askReset, labVanished,
    buildLabSection };
}
