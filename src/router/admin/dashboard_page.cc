#include "router/admin/dashboard_page.h"

namespace infera::router {
namespace {

// Plain HTML, CSS and JS written here: no framework, no CDN, no build step. Every
// string from the router (target names, request ids) is set with textContent, never
// parsed as HTML.
constexpr std::string_view kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>infera-router fleet</title>
<link rel="icon" href="data:,">
<style>
:root { --bg:#0f1419; --panel:#182029; --line:#2a3542; --fg:#dde3ea; --dim:#8a97a6;
        --good:#4cc38a; --warn:#e5b454; --bad:#ef6a6a; --a:#5aa9ff; --b:#c58af9; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       background:var(--bg); color:var(--fg); }
header { display:flex; flex-wrap:wrap; gap:.5em 1.5em; align-items:baseline; padding:.8em 1em;
         border-bottom:1px solid var(--line); }
header h1 { font-size:1.15em; margin:0; }
#status { color:var(--dim); font-size:.9em; }
#status.bad { color:var(--bad); }
main { padding:1em; display:grid; gap:1em; }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(140px, 1fr)); gap:.6em; }
.card { background:var(--panel); border:1px solid var(--line); border-radius:6px; padding:.5em .7em; }
.card .k { color:var(--dim); font-size:.8em; }
.card .v { font-size:1.3em; font-variant-numeric:tabular-nums; }
.charts { display:grid; grid-template-columns:repeat(auto-fit, minmax(300px, 1fr)); gap:1em; }
.chart { background:var(--panel); border:1px solid var(--line); border-radius:6px; padding:.5em; }
.chart h2, section h2 { font-size:.95em; margin:.1em 0 .4em; font-weight:600; }
.chart svg { width:100%; height:auto; display:block; }
.legend { font-size:.8em; color:var(--dim); }
.legend span { margin-right:1em; }
.legend i { display:inline-block; width:.8em; height:.25em; vertical-align:middle; margin-right:.3em; }
section { background:var(--panel); border:1px solid var(--line); border-radius:6px; padding:.5em;
          overflow-x:auto; }
section.scroll { max-height:26em; overflow-y:auto; }
#picks td:nth-child(4), #picks td:nth-child(5) { text-align:left; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
th, td { text-align:right; padding:.25em .5em; border-bottom:1px solid var(--line); white-space:nowrap; }
th { color:var(--dim); font-weight:500; font-size:.85em; }
th:first-child, td:first-child { text-align:left; }
.good { color:var(--good); } .warn { color:var(--warn); } .bad { color:var(--bad); }
.dim { color:var(--dim); }
@media (max-width: 700px) {
  main { padding:.5em; }
  table.stack thead { display:none; }
  table.stack tr { display:block; border-bottom:2px solid var(--line); padding:.3em 0; }
  table.stack td { display:flex; justify-content:space-between; border:0; padding:.1em .3em;
                   white-space:normal; }
  table.stack td::before { content:attr(data-label); color:var(--dim); margin-right:1em; }
}
</style>
</head>
<body>
<header>
  <h1>infera-router fleet</h1>
  <span id="status">connecting&hellip;</span>
</header>
<main>
  <div class="cards" id="totals"></div>
  <div class="charts">
    <div class="chart"><h2>Cache hit rate (blocks), last 5 min</h2><svg id="c-hit"></svg>
      <div class="legend" id="l-hit"></div></div>
    <div class="chart"><h2>Time to first byte (ms), last 5 min</h2><svg id="c-ttft"></svg>
      <div class="legend" id="l-ttft"></div></div>
    <div class="chart"><h2>Load, last 5 min</h2><svg id="c-load"></svg>
      <div class="legend" id="l-load"></div></div>
  </div>
  <section><h2>Targets</h2><table class="stack" id="targets"><thead></thead><tbody></tbody></table></section>
  <section class="scroll"><h2>Last picks (newest first)</h2><table class="stack" id="picks"><thead></thead><tbody></tbody></table></section>
</main>
<script>
"use strict";
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? { Authorization: "Bearer " + token } : {};

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}
function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}
function num(v, digits) {
  if (v === null || v === undefined) return "\u2013";
  if (typeof v !== "number") return String(v);
  if (digits === undefined) digits = Number.isInteger(v) ? 0 : 2;
  return v.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}
