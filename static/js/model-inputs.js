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

  // htmx (17 kB, the largest file a chapter loads) is fetched only when the reader comes near the form: as
  // it nears the screen, or on the first focus, pointer or input in it. It is added after the page's
  // `load` (htmx started any earlier waits for a DOMContentLoaded that has passed), and an input made
  // before it is there is sent again once it has processed the page, so no change is lost.
  const form = document.querySelector('.model-inputs[data-htmx]');
  let requested = false, pending = null;
  function loadHtmx() {
    if (requested || !form || window.htmx) return;
    requested = true;
    const add = () => {
      const script = document.createElement('script');
      script.src = form.dataset.htmx;
      script.onload = () => {
        const input = pending;
        pending = null;
        if (input && input.isConnected) input.dispatchEvent(new Event('input', { bubbles: true }));
      };
      document.head.append(script);
    };
    if (document.readyState === 'complete') add(); else window.addEventListener('load', add, { once: true });
  }
  if (form) {
    const near = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) { near.disconnect(); loadHtmx(); }
    }, { rootMargin: '50% 0px' });
    // watched once the lab above it is built: its loading stand-in is a screen shorter, and would put the
    // form on the first screen for a moment
    const lab = document.getElementById('lab-widget');
    if (!lab || lab.labReady) near.observe(form);
    else lab.addEventListener('lab:ready', () => near.observe(form), { once: true });
    form.addEventListener('focusin', loadHtmx);
    form.addEventListener('pointerover', loadHtmx);
  }

  document.addEventListener('input', (e) => {
    if (!e.target.matches('.model-inputs input[type="number"]')) return;
    explain(e.target);
    if (!window.htmx) { pending = e.target; loadHtmx(); }
  });
  // after a swap the server's own messages (if any) are shown; nothing to redo
}());
