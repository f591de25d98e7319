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
  document.querySelectorAll(".toc-item[data-chapter]").forEach(function (item) {
    if (visited.indexOf(Number(item.dataset.chapter)) >= 0) {
      item.classList.add("visited");
      var link = item.querySelector("a");
      if (link) { link.setAttribute("aria-description", "already read"); }
    }
  });
})();