function pct(v) { return v === null || v === undefined ? "\u2013" : (100 * v).toFixed(1) + "%"; }

function cards(f) {
  const t = f.totals, e = f.events;
  const items = [
    ["targets", t.targets], ["routable workers", t.routable_workers + " / " + t.workers],
    ["hit rate (1 min)", pct(t.hit_rate_1m)], ["picks / s", num(t.picks_per_s, 1)],
    ["in flight", t.router_inflight_requests], ["cached blocks", num(t.cached_blocks)],
    ["active blocks", num(t.active_blocks)], ["pending prefill", num(t.pending_prefill_blocks, 1)],
    ["KV events", num(e.messages)], ["events idle", num(e.idle_s, 1) + " s"],
    ["gaps / replays", e.gaps + " / " + e.replays], ["resyncs", e.resyncs]];
  const box = document.getElementById("totals");
  box.replaceChildren(...items.map(([k, v]) =>
    el("div", { class: "card", "data-total": k }, el("div", { class: "k" }, k),
       el("div", { class: "v" }, v))));
}

function chart(id, series, opts) {
  const W = 600, H = 170, L = 44, R = 8, T = 8, B = 20;
  const box = document.getElementById(id);
  box.setAttribute("viewBox", `0 0 ${W} ${H}`);
  box.replaceChildren();
  const n = Math.max(...series.map(s => s.values.length), 2);
  let max = opts.max;
  if (max === undefined) {
    max = 0;
    for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
    max = max > 0 ? max * 1.1 : 1;
  }
  const x = i => L + (W - L - R) * i / (n - 1);
  const y = v => T + (H - T - B) * (1 - v / max);
  for (let k = 0; k <= 4; ++k) {
    const v = max * k / 4;
    box.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#2a3542" }));
    const label = svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end", fill: "#8a97a6",
                                "font-size": 11 });
    label.textContent = opts.fmt(v);
    box.append(label);
  }
  for (const [frac, text] of [[0, "-5 min"], [0.5, "-2.5 min"], [1, "now"]]) {
    const label = svg("text", { x: L + (W - L - R) * frac, y: H - 4, fill: "#8a97a6",
                                "font-size": 11, "text-anchor": frac === 0 ? "start" : frac === 1 ? "end" : "middle" });
    label.textContent = text;
    box.append(label);
  }
  for (const s of series) {
    // Gaps (null: nothing measured that second) break the line.
    let d = "", pen = false;
    s.values.forEach((v, i) => {
      if (v === null) { pen = false; return; }
      d += (pen ? "L" : "M") + x(i).toFixed(1) + " " + y(Math.min(v, max)).toFixed(1) + " ";
      pen = true;
    });
    if (d) box.append(svg("path", { d, fill: "none", stroke: s.color, "stroke-width": 1.6 }));
  }
  const legend = document.getElementById("l" + id.slice(1));
  legend.replaceChildren(...series.map(s => {
    const last = [...s.values].reverse().find(v => v !== null);
    const i = el("i"); i.style.background = s.color;
    return el("span", {}, i, s.label + ": " + (last === undefined ? "\u2013" : opts.fmt(last)));
  }));
}

const targetCols = [
  ["target", t => t.target], ["role", t => t.role], ["model", t => t.model || "\u2013"],
  ["cached blocks", t => num(t.cached_blocks)],
  ["device / host / disk", t => [t.cached_blocks_by_tier.device, t.cached_blocks_by_tier.host,
                                 t.cached_blocks_by_tier.disk].map(v => num(v)).join(" / ")], ["hit rate 1m", t => pct(t.hit_rate_1m)],
  ["picks/s", t => num(t.picks_per_s, 1)], ["picks 1m", t => num(t.picks_1m)],
  ["active blocks", t => num(t.active_blocks)],
  ["pending prefill", t => num(t.pending_prefill_blocks, 1)],
  ["in flight", t => num(t.inflight_requests)],
  ["breaker", t => t.breaker, t => t.breaker === "closed" ? "good" : "bad"],
  ["health", t => t.health, t => t.health === "healthy" ? "good" : "bad"],
  ["render parity", t => t.render_parity, t => t.render_parity === "diverged" ? "bad" : ""],
  ["drifting", t => t.prediction_drifting ? "yes" : "no", t => t.prediction_drifting ? "warn" : "dim"],
  ["decode demand", t => t.decode_demand_tokens === null ? "\u2013"
      : num(t.decode_demand_tokens) + " tok / " + num(t.decode_demand_requests)]];

