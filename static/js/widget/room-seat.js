// This page's seat in a classroom room (issue 27): an id the room signs and hands out, under which the
// page's presence and its one guess per question are counted. An id a page makes up is refused, so one
// address cannot count as a crowd. Kept for the tab (sessionStorage), so a reload keeps its guess.
//
// The seat also carries the room's code as the server writes it (`display_code`): the one formatter
// (app/routes/rooms.py `pretty`), so the chip, the dashboard and the projector read the same ABCDE-FGHJK.

const pending = new Map(); // code → Promise of {client, display_code} | null

export function roomSeat(code) {
  if (!pending.has(code)) pending.set(code, take(code));
  return pending.get(code);
}

/** Forget a seat the room no longer knows (the room was re-keyed or closed): the next call asks again. */
export function dropSeat(code) {
  pending.delete(code);
  sessionStorage.removeItem(`awl:seat:${code}`);
}

async function take(code) {
  const store = `awl:seat:${code}`;
  try {
    const kept = JSON.parse(sessionStorage.getItem(store) || 'null');
    if (kept && kept.client) return kept;
  } catch { /* a damaged entry: take a new seat */ }
  let res;
  try {
    res = await fetch(`/api/rooms/${encodeURIComponent(code)}/members`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  } catch {
    res = null;
  }
  if (!res || !res.ok) {
    pending.delete(code); // try again on the next check-in
    return null;
  }
  const { client, display_code: displayCode } = await res.json();
  const seat = { client, display_code: displayCode };
  try { sessionStorage.setItem(store, JSON.stringify(seat)); } catch { /* storage off: this load only */ }
  return seat;
}

/** The room's instructor token, if this browser opened room `code` and `lab` is the room's own lab. */
export function instructorToken(code, lab) {
  if (!code || !lab || lab.viewer) return null;
  try {
    const saved = JSON.parse(localStorage.getItem(`awl:room:${code}`) || 'null');
    return saved && saved.lab && saved.lab.lab_id === lab.id ? saved.token : null;
  } catch { return null; }
}
