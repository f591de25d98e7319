// The chapter's challenges (templates/_challenge.html): the learner's handler in a plain textarea with line
// numbers, run on the widget's own lab (POST /api/labs/{lab}/challenge), and the checker's verdict, each broken
// invariant's counterexample outlined on the widget's timeline. A pass is remembered in this browser
// (localStorage `awl.challenges`: challenge id → chapter, which the home page's progress marks read) and kept by
// the checker in the lab, where a room's dashboard reads it.

import { onLab } from './lab-addon.js';
import { h, setAttr, setText } from './widget/util.js';

const PASSED = 'awl.challenges';
const POLL_MS = 400;
const INDENT = '    ';

function passed() {
  try { return JSON.parse(localStorage.getItem(PASSED) || '{}') || {}; } catch { return {}; }
}

function remember(id) {
  const chapter = Number(document.querySelector('article.chapter[data-chapter]')?.dataset.chapter);
  try { localStorage.setItem(PASSED, JSON.stringify({ ...passed(), [id]: chapter })); } catch { /* private mode */ }
}

/** The code box: line numbers that follow the text, Tab/Shift+Tab indent, Enter keeps the indentation,
 * Escape lets the next Tab leave (so the box is never a keyboard trap). */
function editor(area, gutter) {
  let release = false;
  const lines = () => {
    const n = area.value.split('\n').length;
    if (gutter.dataset.n !== String(n)) {
      gutter.textContent = Array.from({ length: n }, (_, i) => i + 1).join('\n');
      gutter.dataset.n = String(n);
    }
    gutter.scrollTop = area.scrollTop;
  };
  const edit = (text, start, end, caretFrom, caretTo) => {
    area.setRangeText(text, start, end, 'end');
    if (caretFrom != null) area.setSelectionRange(caretFrom, caretTo ?? caretFrom);
    area.dispatchEvent(new Event('input'));
  };
  area.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') { release = true; return; }
    if (e.key === 'Tab' && release) { release = false; return; } // let focus move on
    release = false;
    const { selectionStart: a, selectionEnd: b, value } = area;
    if (e.key === 'Tab') {
      e.preventDefault();
      const from = value.lastIndexOf('\n', a - 1) + 1;
      if (!e.shiftKey && a === b) { edit(INDENT, a, b); return; }
      const block = value.slice(from, b);
      const out = e.shiftKey ? block.replace(/^ {1,4}/gm, '') : block.replace(/^/gm, INDENT);
      edit(out, from, b, from, from + out.length);
    } else if (e.key === 'Enter' && !e.shiftKey && !e.ctrlKey && !e.metaKey) {
      e.preventDefault();
      const from = value.lastIndexOf('\n', a - 1) + 1;
      const line = value.slice(from, a);
      const indent = line.match(/^\s*/)[0] + (/:\s*$/.test(line) ? INDENT : '');
      edit(`\n${indent}`, a, b);
    }
  });
  area.addEventListener('input', lines);
  area.addEventListener('scroll', () => { gutter.scrollTop = area.scrollTop; });
  lines();
  return {
    /** Put the caret at the start of `line` (a syntax error's), so the keyboard is where the fix goes. */
    mark(line) {
      setAttr(gutter, 'data-error-line', line ? String(line) : null);
      if (!line) return;
      const at = area.value.split('\n').slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
      area.focus();
      area.setSelectionRange(at, at);
    },
  };
}

/** Outline the counterexample's job and attempts on the widget's timeline (a style rule: the timeline redraws
 * its bars, the rule stays). */
