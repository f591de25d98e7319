// Shared by the chapter add-on panels (templates/_lab_<addon>.html + static/js/lab-<addon>.js, named by the chapter home's ADDON).
//
// An add-on never opens a lab of its own: it rides on the live widget's lab, so the page drives one
// real pipeline and the add-on's readouts describe the same jobs the widget shows. The widget fires
// `lab:ready` (with its authenticated `api` function), `lab:event` and `lab:snapshot` on #lab-widget.

import { h, setAttr, setText } from './widget/util.js';

/**
 * Run `hooks.ready({lab, api, meta, snapshot})` whenever the widget opens a lab (start, reset,
 * expiry: the add-on must forget the old lab then), `hooks.event(ev)` per event and
 * `hooks.snapshot(snap)` per snapshot. Returns false when the page has no widget.
 */
export function onLab(hooks) {
  const root = document.getElementById('lab-widget');
  if (!root) return false;
  if (hooks.ready) {
    root.addEventListener('lab:ready', (e) => hooks.ready(e.detail));
    if (root.labReady) hooks.ready(root.labReady); // the lab opened before this module ran
  }
  if (hooks.event) root.addEventListener('lab:event', (e) => hooks.event(e.detail));
  if (hooks.snapshot) root.addEventListener('lab:snapshot', (e) => hooks.snapshot(e.detail));
  return true;
}

const SVG = 'http://www.w3.org/2000/svg';

function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) el.setAttribute(k, v);
  for (const kid of kids.flat()) if (kid != null) el.append(kid instanceof Node ? kid : String(kid));
  return el;
}

function ticks(max, n = 4) {
  if (!(max > 0)) return [0];
  const raw = max / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((v) => v >= raw) || raw;
  const out = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Math.round(v * 1e6) / 1e6);
  return out;
}

const W = 560, H = 200, PAD = { l: 44, r: 12, t: 10, b: 30 };

/**
 * A small SVG chart that redraws in place: line series, and/or bars, with a text summary for
 * screen readers (the SVG itself is aria-hidden; `summary` says what the lines show in words).
 * series: [{name, points: [[x, y], ...], cls, dashed}]; bars: [{x0, x1, y, cls, label}];
 * hlines: [{y, cls, label}] for model values drawn across the plot.
 */
export function makeChart({ title, xLabel, yLabel, testid }) {
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'la-chart-svg', 'aria-hidden': 'true',
    preserveAspectRatio: 'none' });
  const summary = h('p', { class: 'la-chart-summary' });
  const legend = h('p', { class: 'la-legend', 'aria-hidden': 'true' });
  const fig = h('figure', { class: 'la-chart', testid },
    h('figcaption', {}, title), svg, legend, summary);

  function draw({ series = [], bars = [], hlines = [], xMax, yMax, text }) {
    const xs = [...series.flatMap((p) => p.points.map((q) => q[0])), ...bars.map((b) => b.x1)];
    const ys = [...series.flatMap((p) => p.points.map((q) => q[1])), ...bars.map((b) => b.y),
      ...hlines.map((l) => l.y)];
    const X = xMax ?? Math.max(1, ...xs);
    const Y = yMax ?? (Math.max(0, ...ys.filter(Number.isFinite)) * 1.1 || 1);
    const px = (x) => PAD.l + (x / X) * (W - PAD.l - PAD.r);
    const py = (y) => H - PAD.b - (Math.min(y, Y) / Y) * (H - PAD.t - PAD.b);
    const kids = [];
    for (const v of ticks(Y)) {
      kids.push(s('line', { x1: PAD.l, x2: W - PAD.r, y1: py(v), y2: py(v), class: 'la-grid' }),
        s('text', { x: PAD.l - 4, y: py(v) + 4, class: 'la-tick', 'text-anchor': 'end' }, fmtTick(v)));
    }
    for (const v of ticks(X, 5)) {
      kids.push(s('text', { x: px(v), y: H - PAD.b + 14, class: 'la-tick', 'text-anchor': 'middle' }, fmtTick(v)));
    }
    kids.push(s('text', { x: W - PAD.r, y: H - 2, class: 'la-axis', 'text-anchor': 'end' }, xLabel || ''),
      s('text', { x: PAD.l + 4, y: PAD.t + 10, class: 'la-axis' }, yLabel || ''));  // inside the plot, clear of the ticks
    for (const b of bars) {
      kids.push(s('rect', { x: px(b.x0), width: Math.max(1, px(b.x1) - px(b.x0) - 1), y: py(b.y),
        height: Math.max(0, py(0) - py(b.y)), class: `la-bar ${b.cls || ''}` }, b.label ? s('title', {}, b.label) : null));
    }
    for (const l of hlines) {
      kids.push(s('line', { x1: PAD.l, x2: W - PAD.r, y1: py(l.y), y2: py(l.y), class: `la-hline ${l.cls || ''}` }));
    }
    for (const p of series) {
      if (!p.points.length) continue;
      const d = p.points.map(([x, y], i) => `${i ? 'L' : 'M'}${px(x).toFixed(1)},${py(y).toFixed(1)}`).join('');
      kids.push(s('path', { d, class: `la-line ${p.cls || ''}${p.dashed ? ' la-dashed' : ''}` }));
    }
    svg.replaceChildren(...kids);
    const names = [...series.map((p) => [p.name, p.cls, p.dashed]), ...hlines.map((l) => [l.label, l.cls, true])];
    const key = names.filter((n) => n[0]).map((n) => n.join('|')).join(';');
    if (legend.dataset.key !== key) {
      legend.dataset.key = key;
      legend.replaceChildren(...names.filter((n) => n[0]).map(([name, cls, dashed]) =>
        h('span', { class: 'la-legend-item' }, h('span', { class: `la-swatch ${cls || ''}${dashed ? ' la-dashed' : ''}` }), ` ${name}`)));
    }
    setText(summary, text || '');
    setAttr(fig, 'data-points', series.reduce((n, p) => n + p.points.length, 0) + bars.length);
  }

  return { el: fig, draw };
}

function fmtTick(v) {
  if (v >= 10000) return `${Math.round(v / 1000)}k`;
  return String(Math.round(v * 100) / 100);
}
