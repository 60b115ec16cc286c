// fastlog/console/static/charts.js: the charts page. Reads /charts/data (the console's
// samples) every few seconds and draws messages in per second per topic, lag per group
// and each broker's /metrics rates with the vendored uPlot.
"use strict";
(function () {
  var root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined") { return; }
  var charts = {};
  // The broker series of /charts/data, one chart per unit.
  var units = [["bytes per second", ["bytes_in", "bytes_out"]],
               ["messages in per second", ["messages_in"]],
               ["CPU seconds per second", ["cpu_s"]]];
  var palette = ["#3867d6", "#20bf6b", "#eb3b5a", "#f7b731", "#8854d0", "#0fb9b1", "#fa8231", "#4b6584"];
  function draw(id, parent, title, names, t, columns) {
    var key = id + "|" + names.join("\u0000");
    var data = [t].concat(columns);
    var chart = charts[id];
    if (chart && chart.key === key) { chart.plot.setData(data); return; }
    if (chart) { chart.plot.destroy(); }
    var el = document.getElementById(id);
    if (!el) {
      el = document.createElement("div");
      el.id = id;
      parent.appendChild(el);
    }
    el.className = "chart";
    var series = [{}].concat(names.map(function (n, i) {
      return { label: n, stroke: palette[i % palette.length], width: 2, spanGaps: true };
    }));
    var width = Math.max(320, Math.min(1000, root.clientWidth - 20));
    var plot = new uPlot({ title: title, width: width, height: 220, series: series,
                           axes: [{}, { size: 70 }] }, data, el);
    charts[id] = { key: key, plot: plot };
  }
  function refresh() {
    fetch(root.getAttribute("data-src"), { credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (d) {
        var problem = document.getElementById("chart-problem");
        if (problem) { problem.hidden = !d.problem; problem.textContent = d.problem || ""; }
        var topics = Object.keys(d.topics);
        draw("chart-topics", root, "messages/s", topics, d.t, topics.map(function (k) { return d.topics[k]; }));
        var groups = Object.keys(d.groups);
        draw("chart-groups", root, "lag (messages)", groups, d.t, groups.map(function (k) { return d.groups[k]; }));
        var section = document.getElementById("broker-charts");
        Object.keys(d.brokers).forEach(function (url, i) {
          var m = d.brokers[url];
          units.forEach(function (u, j) {
            var names = u[1].filter(function (k) { return k in m; });
            if (names.length) {
              draw("chart-broker-" + i + "-" + j, section, url + ": " + u[0], names, d.t,
                   names.map(function (k) { return m[k]; }));
            }
          });
        });
      })
      .catch(function () {});
  }
  refresh();
  setInterval(refresh, 5000);
})();
