"""``paddlecloud sim --html FILE``: the simulator's figures as one self-contained web page.

    Report (sim.runner) ──report_data()──▶ plain JSON-able dict (means table, per-policy series,
                                           per-policy JCT distribution)
                        ──render_report()──▶ one HTML file: the data as a JSON script block, uPlot
                                             (the console's vendored copy, inlined) and a small
                                             script that draws three charts from the data

The page needs nothing else: no server, no other file, no request to any host (uPlot and its CSS
are inlined), so it can be mailed or attached to an issue. Charts: utilisation over time (allocated
share of the cluster per policy), jobs waiting over time, and the distribution of job completion
times (an empirical CDF on a log axis) per policy; above them the table of means that ``sim``
prints. Every string from the input (workload file names) is escaped; the data block is JSON with
``<``, ``>`` and ``&`` escaped so no value can close the script element.
"""

from __future__ import annotations

import html
import json
from importlib import resources
from string import Template
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from paddlecloud.sim.runner import Report

__all__ = ["TABLE", "render_report", "report_data"]

#: the means shown in the table: (heading, summary key, format)
TABLE = [
    ("avg JCT s", "avg_jct_s", ".0f"), ("median JCT s", "median_jct_s", ".0f"),
    ("p99 JCT s", "p99_jct_s", ".0f"),
    ("avg queue s", "avg_queue_s", ".0f"), ("makespan s", "makespan_s", ".0f"), ("util", "gpu_util", ".2f"),
    ("useful", "useful_gpu_util", ".2f"), ("resizes", "resizes", ".0f"),
    ("preemptions", "preemptions", ".0f"),
]  # fmt: skip
_BINS = 400  # points per time series
_CDF_POINTS = 200  # points per JCT distribution
_UPLOT_JS = "uPlot-1.6.31.iife.min.js"
_UPLOT_CSS = "uPlot-1.6.31.min.css"


def _cdf(values: list[float]) -> list[list[float]]:
    """[[jct, fraction of jobs done by then], ...] with at most ``_CDF_POINTS`` points."""
    xs = sorted(values)
    if not xs:
        return []
    step = max(1, len(xs) // _CDF_POINTS)
    points = [[xs[i], (i + 1) / len(xs)] for i in range(step - 1, len(xs), step)]
    if points[-1][0] != xs[-1]:
        points.append([xs[-1], 1.0])
    return points


def report_data(report: Report) -> dict[str, Any]:
    """What the page draws, as plain data (tested without a browser)."""
    cap = report.capacity or 1
    series = {
        pol: {
            "hours": [round(t / 3600.0, 4) for t in s.t],
            "allocated_pct": [round(100.0 * a / cap, 2) for a in s.allocated],
            "useful_pct": [round(100.0 * u / cap, 2) for u in s.useful],
            "queued": s.queued,
        }
        for pol, s in report.policy_series(_BINS).items()
    }
    jcts = {pol: _cdf([j for per in wls.values() for j in per]) for pol, wls in report.jcts.items()}
    c = report.cluster
    shape = (
        f"{c.nodes} nodes x {c.node.gpu} GPUs"
        if c.node.gpu
        else f"{c.nodes} nodes x {c.node.cpu_m // 1000} cores"
    )
    return {
        "title": f"{report.spec.format}: {', '.join(report.workloads)} on {shape}",
        "unit": "GPU" if report.util_unit == "gpu" else "CPU",
        "table": {
            "columns": [head for head, _, _ in TABLE],
            "rows": [
                [pol, *(format(per["mean"][key], spec) for _, key, spec in TABLE)]
                for pol, per in report.summaries.items()
            ],
        },
        "series": series,
        "jct_cdf": jcts,
    }


_PAGE = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>PaddleCloud simulation: $title</title>
<style>$uplot_css
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1f2328;max-width:1200px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse}th,td{padding:4px 10px;border-bottom:1px solid #d0d7de;text-align:right}
th:first-child,td:first-child{text-align:left}.note{color:#59636e}</style></head>
<body>
<h1>Simulation: $title</h1>
<p class="note">Written by <code>paddlecloud sim --html</code>: means over the workloads, per policy.</p>
<table id="means"></table>
<h2>$unit utilisation (% of the cluster, allocated)</h2><div id="util"></div>
<h2>Jobs waiting</h2><div id="queue"></div>
<h2>Job completion time distribution (share of jobs finished by then, log time axis)</h2><div id="jct"></div>
<script type="application/json" id="data">$data</script>
<script>$uplot_js</script>
<script>
const D = JSON.parse(document.getElementById("data").textContent);
const COLORS = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bc4c00", "#116329", "#953800"];
const table = document.getElementById("means");
const head = table.insertRow();
for (const h of ["policy", ...D.table.columns]) {
  const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
}
for (const row of D.table.rows) {
  const tr = table.insertRow(); for (const v of row) tr.insertCell().textContent = v;
}
const policies = Object.keys(D.series);
const width = Math.min(1150, window.innerWidth - 60);
function lines(el, xLabel, yLabel, xs, ys, scales) {
  const series = [{label: xLabel}, ...policies.map((p, i) => ({
    label: p, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true}))];
  const opts = {width, height: 260, series, axes: [{label: xLabel}, {label: yLabel}],
                scales: Object.assign({x: {time: false}}, scales || {})};
  new uPlot(opts, [xs, ...ys], document.getElementById(el));
}
const t0 = policies.length ? D.series[policies[0]].hours : [];
lines("util", "hours", "% allocated", t0, policies.map(p => D.series[p].allocated_pct),
      {y: {range: [0, 100]}});
lines("queue", "hours", "jobs waiting", t0, policies.map(p => D.series[p].queued));
// JCT: each policy has its own x values; uPlot wants one x axis, so merge them (nulls elsewhere)
const xsSet = new Set();
for (const p of policies) for (const [x] of D.jct_cdf[p] || []) xsSet.add(x);
const xs = [...xsSet].sort((a, b) => a - b);
const ys = policies.map(p => {
  const m = new Map(D.jct_cdf[p] || []); return xs.map(x => m.has(x) ? m.get(x) : null);
});
lines("jct", "JCT (s)", "share of jobs", xs, ys, {x: {time: false, distr: 3}, y: {range: [0, 1]}});
</script>
</body></html>
""")


def _json_for_script(data: dict[str, Any]) -> str:
    """JSON that cannot end the ``<script>`` element it sits in, whatever the strings hold."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def render_report(report: Report) -> str:
    """The self-contained page for ``report``."""
    vendor = resources.files("paddlecloud.console") / "static" / "vendor"
    data = report_data(report)
    return _PAGE.substitute(
        title=html.escape(data["title"]),
        unit=html.escape(data["unit"]),
        data=_json_for_script(data),
        uplot_js=(vendor / _UPLOT_JS).read_text(encoding="utf-8"),
        uplot_css=(vendor / _UPLOT_CSS).read_text(encoding="utf-8"),
    )
