// Try again from here: branch the run at the moment being viewed into a new lab with different
// settings, then open both runs side by side on the compare page.

import { errorText, fmtSetting, fmtT, h, labStore, setText } from './util.js';

export function install(W) {
  const { root, S } = W;

  function branchForm(ev) {
    const names = [...S.controls].filter((n) => S.schema.has(n) && n !== 'speed');
    const base = `${root.id}-br`;
    const fields = names.map((n) => {
      const spec = S.schema.get(n), v = S.settings[n], id = `${base}-${n}`;
      let input;
      if (spec.kind === 'bool') input = h('input', { type: 'checkbox', id, testid: `branch-${n}`, checked: !!v });
      else if (spec.kind === 'choice') {
        input = h('select', { id, testid: `branch-${n}` }, spec.choices.map((c) => h('option', { value: c }, c.replace(/_/g, ' '))));
        input.value = v;
      } else {
        input = h('input', { type: 'number', id, testid: `branch-${n}`, class: 'lw-num', min: spec.min, max: spec.max,
          step: spec.kind === 'int' ? 1 : 'any', value: String(v), inputmode: 'decimal' });
      }
      const read = () => (spec.kind === 'bool' ? input.checked : spec.kind === 'choice' ? input.value
        : input.value.trim() === '' ? '' : Number(input.value));
      return { n, spec, v, input, read,
        el: h('label', { class: 'lw-branch-field', for: id }, h('span', {}, `${spec.label}${spec.unit ? ` (${spec.unit})` : ''}`), input) };
    });
    const out = h('p', { class: 'lw-status', testid: 'branch-status', 'aria-live': 'polite' });
    const err = h('p', { class: 'field-error', testid: 'branch-error', role: 'alert' });
    const go = h('button', { type: 'submit', class: 'lw-btn lw-primary', testid: 'branch-submit' }, 'Try again from here');
    const form = h('form', { class: 'lw-branch-form', 'aria-labelledby': `${base}-h` },
      h('h4', { id: `${base}-h` }, `Try again from t=${fmtT(ev.t_sim)} s with different settings`),
      h('p', { class: 'lw-doc' }, 'A new lab starts from this moment: the jobs not yet done then are sent again, '
        + 'under these settings. Both runs then play side by side.'),
      h('div', { class: 'lw-branch-fields' }, fields.map((f) => f.el)), h('div', { class: 'lw-row' }, go), err, out);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const changes = {};
      for (const f of fields) { const v = f.read(); if (v !== f.v) changes[f.n] = v; }
      setText(err, '');
      go.disabled = true;
      setText(out, 'starting the branch…');
      const res = await W.api('POST', '/api/labs', { branch_of: S.lab.id, at_event: ev.id, settings: changes });
      go.disabled = false;
      if (res.status !== 201) {
        setText(out, '');
        setText(err, errorText(res.data, res.status));
        return;
      }
      const b = res.data;
      // the branch is this browser's lab too: keep its token (the compare page itself only needs view tokens)
      labStore.set(`awl:owned:${b.lab_id}`, { id: b.lab_id, token: b.token, view: b.view_token });
      const u = new URL('/compare', location.origin);
      u.searchParams.set('a', S.lab.id);
      u.searchParams.set('av', S.lab.view || S.lab.token);
      u.searchParams.set('b', b.lab_id);
      u.searchParams.set('bv', b.view_token);
      u.searchParams.set('back', location.pathname);
      const what = Object.entries(changes).map(([n, v]) => `${W.labelOf(n)} ${fmtSetting(v)}`).join(', ') || 'the same settings';
      setText(out, `Branch ${b.lab_id} started with ${what}: ${b.branch.seeded.length} unfinished job${b.branch.seeded.length === 1 ? '' : 's'} sent again. Opening both runs side by side…`);
      location.assign(u.href);
    });
    return form;
  }

  return { branchForm };
}
