/* PaddleCloud web console: the little the pages need beyond htmx. No eval, no inline handlers, and
   text from the server is only ever set with textContent (never innerHTML).

   - every htmx request carries the page's CSRF token (X-CSRF-Token, from <meta name="csrf-token">)
   - ages (<time data-age>) count up between refreshes
   - filter forms submit when a choice changes; forms marked reset-after clear after success
   - the log panel of a job page: a worker's log tail, fetched again every 2 s while it may grow
   - charts ([data-chart] with a JSON URL): uPlot, refreshed every 30 s
*/
(function () {
  "use strict";

  var meta = document.querySelector('meta[name="csrf-token"]');
  document.addEventListener("htmx:configRequest", function (e) {
    if (meta) e.detail.headers["X-CSRF-Token"] = meta.content;
  });

  // -- ages -------------------------------------------------------------------------------------
  function ageText(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) {
      var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
      return m ? h + "h" + m + "m" : h + "h";
    }
    return Math.floor(s / 86400) + "d";
  }
  function tickAges() {
    var now = Date.now();
    document.querySelectorAll("time[data-age]").forEach(function (t) {
      var at = Date.parse(t.getAttribute("datetime"));
      if (!isNaN(at)) t.textContent = ageText(now - at);
    });
  }
  setInterval(tickAges, 5000);

  // -- forms ------------------------------------------------------------------------------------
  document.addEventListener("change", function (e) {
    var el = e.target;
    if (el.matches && el.matches("form.autosubmit select")) el.form.submit();
  });
  document.addEventListener("submit", function (e) {
    var form = e.target, max = form.getAttribute("data-max");
    var file = form.querySelector('input[type="file"]');
    if (max && file && file.files.length && file.files[0].size > Number(max)) {
      e.preventDefault();
      e.stopImmediatePropagation();
      flash("That file is over the console's upload limit; use `paddlecloud pfs cp` for it.", true);
    }
  }, true);
  document.addEventListener("htmx:afterRequest", function (e) {
    var el = e.detail.elt;
    if (e.detail.successful && el && el.tagName === "FORM") el.reset();
  });
  function flash(text, error) {
    var box = document.getElementById("flash");
    if (!box) return;
    var div = document.createElement("div");
    div.className = "flash-msg" + (error ? " error" : "");
    div.textContent = text;
    box.replaceChildren(div);
  }

  // -- logs -------------------------------------------------------------------------------------
  var panel = document.getElementById("logs");
  if (panel) {
    var pre = document.getElementById("log-text"), title = document.getElementById("log-title");
    var badge = document.getElementById("log-state"), tail = document.getElementById("log-tail");
    var raw = document.getElementById("log-raw");
    // auto: the panel follows the job's first trainer until the user picks a log
    // version: the X-Log-Version of the text shown; sent back as since, a 204 means "no change"
    var state = { worker: null, previous: false, timer: null, seq: 0, live: false, auto: true, version: "" };

    var logUrl = function () {
      var u = new URL(panel.getAttribute("data-src"), location.origin);
      u.searchParams.set("worker", state.worker);
      u.searchParams.set("tail", tail.value);
      if (state.previous) u.searchParams.set("previous", "true");
      var user = panel.getAttribute("data-user");
      if (user) u.searchParams.set("user", user);
      return u.pathname + u.search;
    };
    var show = function (live) {
      state.live = live;
      badge.textContent = live ? "live" : "ended";
      badge.className = "pill " + (live ? "live" : "ended");
    };
    var load = function () {
      clearTimeout(state.timer);
      var seq = ++state.seq;
      var url = logUrl() + (state.version ? "&since=" + encodeURIComponent(state.version) : "");
      fetch(url, { credentials: "same-origin", headers: { Accept: "text/plain" } })
        .then(function (r) {
          if (r.status === 401) {
            location.href = "/ui/login?next=" + encodeURIComponent(location.pathname + location.search);
            return null;
          }
          var live = r.headers.get("X-Log-Live") === "1";
          if (r.status === 204) return { ok: true, live: live, same: true };
          state.version = r.ok ? (r.headers.get("X-Log-Version") || "") : "";
          return r.text().then(function (t) { return { ok: r.ok, live: live, text: t }; });
        })
        .then(function (res) {
          if (!res || seq !== state.seq) return;
          if (res.same) {
            show(res.live);
            if (res.live) state.timer = setTimeout(load, 2000);
            return;
          }
          var text = res.ok ? (res.text || "(no output yet)") : res.text;
          var atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 40;
          if (pre.textContent !== text) {
            pre.textContent = text;
            if (atBottom) pre.scrollTop = pre.scrollHeight;
          }
          show(res.ok && res.live);
          if (res.ok && res.live) state.timer = setTimeout(load, 2000);
        })
        .catch(function () {
          if (seq === state.seq) state.timer = setTimeout(load, 5000);
        });
    };
    var mark = function () {
      document.querySelectorAll("a.log-link").forEach(function (a) {
        var on = a.getAttribute("data-worker") === state.worker &&
          (a.getAttribute("data-previous") === "1") === state.previous;
        a.classList.toggle("selected", on);
      });
    };
    var select = function (worker, previous) {
      state.worker = worker;
      state.previous = previous;
      state.version = "";
      title.textContent = worker + (previous ? " · previous run" : "");
      raw.setAttribute("href", logUrl());
      pre.textContent = "loading…";
      mark();
      load();
    };
    document.addEventListener("click", function (e) {
      var a = e.target.closest ? e.target.closest("a.log-link") : null;
      if (!a) return;
      e.preventDefault();
      state.auto = false;
      select(a.getAttribute("data-worker"), a.getAttribute("data-previous") === "1");
    });
    tail.addEventListener("change", function () {
      if (state.worker) { state.version = ""; raw.setAttribute("href", logUrl()); load(); }
    });
    // the job's live part was refreshed: keep the selection, and follow a worker that came back
    var firstLog = function () {
      return document.querySelector('a.log-link[data-worker="trainer-0"][data-previous="0"]') ||
        document.querySelector('a.log-link[data-previous="0"]');
    };
    document.addEventListener("htmx:afterSwap", function () {
      mark();
      var first = firstLog();
      if (state.auto && first && first.getAttribute("data-worker") !== state.worker) {
        select(first.getAttribute("data-worker"), false);
        return;
      }
      if (!state.worker || state.live || state.previous) return;
      var link = document.querySelector('a.log-link[data-previous="0"][data-worker="' + CSS.escape(state.worker) + '"]');
      if (link && link.getAttribute("data-live") === "1") load();
    });
    var first = firstLog();
    if (first) select(first.getAttribute("data-worker"), false);
  }

  // -- charts -----------------------------------------------------------------------------------
  // a [data-chart] element holds the URL of {x: [unix s], series: [{label, values}], unit, max, step}
  var palette = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2"];
  var fills = ["rgba(37, 99, 235, 0.10)", "rgba(22, 163, 74, 0.08)", "rgba(217, 119, 6, 0.08)"];
  function drawChart(box) {
    var src = box.getAttribute("data-chart");
    if (!src || typeof uPlot === "undefined") return;
    fetch(src, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data || !data.x || data.x.length < 2) return;
        var unit = data.unit || "";
        var series = [{}], columns = [data.x];
        data.series.forEach(function (s, i) {
          series.push({
            label: s.label, stroke: palette[i % palette.length], width: 2, fill: fills[i],
            paths: data.step ? uPlot.paths.stepped({ align: 1 }) : undefined,
            value: function (u, v) { return v == null ? "–" : v + unit; }
          });
          columns.push(s.values);
        });
        var opts = {
          width: Math.max(280, box.clientWidth), height: 230, series: series,
          scales: { y: { range: function (u, lo, hi) { return [0, data.max || Math.max(1, Math.ceil(hi * 1.15))]; } } },
          axes: [{}, { size: 50, incrs: unit ? undefined : [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
                       values: function (u, ticks) { return ticks.map(function (t) { return t + unit; }); } }],
          legend: { show: true }
        };
        if (box._plot) box._plot.destroy();
        box.replaceChildren();
        box._plot = new uPlot(opts, columns, box);
      })
      .catch(function () { /* keep the last chart */ });
  }
  function drawCharts() { document.querySelectorAll("[data-chart]").forEach(drawChart); }
  window.addEventListener("load", function () {
    drawCharts();
    setInterval(drawCharts, 30000);
  });
  // a job's state changed (its live part was swapped in): its trainer chart may have too
  document.addEventListener("htmx:afterSwap", function (e) {
    if (e.detail.target && e.detail.target.id === "job-live") drawCharts();
  });
  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      document.querySelectorAll("[data-chart]").forEach(function (box) {
        if (box._plot) box._plot.setSize({ width: Math.max(280, box.clientWidth), height: 230 });
      });
    }, 200);
  });
})();
