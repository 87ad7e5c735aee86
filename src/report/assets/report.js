// faultline report.html: draws the charts from the JSON blob in #report-data with uPlot (inlined before this
// script). Every time chart shares the x axis (seconds from the run's origin), the cursor, the phase shading and
// the width of the left axis, so that the plot areas line up one above the other.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var dpr = window.devicePixelRatio || 1;
  var WIDTH = Math.max(600, Math.min(1310, document.documentElement.clientWidth - 50));
  var AXIS = 116; // left axis width of every time chart: room for the breaker names
  var PHASE_FILL = ["rgba(90,120,200,0.07)", "rgba(200,120,60,0.10)", "rgba(80,160,110,0.08)", "rgba(160,90,170,0.08)"];
  var STATE_FILL = ["#7cc68d", "#f2b33d", "#d9534f"];
  var sync = uPlot.sync("time");

  // The drawn points' times (a long run's points each hold the lowest then the highest value they cover); every
  // series below has one value per point, counts per bucket of b seconds.
  var xs = D.x, n = xs.length, b = D.bucket_s;
  function perSecond(counts) {
    var out = new Array(n);
    for (var i = 0; i < n; i++) out[i] = counts && counts[i] != null ? counts[i] / b : null;
    return out;
  }

  function fail(where, e) {
    console.error("faultline report: " + where + ": " + e);
    var el = document.getElementById(where);
    if (el) {
      var p = document.createElement("p");
      p.className = "error";
      p.textContent = "could not draw this chart: " + e;
      el.appendChild(p);
    }
  }

  // Phases as shaded bands with their names along the top.
  function phasePlugin() {
    return {
      hooks: {
        drawClear: function (u) {
          var ctx = u.ctx, t = u.bbox.top, h = u.bbox.height;
          ctx.save();
          D.phases.forEach(function (p, k) {
            var x0 = u.valToPos(p[1], "x", true), x1 = u.valToPos(p[2], "x", true);
            ctx.fillStyle = PHASE_FILL[k % PHASE_FILL.length];
            ctx.fillRect(x0, t, x1 - x0, h);
            ctx.strokeStyle = "rgba(60,70,90,0.35)";
            ctx.lineWidth = dpr;
            ctx.beginPath();
            ctx.moveTo(Math.round(x0) + 0.5, t);
            ctx.lineTo(Math.round(x0) + 0.5, t + h);
            ctx.stroke();
          });
          ctx.restore();
        },
        draw: function (u) {
          var ctx = u.ctx;
          ctx.save();
          ctx.font = 11 * dpr + "px system-ui, sans-serif";
          ctx.fillStyle = "#3a4252";
          ctx.textBaseline = "bottom";
          // A name that would run into the one before it is left out (many short phases); zooming in shows it.
          var free = -Infinity;
          D.phases.forEach(function (p) {
            var x0 = Math.max(u.valToPos(p[1], "x", true), u.bbox.left) + 3 * dpr;
            var x1 = u.valToPos(p[2], "x", true);
            if (x1 <= u.bbox.left || x0 < free || x0 > u.bbox.left + u.bbox.width) return;
            ctx.fillText(p[0], x0, u.bbox.top - 3 * dpr);
            free = x0 + ctx.measureText(p[0]).width + 6 * dpr;
          });
          ctx.restore();
        },
      },
    };
  }

  function note(id, text) {
    var p = document.createElement("p");
    p.className = "note";
    p.textContent = text;
    document.getElementById(id).appendChild(p);
  }

  function timeChart(id, height, series, data, yScale, yAxis, plugins, legend) {
    if (n === 0) {
      note(id, "Nothing was recorded: the run ended before its first bucket.");
      return;
    }
    try {
      var opts = {
        width: WIDTH,
        height: height,
        // Room above the plot for the phase names, the same on every chart so the x axes line up.
        padding: [18, 12, 0, 0],
        legend: { show: legend !== false },
        cursor: { sync: { key: sync.key }, drag: { x: true, y: false } },
        scales: { x: { time: false, range: [0, D.end_s] }, y: yScale },
        axes: [
          { label: "seconds from start", labelSize: 20, size: 34 },
          Object.assign({ size: AXIS, labelSize: 18 }, yAxis),
        ],
        series: [{ label: "t (s)", value: function (u, v) { return v == null ? "-" : v.toFixed(1); } }].concat(series),
        plugins: [phasePlugin()].concat(plugins || []),
      };
      return new uPlot(opts, [xs].concat(data), document.getElementById(id));
    } catch (e) {
      fail(id, e);
    }
  }

  function fmt(digits) {
    return function (u, v) { return v == null ? "-" : (+v).toFixed(digits); };
  }

  // 1. SUT latency percentiles over time, log scale.
  var L = D.latency;
  timeChart(
    "chart-latency",
    240,
    [
      { label: "p50", stroke: "#3b7dd8", width: 1.2, value: fmt(2) },
      { label: "p90", stroke: "#27a69a", width: 1.2, value: fmt(2) },
      { label: "p99", stroke: "#e08a1e", width: 1.2, value: fmt(2) },
      { label: "max", stroke: "#c5221f", width: 1, value: fmt(2) },
    ],
    [L.p50, L.p90, L.p99, L.max],
    { distr: 3, log: 10 },
    { label: "ms" }
  );

  // 2. Offered vs achieved vs fallback vs error rate, and the calls reaching each dependency route.
  var C = D.counts;
  var rateSeries = [
    { label: "offered/s", stroke: "#7a8291", width: 1.5, dash: [6, 3], value: fmt(0) },
    { label: "achieved/s", stroke: "#3b7dd8", width: 1.2, value: fmt(0) },
    { label: "fallback/s", stroke: "#e08a1e", width: 1.2, value: fmt(0) },
    { label: "errors/s", stroke: "#c5221f", width: 1.2, value: fmt(0) },
  ];
  var rateData = [perSecond(C.offered), perSecond(C.achieved), perSecond(C.fallback), perSecond(C.error)];
  if (C.dropped.some(function (v) { return v > 0; })) {
    rateSeries.push({ label: "dropped/s", stroke: "#6b3fa0", width: 1, value: fmt(0) });
    rateData.push(perSecond(C.dropped));
  }
  Object.keys(D.dependency_calls).forEach(function (route) {
    rateSeries.push({ label: route + " calls/s", stroke: "#2e9e5b", width: 1, value: fmt(0) });
    rateData.push(perSecond(D.dependency_calls[route]));
  });
  timeChart("chart-rates", 220, rateSeries, rateData, { range: function (u, min, max) { return [0, Math.max(1, max) * 1.05]; } }, { label: "per second" });

  // 2b. TLS handshakes at the dependency per second, one line per outcome (only when it spoke TLS).
  var H = D.handshakes || {};
  var outcomes = Object.keys(H);
  if (outcomes.length > 0 && document.getElementById("chart-handshakes")) {
    var HANDSHAKE_STROKE = { ok: "#2e9e5b", resumed: "#3b7dd8" };
    var handshakeSeries = outcomes.map(function (o) {
      return { label: o + "/s", stroke: HANDSHAKE_STROKE[o] || "#c5221f", width: 1.2, value: fmt(0) };
    });
    var handshakeData = outcomes.map(function (o) { return perSecond(H[o]); });
    timeChart("chart-handshakes", 180, handshakeSeries, handshakeData, { range: function (u, min, max) { return [0, Math.max(1, max) * 1.05]; } }, { label: "per second" });
  }

  // 2c. Calls per second at each instance of a route served by several (only when one is).
  var I = D.instance_calls || {};
  if (Object.keys(I).length > 0 && document.getElementById("chart-instances")) {
    var INSTANCE_STROKE = ["#3b7dd8", "#c5221f", "#2e9e5b", "#6b3fa0", "#b0631a", "#1a8a8a"];
    var instanceSeries = [], instanceData = [];
    Object.keys(I).forEach(function (route) {
      I[route].forEach(function (counts, k) {
        instanceSeries.push({ label: route + " #" + (k + 1) + " calls/s", stroke: INSTANCE_STROKE[k % INSTANCE_STROKE.length], width: 1.2, value: fmt(0) });
        instanceData.push(perSecond(counts));
      });
    });
    timeChart("chart-instances", 200, instanceSeries, instanceData, { range: function (u, min, max) { return [0, Math.max(1, max) * 1.05]; } }, { label: "per second" });
  }

  // 3. Calls in flight at the dependency, with the pool limit drawn.
  var limits = D.limits;
  var routes = Object.keys(D.in_flight);
  var inflightSeries = [], inflightData = [];
  var ROUTE_STROKE = ["#3b7dd8", "#2e9e5b", "#6b3fa0", "#b0631a"];
  // Over several faultd replicas each value is the sum of their peaks: the legend says it is an upper bound.
  var inflightLabel = D.in_flight_upper_bound ? " in flight (" + D.in_flight_upper_bound + ")" : " in flight";
  routes.forEach(function (route, k) {
    inflightSeries.push({ label: route + inflightLabel, stroke: ROUTE_STROKE[k % ROUTE_STROKE.length], width: 1.3, value: fmt(0) });
    inflightData.push(D.in_flight[route]);
  });
  inflightSeries.push({ label: "SUT requests in flight (loadgen)", stroke: "#9aa0ab", width: 1, show: false, value: fmt(0) });
  inflightData.push(D.sut_in_flight);
  var highestLimit = 0;
  Object.keys(limits).forEach(function (r) { highestLimit = Math.max(highestLimit, limits[r].bound); });
  var limitPlugin = {
    hooks: {
      draw: function (u) {
        var ctx = u.ctx;
        ctx.save();
        Object.keys(limits).forEach(function (route) {
          var l = limits[route];
          var y = Math.round(u.valToPos(l.bound, "y", true)) + 0.5;
          ctx.strokeStyle = "#c5221f";
          ctx.lineWidth = 1.5 * dpr;
          ctx.setLineDash([8 * dpr, 4 * dpr]);
          ctx.beginPath();
          ctx.moveTo(u.bbox.left, y);
          ctx.lineTo(u.bbox.left + u.bbox.width, y);
          ctx.stroke();
          ctx.setLineDash([]);
          ctx.font = 11 * dpr + "px system-ui, sans-serif";
          ctx.fillStyle = "#c5221f";
          ctx.textAlign = "right";
          ctx.textBaseline = "bottom";
          var text = "pool limit " + route + ": " + (l.inclusive ? "at most " : "below ") + l.bound;
          ctx.fillText(text, u.bbox.left + u.bbox.width - 4 * dpr, y - 2 * dpr);
        });
        ctx.restore();
      },
    },
  };
  timeChart(
    "chart-inflight",
    200,
    inflightSeries,
    inflightData,
    { range: function (u, min, max) { return [0, Math.max(1, max, highestLimit) * 1.1]; } },
    { label: "calls" },
    [limitPlugin]
  );

  // 4. The breaker state as one coloured band per breaker, on the same x axis.
  var rows = D.breakers;
  var bandPlugin = {
    hooks: {
      draw: function (u) {
        var ctx = u.ctx, top = u.bbox.top, rowH = u.bbox.height / Math.max(1, rows.length);
        ctx.save();
        rows.forEach(function (row, r) {
          var y0 = top + r * rowH + 3 * dpr, h = rowH - 6 * dpr;
          row.spans.forEach(function (s) {
            var x0 = u.valToPos(s[0], "x", true), x1 = u.valToPos(s[1], "x", true);
            ctx.fillStyle = STATE_FILL[s[2]];
            ctx.fillRect(x0, y0, Math.max(dpr, x1 - x0), h);
          });
          row.gaps.forEach(function (g) {
            var x0 = u.valToPos(g[0], "x", true), x1 = u.valToPos(g[1], "x", true);
            ctx.fillStyle = "rgba(120,120,120,0.55)";
            ctx.fillRect(x0, y0, Math.max(dpr, x1 - x0), h);
          });
          // The breaker's name goes in the axis area, right-aligned against the band. A label wider than the
          // area ("pricing (metrics scrape)") breaks before its source, and the font shrinks until each line fits.
          var room = u.bbox.left - 8 * dpr, size = 12;
          var font = function () { ctx.font = "600 " + size * dpr + "px system-ui, sans-serif"; };
          var tooWide = function (line) { return ctx.measureText(line).width > room; };
          font();
          var lines = [row.label], cut = row.label.indexOf(" (");
          if (tooWide(row.label) && cut > 0) lines = [row.label.slice(0, cut), row.label.slice(cut + 1)];
          while (size > 8 && lines.some(tooWide)) { size -= 1; font(); }
          ctx.textBaseline = "middle";
          ctx.textAlign = "right";
          ctx.fillStyle = "#1d2330";
          lines.forEach(function (line, i) {
            var dy = (i - (lines.length - 1) / 2) * (size + 1) * dpr;
            ctx.fillText(line, u.bbox.left - 6 * dpr, y0 + h / 2 + dy);
          });
        });
        ctx.restore();
      },
    },
  };
  if (rows.length === 0) {
    note("chart-breakers", "The scenario observes no breaker.");
  } else {
    var blank = new Array(n);
    timeChart(
      "chart-breakers",
      36 * rows.length + 40,
      [{ label: "state", show: false }],
      [blank],
      { range: [0, rows.length] },
      { label: "", values: function (u, splits) { return splits.map(function () { return ""; }); }, grid: { show: false }, ticks: { show: false } },
      [bandPlugin],
      false
    );
  }

  // 4b. The SUT's own metrics the expectations read, one chart each: every scrape's value in its bucket.
  var metricsHolder = document.getElementById("sut-metrics");
  (D.sut_metrics || []).forEach(function (m, k) {
    if (!metricsHolder) return;
    var id = "chart-metric-" + k;
    var title = document.createElement("h4");
    title.textContent = m.label;
    var el = document.createElement("div");
    el.id = id;
    el.className = "chart";
    metricsHolder.appendChild(title);
    metricsHolder.appendChild(el);
    if (!m.found) {
      note(id, "Never found on the SUT's page: see its expectation's verdict for what the page held.");
      return;
    }
    var ys = m.values;
    timeChart(
      id,
      160,
      [{ label: m.label, stroke: ROUTE_STROKE[k % ROUTE_STROKE.length], width: 1.3, spanGaps: true, value: fmt(2) }],
      [ys],
      { range: function (u, min, max) { return [Math.min(0, min), Math.max(1, max) * 1.1]; } },
      { label: "value" }
    );
  });

  // 5. Percentile distribution per phase: latency against percentile, x = 1/(1-p) on a log axis.
  var LINE_STROKE = ["#3b7dd8", "#9aa0ab", "#2e9e5b", "#6b3fa0", "#b0631a"];
  function percentileLabel(x) {
    if (x <= 1) return "0%";
    var p = 100 * (1 - 1 / x);
    var digits = Math.max(0, Math.round(Math.log10(x)) - 2);
    return p.toFixed(digits) + "%";
  }
  var holder = document.getElementById("distributions");
  D.distributions.forEach(function (d, k) {
    var id = "dist-" + k;
    var box = document.createElement("div");
    var h = document.createElement("h3");
    h.textContent = "phase " + d.phase;
    var el = document.createElement("div");
    el.id = id;
    el.className = "chart";
    box.appendChild(h);
    box.appendChild(el);
    holder.appendChild(box);
    var lines = d.lines.filter(function (l) { return l.points.x.length > 0; });
    if (lines.length === 0) {
      note(id, "No request was answered in this phase.");
      return;
    }
    try {
      // A log latency axis: the SUT's fallback answers in a fraction of a millisecond and the dependency's
      // brownout in seconds must both stay readable on one plot. A log axis has no zero.
      var joined = uPlot.join(lines.map(function (l) { return [l.points.x, l.points.y.map(function (v) { return v > 0 ? v : null; })]; }));
      var maxX = 1;
      lines.forEach(function (l) { maxX = Math.max(maxX, l.points.x[l.points.x.length - 1]); });
      var top = Math.pow(10, Math.max(1, Math.ceil(Math.log10(maxX))));
      new uPlot(
        {
          width: Math.min(640, WIDTH),
          height: 230,
          // Room on the right for the last percentile label, which is centred on the plot's edge.
          padding: [10, 28, 0, 0],
          scales: { x: { time: false, distr: 3, log: 10, range: [1, top] }, y: { distr: 3, log: 10 } },
          axes: [
            {
              label: "percentile",
              labelSize: 20,
              size: 34,
              splits: function () { var s = []; for (var v = 1; v <= top; v *= 10) s.push(v); return s; },
              values: function (u, splits) { return splits.map(percentileLabel); },
            },
            { label: "ms (log scale)", size: 60, labelSize: 18 },
          ],
          series: [{ label: "percentile", value: function (u, v) { return v == null ? "-" : percentileLabel(v); } }].concat(
            lines.map(function (l, j) {
              return { label: l.label, stroke: LINE_STROKE[j % LINE_STROKE.length], width: 1.5, spanGaps: true, value: fmt(3), points: { show: false } };
            })
          ),
        },
        joined,
        el
      );
    } catch (e) {
      fail(id, e);
    }
  });
})();