const attr = (v) => String(v).replace(/["\\]/g, '\\$&'); // a value inside a quoted attribute selector

function outline(cex) {
  let style = document.getElementById('challenge-outline');
  if (!style) { style = h('style', { id: 'challenge-outline' }); document.head.append(style); }
  document.querySelectorAll('.lw-tl-row[data-counterexample]').forEach((li) => li.removeAttribute('data-counterexample'));
  if (!cex) { style.textContent = ''; return; }
  const row = document.querySelector(`.lw-tl-row[data-job="${attr(cex.job)}"]`);
  if (row) { row.setAttribute('data-counterexample', 'yes'); row.scrollIntoView({ block: 'center', behavior: 'smooth' }); }
  style.textContent = (cex.attempts || []).map((n) => `[data-testid="tl-attempt-${attr(cex.job)}-${n}"]`).join(',')
    + (cex.attempts && cex.attempts.length ? ' { outline: 3px solid var(--bad); outline-offset: 1px; z-index: 2; }' : '');
}

function panel(root) {
  const q = (role) => root.querySelector(`[data-role="${role}"]`);
  const id = root.dataset.challenge;
  const area = q('code');
  const draftKey = `awl.challenge.${id}`;
  try { const d = localStorage.getItem(draftKey); if (d) area.value = d; } catch { /* private mode */ }
  const ed = editor(area, q('gutter'));
  area.addEventListener('input', () => { try { localStorage.setItem(draftKey, area.value); } catch { /* */ } });
  q('passed').hidden = !(id in passed());
  let lab = null;
  let running = false;

  q('reset').addEventListener('click', () => {
    area.value = root.dataset.starter;
    area.dispatchEvent(new Event('input'));
    area.focus();
  });

  function show(v) {
    const list = q('verdict');
    list.replaceChildren();
    q('hint').hidden = true;
    ed.mark(null);
    outline(null);
    if (v.state === 'error') {
      list.append(h('li', { 'data-held': 'no', testid: 'challenge-error' }, `Stopped: ${v.error}`));
      ed.mark(v.line);
      return;
    }
    let first = null;
    for (const inv of v.invariants || []) {
      const item = h('li', { 'data-held': inv.held ? 'yes' : 'no', testid: `challenge-inv-${inv.id}` },
        h('span', { class: 'ch-mark', 'aria-hidden': 'true' }, inv.held ? '✓' : '✗'),
        h('strong', {}, inv.title), inv.held ? ' — held' : ' — broken');
      if (!inv.held) {
        const cex = inv.counterexample;
        const btn = h('button', { type: 'button', class: 'lw-btn', testid: `challenge-show-${inv.id}`,
          onclick: () => outline(cex) }, 'Show on the timeline');
        item.append(h('p', { class: 'ch-cex', testid: `challenge-cex-${inv.id}` }, cex.text,
          cex.broken_in > 1 ? ` (and ${cex.broken_in - 1} more job${cex.broken_in > 2 ? 's' : ''})` : ''), btn);
        first = first || cex;
      }
      list.append(item);
    }
    for (const err of v.errors || []) list.append(h('li', { 'data-held': 'no' }, `Your handler raised: ${err}`));
    if (v.passed) {
      remember(id);
      q('passed').hidden = false;
      document.dispatchEvent(new CustomEvent('challenge:passed', { detail: { challenge: id, lab: lab && lab.lab } }));
    } else {
      q('hint').hidden = false;
      outline(first);
    }
  }

  async function run() {
    if (!lab || running) return;
    running = true;
    setAttr(q('run'), 'disabled', '');
    root.dataset.state = 'running';
    setText(q('status'), 'Starting your handler on the lab…');
    q('verdict').replaceChildren();
    try {
      const res = await lab.api('POST', `/api/labs/${lab.lab.id}/challenge`, { challenge: id, code: area.value });
      if (!res.ok) {
        const d = res.data || {};
        setText(q('status'), d.verdict ? 'Your code did not start.' : `${d.error || `HTTP ${res.status}`}: ${d.detail || ''}`);
        if (d.verdict) show(d.verdict);
        root.dataset.state = 'error';
        return;
      }
      setText(q('status'), `Running ${res.data.workload}, with the challenge's faults: watch the lab above.`);
      for (;;) {
        await new Promise((r) => setTimeout(r, POLL_MS));
        const got = await lab.api('GET', `/api/labs/${lab.lab.id}/challenge`);
        if (!got.ok) continue;
        if (got.data.state === 'checked' || got.data.state === 'error') {
          root.dataset.state = got.data.passed ? 'passed' : 'failed';
          setText(q('status'), got.data.passed ? 'Every invariant held: passed.'
            : got.data.state === 'error' ? 'The run was stopped.' : 'Some invariants broke: see below.');
          show(got.data);
          return;
        }
      }
    } finally {
      running = false;
      q('run').removeAttribute('disabled');
    }
  }
  q('run').addEventListener('click', run);
  return {
    ready(detail) {
      lab = { lab: detail.lab, api: detail.api };
      q('run').removeAttribute('disabled');
    },
  };
}

const panels = [...document.querySelectorAll('[data-challenge]')].map(panel);
onLab({ ready: (detail) => panels.forEach((p) => p.ready(detail)) });
