// Small helpers shared by the lab widget's modules and the chapter add-ons: DOM building, keyed
// lists, number formatting, event-id order, and the plain-words narration built from /api/meta's
// event templates. Nothing here touches the document until called, so node can import it.

/** Build an element: h('button', {class: 'x', testid: 'y', onclick: fn}, 'text', child). */
export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'testid') el.setAttribute('data-testid', v);
    else if (k === 'role_') el.dataset.role = v;
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value' || k === 'checked') el[k] = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat(3)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

/** Set text only when it changed (keeps selections and avoids layout work). */
export function setText(el, text) {
  const s = String(text);
  if (el && el.textContent !== s) el.textContent = s;
}

export function setAttr(el, name, value) {
  if (!el) return;
  if (value == null || value === false) {
    if (el.hasAttribute(name)) el.removeAttribute(name);
  } else {
    const s = value === true ? '' : String(value);
    if (el.getAttribute(name) !== s) el.setAttribute(name, s);
  }
}

/** Seconds as the lab shows them: 2,094 · 12.5 · 0.25 */
export function fmtNum(v) {
  if (typeof v !== 'number' || !Number.isFinite(v)) return v == null ? '–' : String(v);
  const a = Math.abs(v);
  if (a >= 100) return Math.round(v).toLocaleString('en');
  if (a >= 10) return String(Math.round(v * 10) / 10);
  return String(Math.round(v * 100) / 100);
}

export function fmtT(t) {
  return typeof t === 'number' && Number.isFinite(t) ? Math.round(t).toLocaleString('en') : '–';
}

