// Reading progress, remembered in this browser only: chapters you opened are marked on the home page.
(function () {
  "use strict";
  var KEY = "awl.visited";
  var visited;
  try { visited = JSON.parse(localStorage.getItem(KEY) || "[]"); } catch (e) { visited = []; }
  var here = document.querySelector("article.chapter[data-chapter]");
  if (here) {
    var n = Number(here.dataset.chapter);
    if (visited.indexOf(n) < 0) {
      visited.push(n);
      try { localStorage.setItem(KEY, JSON.stringify(visited)); } catch (e) { /* private mode */ }
    }
  }
  var passed; // challenge id → chapter (static/js/challenge.js)
  try { passed = JSON.parse(localStorage.getItem("awl.challenges") || "{}") || {}; } catch (e) { passed = {}; }
  var won = Object.keys(passed).map(function (id) { return passed[id]; });
  document.querySelectorAll(".toc-item[data-chapter]").forEach(function (item) {
    var n = Number(item.dataset.chapter), said = [];
    if (visited.indexOf(n) >= 0) { item.classList.add("visited"); said.push("already read"); }
    if (won.indexOf(n) >= 0) { item.classList.add("challenge-passed"); said.push("challenge passed"); }
    var link = item.querySelector("a");
    if (link && said.length) { link.setAttribute("aria-description", said.join("; ")); }
  });
})();
