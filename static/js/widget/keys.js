// Keyboard shortcuts and their help dialog. They act only where the lab is: focus inside the widget,
// or nothing focused and the pointer over it; elsewhere (reading the prose) Space scrolls the page as
// usual. Never while typing: inputs, selects and editable text keep their keys; space also leaves
// buttons, links and the log alone (there it clicks or scrolls). R asks before resetting (lab.js).

import { h } from './util.js';

const SHORTCUTS = [
  ['Space', 'pause or resume the clock', 'clock'], ['S', 'step a paused clock', 'clock'],
  ['K', 'kill a busy worker', 'kill'], ['U', 'enqueue the chosen sample clip', null],
  ['R', 'reset the lab (asks first)', null], ['?', 'show or hide this help', null], ['Esc', 'close this help or the open job', null],
];

// a checkbox or slider takes no letters, so shortcuts still work there; a text box or select does
const typing = (t) => Boolean(t.closest('textarea, select, [contenteditable]')
  || (t.matches('input') && !['checkbox', 'radio', 'range', 'button', 'submit', 'file'].includes(t.type)));

export function install(W) {
  const { root, S, els } = W;

  // A modal <dialog>: showModal() makes the rest of the page inert and traps Tab inside; Esc closes it
  // natively (the `close` event), and focus goes back to whatever opened it (a button, or the page
  // element that had focus when "?" was pressed).
  let opener = null;
  function buildHelp() {
    const hid = `${root.id}-help-h`;
    els.help = h('dialog', { class: 'lw-help', testid: 'shortcut-help', 'aria-labelledby': hid },
      h('h3', { id: hid }, 'Keyboard shortcuts'),
      h('dl', {}, SHORTCUTS.filter(([, , c]) => !c || S.controls.has(c)).map(([k, what]) => [h('dt', {}, h('kbd', {}, k)), h('dd', {}, what)])),
      h('button', { type: 'button', class: 'lw-btn lw-small', onclick: () => toggleHelp(false) }, 'Close'));
    // Tab and Shift+Tab cycle inside the dialog (a modal dialog alone would let focus leave for the browser)
    els.help.addEventListener('keydown', (e) => {
      if (e.key !== 'Tab') return;
      const f = [...els.help.querySelectorAll('button, [href], input, select, textarea, [tabindex]:not([tabindex="-1"])')];
      const i = f.indexOf(document.activeElement);
      e.preventDefault();
      f[(i + (e.shiftKey ? -1 : 1) + f.length) % f.length].focus();
    });
    els.help.addEventListener('close', () => {
      const back = opener;
      opener = null;
      if (back && back.isConnected && back !== document.body) back.focus();
      else root.focus({ preventScroll: true });
    });
    root.append(els.help);
  }

  const helpOpen = () => Boolean(els.help && els.help.open);

  function toggleHelp(show) {
    if (show && !els.help.open) {
      opener = document.activeElement;
      els.help.showModal();
      els.help.querySelector('button').focus();
    } else if (!show && els.help.open) {
      els.help.close();
    }
  }

  // the pointer over the lab counts only while nothing has focus (a click on the prose focuses <main>)
  let pointerOver = false;
  root.addEventListener('pointerenter', () => { pointerOver = true; });
  root.addEventListener('pointerleave', () => { pointerOver = false; });
  const nothingFocused = (t) => t === document.body || t === document.documentElement;
  // presenter mode: the lab is the whole screen
  const inLab = (t) => root.contains(t) || (nothingFocused(t) && (pointerOver || document.documentElement.classList.contains('present')));

  function onKey(e) {
    if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (!t.closest || typing(t) || !inLab(t)) return;
    const k = e.key.length === 1 ? e.key.toLowerCase() : e.key;
    if (k === '?') { e.preventDefault(); toggleHelp(!helpOpen()); return; }
    if (k === 'Escape') {
      if (helpOpen()) { e.preventDefault(); toggleHelp(false); }
      else if (S.inspect) W.closeInspect();
      else if (S.selectedJob) W.openJob(S.selectedJob);
      return;
    }
    if (S.past) {
      if (k === ' ' && !t.closest('button, a, video, summary, details, [data-role="log"]')) {
        e.preventDefault();
        W.scrubber.togglePlay();
      }
      return; // kill, upload, step and reset act on the live lab: not from a past moment
    }
    if (S.lab.viewer) return;
    const clock = S.controls.has('clock');
    if (k === ' ' && clock && !t.closest('button, a, video, summary, details, [data-role="log"]')) {
      e.preventDefault();
      W.togglePause();
    } else if (k === 's' && clock && S.clock && S.clock.paused) {
      W.clockAction({ action: 'step', seconds: Number(root.querySelector('#lw-step').value) });
    } else if (k === 'k' && S.controls.has('kill')) {
      const busy = [...S.workers.values()].find((w) => w.state === 'busy');
      if (busy) W.killWorker(busy.id);
    } else if (k === 'u') {
      const sample = root.querySelector('#lw-sample');
      if (sample) W.enqueueSample(sample.value);
    } else if (k === 'r' && els.reset) {
      W.askReset();
    }
  }

  return { buildHelp, onKey, toggleHelp, helpOpen };
}
