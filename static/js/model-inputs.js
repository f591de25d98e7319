// The "What if?" form (templates/_model_inputs.html): htmx recomputes the chapter on every valid change
// and keeps focus (the inputs keep their ids across the swap). A value the form cannot send (out of
// range, not a number, off the step) is explained right under its field, at once, instead of nothing
// happening; the figures keep the last valid value until it is fixed.
(function () {
  const fmt = (v) => Number(v).toLocaleString('en');

  function explain(input) {
    const err = document.getElementById(`err-${input.name}`);
    if (!err) return;
    const v = input.validity;
    const label = input.labels?.[0]?.firstChild?.textContent?.trim() || input.name;
    const range = `from ${fmt(input.min)} to ${fmt(input.max)}`;
    let msg = '';
    if (v.valueMissing || v.badInput || (input.value === '' && !v.valid)) msg = `${label}: enter a number ${range}.`;
    else if (input.value === '') msg = `${label}: enter a number ${range}; the figures below keep the last value.`;
    else if (v.rangeOverflow) msg = `${fmt(input.value)} is above the largest ${label.toLowerCase()} this model takes (${fmt(input.max)}); the figures below keep the last valid value.`;
    else if (v.rangeUnderflow) msg = `${fmt(input.value)} is below the smallest ${label.toLowerCase()} this model takes (${fmt(input.min)}); the figures below keep the last valid value.`;
    else if (v.stepMismatch) msg = `${label} moves in steps of ${input.step}; the figures below keep the last valid value.`;
    if (err.textContent !== msg) err.textContent = msg;
    if (msg) input.setAttribute('aria-invalid', 'true'); else input.removeAttribute('aria-invalid');
  }

  document.addEventListener('input', (e) => {
    if (e.target.matches('.model-inputs input[type="number"]')) explain(e.target);
  });
  // after a swap the server's own messages (if any) are shown; nothing to redo
}());