/** 3725 → "1 h 2 min" · 95 → "1 min 35 s" · 40 → "40 s" */
export function fmtDur(s) {
  if (typeof s !== 'number' || !Number.isFinite(s)) return '–';
  s = Math.max(0, Math.round(s));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min${s % 60 ? ` ${s % 60} s` : ''}`;
  const m = Math.floor((s % 3600) / 60);
  return `${Math.floor(s / 3600)} h${m ? ` ${m} min` : ''}`;
}

/** Stream ids "ms-seq" in order (ms fits a double exactly). */
export function idCmp(a, b) {
  if (a === b) return 0;
  const [am, as = '0'] = String(a || '0').split('-');
  const [bm, bs = '0'] = String(b || '0').split('-');
  return (Number(am) - Number(bm)) || (Number(as) - Number(bs));
}

/** The API's error body {error, detail} as one sentence; field errors keyed by field. */
export function errorText(data, status) {
  if (!data) return status ? `request failed (HTTP ${status})` : 'network error: is the server running?';
  const d = data.detail;
  if (d && typeof d === 'object') return Object.values(d).join('; ');
  if (typeof d === 'string' && d) return d;
  return (data.error || `HTTP ${status}`).replace(/_/g, ' ');
}

/** "job 7 redelivered as attempt 2" from the meta template for this event's type. */
export function narrate(ev, meta, labelOf) {
  const spec = meta.events[ev.type];
  const tpl = spec ? spec.text : ev.type.replace('.', ' ');
  const d = ev.data || {};
  const vals = {
    job: ev.job_id ?? d.job_id ?? '?', worker: ev.worker_id ?? d.worker_id ?? '?',
    attempt: ev.attempt ?? '?', t: fmtT(ev.t_sim),
  };
  for (const [k, v] of Object.entries(d)) {
    if (k === 'changes' && v && typeof v === 'object') {
      vals.changes = Object.entries(v).map(([n, x]) => `${labelOf(n)} → ${fmtSetting(x)}`).join(', ');
    } else if (typeof v === 'number') {
      vals[k] = ['deadline', 'due', 't'].includes(k) ? fmtT(v) : fmtNum(v);
    } else if (v != null) {
      vals[k] = String(v).replace(/_/g, k === 'fault' ? ' ' : '_');
    }
  }
  return tpl
    .replace(/\{(\w+)\}/g, (_, k) => (k in vals ? vals[k] : '…'))
    .replace(/(\d)s\b/g, '$1 s');
}

export function fmtSetting(v) {
  if (v === true) return 'on';
  if (v === false) return 'off';
  if (typeof v === 'number') return fmtNum(v);
  return String(v);
}

/** Log-ish "nice" stops between min and max: 10 12 15 20 25 30 40 50 60 80 100 120 … */
export function niceStops(min, max) {
  const mults = [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8];
  const out = new Set([min, max]);
  for (let e = Math.floor(Math.log10(Math.max(min, 1e-3))) - 1; e <= Math.ceil(Math.log10(max)); e++) {
    for (const m of mults) {
      const v = Number((m * 10 ** e).toPrecision(3));
      if (v > min && v < max) out.add(v);
    }
  }
  return [...out].sort((a, b) => a - b);
}

export function nearestIndex(stops, v) {
  let best = 0;
  for (let i = 1; i < stops.length; i++) {
    if (Math.abs(Math.log(stops[i] / v)) < Math.abs(Math.log(stops[best] / v))) best = i;
  }
  return best;
}

/** Trailing-edge throttle that never overlaps async runs. */
export function throttled(fn, minGapMs, leadMs = 120) {
  let timer = null, running = false, again = false, last = 0;
  const run = async () => {
    timer = null; running = true; again = false; last = performance.now();
    try { await fn(); } finally {
      running = false;
      if (again) schedule();
    }
  };
  const schedule = () => {
    if (running) { again = true; return; }
    if (timer) return;
    timer = setTimeout(run, Math.max(leadMs, minGapMs - (performance.now() - last)));
  };
  return schedule;
}

/** Keyed list update: create missing items, update all, remove stale, keep order. */
export function syncList(list, cache, items, keyOf, create, update) {
  const seen = new Set();
  items.forEach((item, idx) => {
    const k = keyOf(item);
    seen.add(k);
    let e = cache.get(k);
    if (!e) { e = create(item); cache.set(k, e); }
    update(item, e);
    const at = list.children[idx];
    if (at !== e.li) list.insertBefore(e.li, at || null);
  });
  for (const [k, e] of cache) if (!seen.has(k)) { e.li.remove(); cache.delete(k); }
}

/** A titled block of the controls column. */
export function section(title, ...kids) {
  return h('section', { class: 'lw-ctl-section' }, h('h3', {}, title), ...kids);
}

/** A polite status line under a control. */
export function statusLine(testid) {
  return h('p', { class: 'lw-status', testid, 'aria-live': 'polite' });
}

/** An uploaded file's id is 12 hex digits: say so instead of showing it. */
export const videoLabel = (v) => (/^[0-9a-f]{12}$/.test(v || '') ? 'uploaded file' : v || '');

export const stateWord = (st) => ({ queued: 'queued', running: 'running', retrying: 'waiting to retry', done: 'done',
  dlq: 'dead-lettered', lost: 'lost' }[st] || st || '…');

/** One JSON call of the API outside the widget (rooms, races): {ok, status, data}; a network failure
 * is status 0, a body that is not JSON is data null. */
export async function call(method, path, body, token) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  try {
    const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const data = (res.headers.get('content-type') || '').includes('json') ? await res.json().catch(() => null) : null;
    return { ok: res.ok, status: res.status, data };
  } catch {
    return { ok: false, status: 0, data: null };
  }
}

/**
 * The labs this browser owns, by key (`awl:lab:<preset>`: a chapter page's lab; `awl:owned:<id>`: a branch it
 * started), each as {id, token, view, ws}. Kept in localStorage, so a lab outlives its tab and the day: its page
 * opens it again, history and all, for as long as the server keeps it (LAB_IDLE_TTL). A browser that refuses
 * storage (a private mode, a full quota) just opens a new lab each time.
 */
export const labStore = {
  get(key) {
    try { return JSON.parse(localStorage.getItem(key) || 'null'); } catch { return null; }
  },
  set(key, lab) {
    try { localStorage.setItem(key, JSON.stringify(lab)); } catch { /* refused: the lab is this page's only */ }
  },
  remove(key) {
    try { localStorage.removeItem(key); } catch { /* refused */ }
  },
  /** The remembered lab with this id (its token with it), else null. */
  byId(id) {
    try {
      for (let i = 0; i < localStorage.length; i += 1) {
        const k = localStorage.key(i);
        const lab = /^awl:(lab|owned):/.test(k) ? labStore.get(k) : null;
        if (lab && lab.id === id && lab.token) return lab;
      }
    } catch { /* refused */ }
    return null;
  },
};
