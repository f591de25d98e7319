// Light or dark: the page follows prefers-color-scheme (site.css uses light-dark()); the header's
// "Dark theme" button pins the other one, kept in localStorage. Loaded in <head>, not deferred, so a
// pinned theme is on <html> before the first paint (no flash). A pin that matches the system's choice
// is dropped, so the page follows the system again.
(function () {
  const KEY = 'awl:theme';
  const root = document.documentElement;
  const system = matchMedia('(prefers-color-scheme: dark)');
  let pinned = null;
  try { pinned = localStorage.getItem(KEY); } catch { /* storage off: follow the system */ }
  if (pinned === 'light' || pinned === 'dark') root.dataset.theme = pinned;
  const isDark = () => (root.dataset.theme ? root.dataset.theme === 'dark' : system.matches);

  // every [data-role=theme-toggle] on the page (the header's, and the presenter mode's own) is one switch
  function sync() {
    for (const btn of document.querySelectorAll('[data-role="theme-toggle"]')) btn.setAttribute('aria-pressed', String(isDark()));
    root.dataset.themeNow = isDark() ? 'dark' : 'light';
  }

  function toggle() {
    const want = isDark() ? 'light' : 'dark';
    if ((want === 'dark') === system.matches) {
      delete root.dataset.theme;
      try { localStorage.removeItem(KEY); } catch { /* ignore */ }
    } else {
      root.dataset.theme = want;
      try { localStorage.setItem(KEY, want); } catch { /* ignore */ }
    }
    sync();
  }

  system.addEventListener('change', sync);
  document.addEventListener('click', (e) => {
    if (e.target.closest && e.target.closest('[data-role="theme-toggle"]')) toggle();
  });
  document.addEventListener('DOMContentLoaded', () => {
    for (const btn of document.querySelectorAll('[data-role="theme-toggle"]')) btn.hidden = false;
    sync();
  });
  window.awlThemeSync = sync; // a toggle added later (presenter mode) takes the current state
}());
