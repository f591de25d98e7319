// Settings controls, built from the schema /api/meta serves (label, doc, kind, min/max, choices,
// unit): switches, radios, selects, log-scale sliders with an exact number box; each change is a
// PATCH, each refusal shown beside its field; the controls follow the lab's settings as they change.

import { errorText, fmtNum, h, nearestIndex, niceStops, setAttr, setText } from './util.js';

export function install(W) {
  const { S, els } = W;

  function buildSetting(s) {
    const id = `lw-set-${s.name}`;
    const docId = `${id}-doc`, errId = `${id}-err`;
    const described = `${docId} ${errId}`;
    const err = h('p', { class: 'field-error', id: errId, testid: `error-${s.name}`, 'aria-live': 'polite' });
    const doc = h('p', { class: 'lw-doc', id: docId },
      s.doc.split('`').map((part, i) => (i % 2 ? h('code', {}, part) : part)));
    const f = { s, err, inputs: [] };
    els.fields[s.name] = f;
    let body;
    if (s.kind === 'bool') {
      const box = h('input', { type: 'checkbox', role: 'switch', id, testid: `setting-${s.name}`,
        'aria-describedby': described });
      const state = h('span', { class: 'lw-switch-state', 'aria-hidden': 'true' });
      box.addEventListener('change', () => patchSetting(s.name, box.checked));
      f.inputs = [box];
      f.set = (v) => { box.checked = !!v; setText(state, v ? 'on' : 'off'); };
      body = h('div', { class: 'lw-row' }, box, h('label', { for: id, class: 'lw-switch-label' }, s.label), state);
    } else if (s.kind === 'choice' && s.choices.length <= 3) {
      const radios = s.choices.map((c) => {
        const r = h('input', { type: 'radio', name: id, value: c, id: `${id}-${c}`, testid: `setting-${s.name}-${c}` });
        r.addEventListener('change', () => { if (r.checked) patchSetting(s.name, c); });
        return r;
      });
      f.inputs = radios;
      f.set = (v) => radios.forEach((r) => { r.checked = r.value === v; });
      return h('fieldset', { class: 'lw-field', 'data-setting': s.name, 'aria-describedby': described },
        h('legend', {}, s.label),
        h('div', { class: 'lw-row lw-wrap' }, radios.map((r) => h('label', { class: 'lw-radio', for: r.id }, r, r.value))),
        err, doc);
    } else if (s.kind === 'choice') {
      const sel = h('select', { id, testid: `setting-${s.name}`, 'aria-describedby': described },
        s.choices.map((c) => h('option', { value: c }, c.replace(/_/g, ' '))));
      sel.addEventListener('change', () => patchSetting(s.name, sel.value));
      f.inputs = [sel];
      f.set = (v) => { sel.value = v; };
      body = h('div', { class: 'lw-row' }, h('label', { for: id }, s.label), sel);
    } else {
      body = buildNumber(s, id, described, f);
    }
    const extra = s.name === 'vt_seconds' ? (els.vtHint = h('p', { class: 'lw-vt-hint', testid: 'vt-hint' })) : null;
    return h('div', { class: 'lw-field', 'data-setting': s.name }, body, err, extra, doc);
  }

  function buildNumber(s, id, described, f) {
    const linear = s.kind === 'int' && s.max - s.min <= 40;
    const stops = linear ? null : niceStops(s.min, s.max);
    const unit = s.unit ? ` ${s.unit}` : '';
    const range = h('input', { type: 'range', id, testid: `setting-${s.name}`, 'aria-describedby': described,
      min: linear ? s.min : 0, max: linear ? s.max : stops.length - 1, step: 1 });
    const num = h('input', { type: 'number', class: 'lw-num', testid: `setting-${s.name}-number`,
      'aria-label': `${s.label}${s.unit ? ` (${s.unit})` : ''}, exact value`, 'aria-describedby': described,
      step: s.kind === 'int' ? 1 : 'any', inputmode: 'decimal' });
    const fromRange = () => (linear ? Number(range.value) : stops[Number(range.value)]);
    const show = (v) => {
      range.setAttribute('aria-valuetext', `${fmtNum(v)}${unit}`);
      if (document.activeElement !== num) num.value = String(v);
    };
    range.addEventListener('input', () => { const v = fromRange(); show(v); updateVtHint(s.name === 'vt_seconds' ? v : undefined); });
    range.addEventListener('change', () => patchSetting(s.name, fromRange()));
    num.addEventListener('change', () => {
      const raw = num.value.trim();
      patchSetting(s.name, raw === '' ? raw : Number(raw));
    });
    f.inputs = [range, num];
    f.set = (v) => {
      range.value = String(linear ? v : nearestIndex(stops, v));
      range.setAttribute('aria-valuetext', `${fmtNum(v)}${unit}`);
      num.value = String(v);
    };
    return h('div', { class: 'lw-num-field' },
      h('label', { for: id }, s.label, s.unit ? h('small', {}, ` (${s.unit === '×' ? 'times' : s.unit})`) : null),
      h('div', { class: 'lw-row' }, range, num, s.unit ? h('span', { class: 'lw-unit', 'aria-hidden': 'true' }, s.unit) : null));
  }

  async function patchSetting(name, value) {
    const f = els.fields && els.fields[name];
    if (f) { setText(f.err, ''); f.inputs.forEach((i) => i.removeAttribute('aria-invalid')); }
    const res = await W.api('PATCH', W.labPath('/settings'), { [name]: value });
    if (res.ok) {
      S.settings = res.data.settings;
      syncControls(name);
      W.markDirty();
      return;
    }
    const msg = res.data && res.data.detail && typeof res.data.detail === 'object' && res.data.detail[name]
      ? res.data.detail[name] : errorText(res.data, res.status);
    if (f) {
      setText(f.err, `${f.s.label} ${msg}`);
      f.inputs.forEach((i) => i.setAttribute('aria-invalid', 'true'));
      // put the slider/switch back to the lab's real value; leave typed text for fixing
      const keep = f.inputs.find((i) => i.type === 'number');
      const typed = keep && keep.value;
      f.set(S.settings[name]);
      if (keep) keep.value = typed;
    }
  }

  /** Reflect the lab's settings in the controls, except the one the learner is touching. */
  function syncControls(justSet) {
    for (const [name, f] of Object.entries(els.fields || {})) {
      if (!(name in S.settings)) continue;
      const touching = f.inputs.some((i) => i === document.activeElement) && name !== justSet;
      if (touching || f.inputs.some((i) => i.getAttribute('aria-invalid'))) continue;
      f.set(S.settings[name]);
    }
    W.syncSpeed();
    updateVtHint();
  }

  function updateVtHint(vtDragging) {
    if (!els.vtHint) return;
    const vt = vtDragging ?? S.settings.vt_seconds;
    const dur = S.settings.job_duration;
    const hb = S.settings.heartbeat;
    let text;
    if (S.settings.ack_mode === 'early') text = `Ack early: the message is deleted on claim, so there is no lease at all.`;
    else if (hb) text = `Lease ${fmtNum(vt)} s, renewed every ${fmtNum(S.settings.heartbeat_interval)} s to +${fmtNum(S.settings.heartbeat_extend)} s while the worker lives: a ${fmtNum(dur)} s job keeps it.`;
    else if (vt < dur) text = `Lease ${fmtNum(vt)} s < job ${fmtNum(dur)} s: the lease runs out mid-job and the job is redelivered while still running.`;
    else text = `Lease ${fmtNum(vt)} s ≥ job ${fmtNum(dur)} s: it covers the job; a crash is noticed ${fmtNum(vt)} s after the claim.`;
    setText(els.vtHint, text);
    setAttr(els.vtHint, 'data-ok', (!hb && vt < dur && S.settings.ack_mode !== 'early') ? 'no' : 'yes');
  }

  return { buildSetting, syncControls };
}
