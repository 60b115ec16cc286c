// fastlog/console/static/console.js: the web console's small progressive script. Pages
// work without it; with it, forms marked data-confirm ask first, the topics page's search
// box filters the list as one types, and the messages page's "live" box polls for new
// rows (HTML the server rendered and escaped) every 2 s.
"use strict";
document.addEventListener("submit", function (e) {
  var text = e.target.getAttribute("data-confirm");
  if (text && !window.confirm(text)) { e.preventDefault(); }
});
(function () {
  var box = document.getElementById("live");
  var tbody = document.getElementById("records");
  if (!box || !tbody) { return; }
  var MAX_ROWS = 1000;  // the oldest rows go first
  var timer = null;
  var busy = false;
  function poll() {
    if (busy) { return; }
    busy = true;
    var src = box.getAttribute("data-src") + "&offset=" + encodeURIComponent(box.getAttribute("data-next"));
    fetch(src, { credentials: "same-origin" }).then(function (r) {
      var next = r.headers.get("X-Next-Offset");
      return r.text().then(function (html) {
        if (r.ok && next !== null) {
          if (html) { tbody.insertAdjacentHTML("beforeend", html); }
          while (tbody.rows.length > MAX_ROWS) { tbody.deleteRow(0); }
          box.setAttribute("data-next", next);
        }
      });
    }).catch(function () {}).then(function () { busy = false; });
  }
  box.addEventListener("change", function () {
    if (box.checked) { poll(); timer = setInterval(poll, 2000); }
    else if (timer) { clearInterval(timer); timer = null; }
  });
})();
(function () {
  var box = document.querySelector("form.search input[name=q]");
  var table = document.querySelector("table.topics");
  if (!box || !table) { return; }
  box.addEventListener("input", function () {
    var q = box.value.toLowerCase();
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      row.hidden = q !== "" && row.cells[0].textContent.toLowerCase().indexOf(q) < 0;
    });
  });
})();