function table(id, cols, rows, key) {
  const tbl = document.getElementById(id);
  tbl.tHead.replaceChildren(el("tr", {}, ...cols.map(c => el("th", {}, c[0]))));
  tbl.tBodies[0].replaceChildren(...rows.map(r => {
    const tr = el("tr", key ? { "data-key": key(r) } : {});
    for (const c of cols) {
      const td = el("td", { "data-label": c[0] }, c[1](r));
      if (c[2]) { const cls = c[2](r); if (cls) td.className = cls; }
      tr.append(td);
    }
    return tr;
  }));
}

function legText(l) {
  let s = `${l.role} \u2192 ${l.target}  hits ${l.cache_hits}/${l.request_blocks}  cost ${num(l.cost)}`;
  s += l.runner_up_cost === null ? "" : `  (runner-up ${num(l.runner_up_cost)})`;
  return s;
}
const pickCols = [
  ["age", p => ((lastNow - p.at_ms) / 1000).toFixed(1) + " s"],
  ["request", p => p.request_id], ["policy", p => p.policy],
  ["legs (target, hits/blocks, cost, runner-up)", p => p.legs.map(legText).join("  |  ")],
  ["terms", p => p.legs.map(l => `w=${num(l.w_overlap)} credited=${num(l.credited)} load=${num(l.load)}`).join(" | ")]];

let lastNow = 0;
function render(f) {
  lastNow = f.now_ms;
  cards(f);
  const h = f.history;
  chart("c-hit", [{ label: "hit rate", color: "#4cc38a", values: h.hit_rate }],
        { max: 1, fmt: v => (100 * v).toFixed(0) + "%" });
  chart("c-ttft", [{ label: "mean", color: "#5aa9ff", values: h.ttft_ms },
                   { label: "max", color: "#c58af9", values: h.ttft_max_ms }],
        { fmt: v => v.toFixed(v < 10 ? 1 : 0) });
  chart("c-load", [{ label: "in flight (max)", color: "#e5b454", values: h.inflight },
                   { label: "picks/s", color: "#5aa9ff", values: h.picks }],
        { fmt: v => v.toFixed(v < 10 ? 1 : 0) });
  table("targets", targetCols, f.targets, t => t.target);
  table("picks", pickCols, [...f.last_picks].reverse(), p => p.request_id);
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const r = await fetch("/v1/admin/fleet", { headers, cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status + (r.status === 401 ? " (add #token=... to the URL)" : ""));
    const f = await r.json();
    render(f);
    status.className = "";
    status.textContent = `updated ${new Date().toLocaleTimeString()} \u00b7 ${f.totals.targets} targets`;
  } catch (e) {
    status.className = "bad";
    status.textContent = "fleet view unavailable: " + e.message;
  }
  setTimeout(poll, 1000);
}
poll();
</script>
</body>
</html>
)html";

constexpr std::string_view kTokenPage = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>infera-router: admin token</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,"></head>
<body style="font-family: sans-serif; margin: 2em">
<p id="m">This router's dashboard needs its admin token: open <code>/dashboard#token=TOKEN</code>
(the fragment stays in the browser; it is sent as <code>Authorization: Bearer</code>).</p>
<script>
const t = new URLSearchParams(location.hash.slice(1)).get("token");
if (t) {
  fetch(location.pathname, { headers: { Authorization: "Bearer " + t } })
    .then(r => { if (!r.ok) throw new Error("HTTP " + r.status); return r.text(); })
    .then(html => { document.open(); document.write(html); document.close(); })
    .catch(e => { document.getElementById("m").textContent = "admin token refused (" + e.message + ")"; });
}
</script>
</body></html>
)html";

}  // namespace

std::string_view DashboardHtml() { return kPage; }

std::string_view DashboardTokenPage() { return kTokenPage; }

}  // namespace infera::router
