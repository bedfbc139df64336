"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg";
const COLORS = {compute: "#3b6fd8", memory: "#e08a1e", communication: "#8e44ad", bubble: "#b0b4bd",
  overhead: "#d64545", unknown: "#7f8c8d", fwd: "#3b6fd8", bwd: "#e08a1e", recompute: "#7aa6f0",
  tp: "#8e44ad", dp: "#16a085", p2p: "#c0392b", ep: "#d35400", optimizer: "#2c3e50",
  tp_comm: "#8e44ad", dp_comm: "#16a085", ep_comm: "#d35400", pp_bubble: "#b0b4bd"};
const PALETTE = ["#3b6fd8", "#e08a1e", "#16a085", "#8e44ad", "#d64545", "#7f8c8d", "#2c3e50", "#c9a227"];
const color = (k, i) => COLORS[k] || PALETTE[i % PALETTE.length];

function el(tag, attrs, parent, text) {
  const e = tag === "svg" || ["rect", "line", "text", "circle", "path", "g", "title", "polyline"].includes(tag)
    ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function si(v, unit) {
  const a = Math.abs(v);
  for (const [s, p] of [[1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]])
    if (a >= s) return (v / s).toFixed(2) + " " + p + unit;
  return (+v.toPrecision(3)) + " " + unit;
}
function secs(v) {
  const a = Math.abs(v);
  return a >= 1 ? v.toFixed(3) + " s" : a >= 1e-3 ? (v * 1e3).toFixed(3) + " ms" : (v * 1e6).toFixed(1) + " µs";
}
const missing = v => v === null || v === undefined || (typeof v === "number" && !isFinite(v));
// a list as [a, b, c], a mapping as k=v (a nested one in braces), as the TUI (tables._param)
function param(v, nested) {
  if (missing(v)) return "-";
  if (Array.isArray(v)) return "[" + v.map(x => param(x, true)).join(", ") + "]";
  if (typeof v === "object") {
    const inner = Object.entries(v).map(([k, x]) => k + "=" + param(x, true)).join(" ");
    return nested ? "{" + inner + "}" : inner;
  }
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(+v.toPrecision(4));
  return String(v);
}
// time units a cell shows as a time, and their length in seconds (tables.TIME_UNITS)
const TIME = {s: 1, ms: 1e-3, us: 1e-6, ns: 1e-9};
function fmt(v, c) {
  if (missing(v)) return "-";
  if (typeof v === "object") return param(v, false);
  if (typeof v === "string") return v;
  if (typeof v !== "number") return String(v);  // a flag of a summary table (true, false)
  const u = c ? c.unit : "";
  if (Object.hasOwn(TIME, u || "")) return secs(v * TIME[u]);
  if (u === "cycles") return Math.round(v).toLocaleString("en");
  if (u === "%") return (100 * v).toFixed(1) + "%";
  if (u === "x") return v.toFixed(2) + "x";
  if (["FLOP", "B", "FLOP/s", "B/s"].includes(u)) return si(v, u);
  if (c && c.role === "count") return Number.isInteger(v) ? v.toLocaleString("en") : v.toFixed(2);
  // never round away whole digits: 157415 cycles stay 157,415, not 157400
  return Math.abs(v) >= 1e4 ? v.toLocaleString("en", {maximumFractionDigits: 0}) : String(+v.toPrecision(4));
}
// units the cells do not print themselves go into the column's header
const SAID = ["s", "ms", "us", "ns", "%", "x", "FLOP", "B", "FLOP/s", "B/s"];
const headed = c => c.unit && !SAID.includes(c.unit) ? `${c.label} (${c.unit})` : c.label;
function mark(v, c) {
  if (!c || typeof v !== "number" || !isFinite(v)) return "";
  if (c.role === "util") return v > 0.5 ? "good" : v < 0.25 ? "bad" : "";
  if (c.role === "error") return Math.abs(v) >= 0.5 ? "bad" : Math.abs(v) >= 0.2 ? "warn" : "";
  return "";
}
const tip = document.getElementById("tip");
document.addEventListener("mousemove", e => {
  const t = e.target.closest && e.target.closest("[data-tip]");
  if (!t) { tip.style.display = "none"; return; }
  tip.textContent = t.getAttribute("data-tip");
  tip.style.display = "block";
  tip.style.left = Math.min(e.clientX + 14, innerWidth - 430) + "px";
  tip.style.top = (e.clientY + 14) + "px";
});

function header() {
  document.getElementById("src").textContent = D.source.kind + ": " + D.source.path;
  const cards = document.getElementById("cards");
  for (const [k, v, h] of D.summary) {
    const c = el("div", {class: "card " + (h || "")}, cards);
    el("div", {class: "k"}, c, k);
    el("div", {class: "v"}, c, v);
  }
  const notes = document.getElementById("notes");
  for (const n of D.notes) el("div", {class: "note"}, notes, "note: " + n);
}

function groupsTable() {
  const t = document.getElementById("groups");
  const cols = [["group", D.group_label, null], ["time_s", "time", {unit: "s"}], ["share", "share", {unit: "%"}],
    ["slowest_op", "slowest op", null], ["slowest_time_s", "its time", {unit: "s"}],
    ["util", D.group_util_label || "util", {unit: "%", role: "util"}], ["comm_share", "comm share", {unit: "%"}], ["rows", "rows", {role: "count"}]];
  const hr = el("tr", {}, el("thead", {}, t));
  cols.forEach(([k, l], i) => el("th", {class: i === 0 || k === "slowest_op" ? "t" : ""}, hr, l));
  const tb = el("tbody", {}, t);
  for (const g of D.groups) {
    const tr = el("tr", {}, tb);
    cols.forEach(([k, , c], i) => el("td", {class: (i === 0 || k === "slowest_op" ? "t " : "") + mark(g[k], c)}, tr, fmt(g[k], c)));
  }
}

function opsTable() {
  const t = document.getElementById("ops"), cols = D.columns;
  const isText = c => ["id", "group", "text", "shape"].includes(c.role);
  const hr = el("tr", {}, el("thead", {}, t));
  const tb = el("tbody", {}, t);
  let rows = D.rows.slice(), sortKey = "time_s", asc = false;
  const ths = cols.map(c => {
    const th = el("th", {class: isText(c) ? "t" : "", "data-key": c.key, title: c.help || ""}, hr, headed(c));
    th.addEventListener("click", () => { asc = sortKey === c.key ? !asc : isText(c); sortKey = c.key; draw(); });
    return th;
  });
  const filter = document.getElementById("filter");
  filter.addEventListener("input", draw);
  function value(r, k) { const v = r[k]; return typeof v === "object" && v !== null ? JSON.stringify(v) : v; }
  function draw() {
    const q = filter.value.trim().toLowerCase();
    let shown = rows.filter(r => !q || cols.some(c => String(value(r, c.key) ?? "").toLowerCase().includes(q)));
    shown.sort((a, b) => {
      let x = value(a, sortKey), y = value(b, sortKey);
      const nx = x === null || x === undefined, ny = y === null || y === undefined;
      if (nx || ny) return nx === ny ? 0 : nx ? 1 : -1;
      const r = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return asc ? r : -r;
    });
    ths.forEach(th => th.className = (th.className.includes("t") && !th.className.match(/asc|desc/) ? "t" :
      th.className.replace(/ ?(asc|desc)/g, "")) + (th.dataset.key === sortKey ? (asc ? " asc" : " desc") : ""));
    tb.textContent = "";
    const limit = 3000;
    for (const r of shown.slice(0, limit)) {
      const tr = el("tr", {}, tb);
      for (const c of cols) el("td", {class: (isText(c) ? "t " : "") + mark(r[c.key], c)}, tr, fmt(r[c.key], c));
    }
    document.getElementById("count").textContent = shown.length + " of " + rows.length + " rows" +
      (shown.length > limit ? " (first " + limit + " shown)" : "");
  }
  draw();
}

function frame(svg, w, h) { svg.setAttribute("viewBox", `0 0 ${w} ${h}`); svg.setAttribute("height", h); }
function logScale(lo, hi, a, b) {
  const l0 = Math.log10(lo), l1 = Math.log10(hi);
  return v => a + (Math.log10(v) - l0) / (l1 - l0 || 1) * (b - a);
}
function logAxis(svg, lo, hi, s, horizontal, pos, unit) {
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    const v = 10 ** e; if (v < lo || v > hi) continue;
    const p = s(v);
    if (horizontal) { el("line", {x1: p, x2: p, y1: pos, y2: pos + 4, class: "axis"}, svg);
      el("text", {x: p, y: pos + 16, "text-anchor": "middle"}, svg, si(v, unit)); }
    else { el("line", {x1: pos - 4, x2: pos, y1: p, y2: p, class: "axis"}, svg);
      el("text", {x: pos - 6, y: p + 4, "text-anchor": "end"}, svg, si(v, unit)); }
  }
}
function empty(svg, text) { frame(svg, 600, 60); el("text", {x: 12, y: 34}, svg, text); }

function breakdown() {
  const svg = document.getElementById("breakdown");
  const parts = D.breakdown;  // [label, seconds], largest first (tables.time_breakdown)
  const total = parts.reduce((s, [, v]) => s + v, 0);
  if (!total) return empty(svg, "no time to break down");
  const W = 1000, H = 40 + 22 * parts.length; frame(svg, W, H);
  let x = 10;
  parts.forEach(([k, v], i) => {
    const w = (W - 20) * v / total;
    const r = el("rect", {x, y: 8, width: Math.max(w, 0.5), height: 22, fill: color(k, i),
      "data-tip": `${k}: ${secs(v)} (${(100 * v / total).toFixed(1)}%)`}, svg);
    el("title", {}, r, k);
    x += w;
    el("rect", {x: 10, y: 40 + 22 * i, width: 12, height: 12, fill: color(k, i)}, svg);
    el("text", {x: 28, y: 50 + 22 * i}, svg, `${k}  ${secs(v)}  ${(100 * v / total).toFixed(1)}%`);
  });
}

// one compute roof: the peak of a single-dtype analysis; a mixed-precision trace has one per dtype
// (peaks.by_dtype, by FLOPs done: html.row_dtypes names each row's), each in its own colour, which
// outlines that dtype's points, under the one memory roof
const ROOF_COLORS = ["#1d2330", "#16a085", "#8e44ad", "#c9a227", "#d64545"];
function roofline() {
  const svg = document.getElementById("roofline"), P = D.peaks;
  const pts = D.rows.filter(r => r.flops > 0 && r.bytes > 0 && r.time_s > 0 && r.achieved_flops_s > 0);
  if (!pts.length) return empty(svg, "no op with FLOPs, bytes and a time");
  if (!P.flops) return empty(svg, "no device peak to draw a roof under");
  const memRoof = P.bytes > 0;  // none: no row shows the bandwidth (peaks from the data)
  const roofs = Object.entries(P.by_dtype || {}).filter(([, f]) => f > 0);
  const mixed = roofs.length > 1, tops = mixed ? roofs.map(([, f]) => f) : [P.flops], top = Math.max(...tops);
  const ridge = memRoof ? tops.map(f => f / P.bytes) : [];
  const W = 560, H = 380, L = 70, R = 16, T = 14, B = 40; frame(svg, W, H);
  const ai = pts.map(r => r.flops / r.bytes), perf = pts.map(r => r.achieved_flops_s);
  const xlo = Math.min(...ai, ...ridge) / 3, xhi = Math.max(...ai, ...ridge) * 3;
  const ylo = Math.min(...perf, ...(memRoof ? [P.bytes * xlo] : [])) / 3, yhi = top * 2;
  const sx = logScale(xlo, xhi, L, W - R), sy = logScale(ylo, yhi, H - B, T);
  el("line", {x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis"}, svg);
  el("line", {x1: L, x2: L, y1: T, y2: H - B, class: "axis"}, svg);
  logAxis(svg, xlo, xhi, sx, true, H - B, "");
  logAxis(svg, ylo, yhi, sy, false, L, "");
  el("text", {x: (L + W) / 2, y: H - 4, "text-anchor": "middle"}, svg, "arithmetic intensity (FLOP/byte)");
  el("text", {x: 12, y: T + 8}, svg, "FLOP/s");
  const roofOf = {};
  if (mixed) roofs.forEach(([dtype, f], i) => { roofOf[dtype] = {flops: f, color: ROOF_COLORS[i % ROOF_COLORS.length]}; });
  if (mixed) dtypeRoofs(svg, roofOf, P, memRoof, sx, sy, xlo, xhi);
  else {
    const roof = [xlo, ...ridge, xhi].map(x => `${sx(x)},${sy(memRoof ? Math.min(P.flops, P.bytes * x) : P.flops)}`).join(" ");
    el("polyline", {points: roof, fill: "none", stroke: "#1d2330", "stroke-width": 2,
      "data-tip": memRoof ? `peak ${si(P.flops, "FLOP/s")}, ${si(P.bytes, "B/s")}`
        : `peak ${si(P.flops, "FLOP/s")}; no memory roof (no op shows the bandwidth)`}, svg);
  }
  const maxT = Math.max(...pts.map(r => r.time_s));
  pts.forEach((r, i) => {
    const own = mixed ? roofOf[r.dtype] : undefined;
    const c = el("circle", {cx: sx(ai[i]), cy: sy(perf[i]), r: 3 + 7 * Math.sqrt(r.time_s / maxT),
      fill: color(r.limiter, 0), "fill-opacity": 0.65, stroke: own ? own.color : "#fff", ...(own ? {"stroke-width": 1.5} : {}),
      "data-tip": `${r.op} ${r.pass}\ntime ${secs(r.time_s)}\n${si(perf[i], "FLOP/s")} at ${ai[i].toFixed(1)} FLOP/B` +
        (own ? `\n${r.dtype}: against its roof of ${si(own.flops, "FLOP/s")}` : "") +
        `\nlimiter ${r.limiter}` + (r.headroom ? `\nheadroom ${r.headroom.toFixed(2)}x` : "")}, svg);
    el("title", {}, c, `${r.op} ${r.pass}`);
  });
}
// a mixed-precision trace's roofs: the memory roof once, up to the highest peak, and each dtype's
// compute roof from where it meets the memory roof (its ridge), labelled with the dtype and its peak
function dtypeRoofs(svg, roofOf, P, memRoof, sx, sy, xlo, xhi) {
  const top = Math.max(...Object.values(roofOf).map(o => o.flops));
  if (memRoof) el("line", {class: "roof memory", x1: sx(xlo), y1: sy(P.bytes * xlo), x2: sx(top / P.bytes), y2: sy(top),
    stroke: "#1d2330", "stroke-width": 2, "data-tip": `memory roof: ${si(P.bytes, "B/s")}`}, svg);
  for (const [dtype, o] of Object.entries(roofOf)) {
    const x0 = memRoof ? Math.max(xlo, o.flops / P.bytes) : xlo, y = sy(o.flops);
    el("line", {class: "roof compute", "data-dtype": dtype, "data-flops": o.flops, x1: sx(x0), y1: y, x2: sx(xhi), y2: y,
      stroke: o.color, "stroke-width": 2, "data-tip": `${dtype} peak ${si(o.flops, "FLOP/s")}: the roof of the ${dtype} ops` +
        (memRoof ? ` (ridge at ${(o.flops / P.bytes).toFixed(1)} FLOP/B)` : "; no memory roof (no op shows the bandwidth)")}, svg);
    el("text", {class: "roof-label", "data-dtype": dtype, x: sx(xhi) - 4, y: y - 4, "text-anchor": "end", style: `fill:${o.color}`},
      svg, `${dtype} ${si(o.flops, "FLOP/s")}`);
  }
}

function timeline() {
  const svg = document.getElementById("timeline"), B = D.timeline;
  if (!B.length) return empty(svg, "no pipeline schedule in this analysis (a training config has one)");
  const lanes = [];
  for (const b of B) { const k = b.stage + "|" + b.lane; if (!lanes.includes(k)) lanes.push(k); }
  lanes.sort((a, b) => { const [sa, la] = a.split("|"), [sb, lb] = b.split("|");
    return (+sa - +sb) || ["compute", "tp", "ep", "dp", "p2p"].indexOf(la) - ["compute", "tp", "ep", "dp", "p2p"].indexOf(lb); });
  const span = Math.max(...B.map(b => b.start_s + b.dur_s)), t0 = Math.min(...B.map(b => b.start_s));
  const W = 1000, L = 110, R = 10, rowH = 18, H = 30 + rowH * lanes.length; frame(svg, W, H);
  const sx = t => L + (t - t0) / (span - t0 || 1) * (W - L - R);
  lanes.forEach((k, i) => { const [s, l] = k.split("|");
    el("text", {x: 6, y: 14 + rowH * i + 12}, svg, `stage ${s} ${l}`); });
  const kinds = {};
  for (const b of B) {
    const i = lanes.indexOf(b.stage + "|" + b.lane);
    const fill = color(b.lane === "compute" ? b.kind : b.lane, 0);
    kinds[b.lane === "compute" ? b.kind : b.lane] = fill;
    const r = el("rect", {x: sx(b.start_s), y: 14 + rowH * i, width: Math.max(sx(b.start_s + b.dur_s) - sx(b.start_s), 0.6),
      height: rowH - 3, fill, stroke: sx(b.start_s + b.dur_s) - sx(b.start_s) > 4 ? "#fff" : "none",
      "stroke-width": 0.5,
      "data-tip": `${b.name} (${b.kind})\nstage ${b.stage}, micro-batch ${b.micro_batch}` +
        (b.chunk !== null && b.chunk !== undefined ? `, chunk ${b.chunk}` : "") +
        `\nstart ${secs(b.start_s)}, ${secs(b.dur_s)}`}, svg);
    if (b.micro_batch !== null && b.micro_batch !== undefined && sx(b.start_s + b.dur_s) - sx(b.start_s) > 14)
      el("text", {x: sx(b.start_s) + 2, y: 14 + rowH * i + 12, fill: "#fff", style: "fill:#fff;font-size:9px"}, svg, b.micro_batch);
  }
  let x = L;
  for (const [k, f] of Object.entries(kinds)) { el("rect", {x, y: H - 12, width: 10, height: 10, fill: f}, svg);
    el("text", {x: x + 14, y: H - 3}, svg, k); x += 24 + 7 * k.length; }
  el("text", {x: W - R, y: H - 3, "text-anchor": "end"}, svg, `step ${secs(span - t0)}`);
}

// the GEMM kernels of the heaviest GEMM row, as the table counts them (html.frontier_of_heaviest_gemm):
// one, or a backward's two with their frontiers summed (each has the whole buffer in turn)
function frontier() {
  const svg = document.getElementById("frontier"), F = D.frontier;
  if (!F) return empty(svg, "no GEMM-like op in this analysis");
  const two = F.gemms.length > 1, dims = d => Object.entries(d).map(([k, v]) => k + "=" + v).join(" ");
  const W = 560, H = 380, L = 70, R = 16, T = two ? 38 : 24, Bm = 40; frame(svg, W, H);
  const ys = F.accesses.concat([F.algo_min], F.time_words ? [F.time_words] : [], ...F.parts.map(p => p.accesses));
  const xs = F.buffer.concat(F.onchip_words > 0 ? [F.onchip_words] : [], ...F.parts.map(p => p.buffer));
  const xlo = Math.max(1, Math.min(...xs)) / 2, xhi = Math.max(...xs) * 2;
  const ylo = Math.min(...ys) / 2, yhi = Math.max(...ys) * 2;
  const sx = logScale(xlo, xhi, L, W - R), sy = logScale(ylo, yhi, H - Bm, T);
  el("line", {x1: L, x2: W - R, y1: H - Bm, y2: H - Bm, class: "axis"}, svg);
  el("line", {x1: L, x2: L, y1: T, y2: H - Bm, class: "axis"}, svg);
  logAxis(svg, xlo, xhi, sx, true, H - Bm, "");
  logAxis(svg, ylo, yhi, sy, false, L, "");
  el("text", {x: (L + W) / 2, y: H - 4, "text-anchor": "middle"}, svg, "on-chip buffer (words)");
  el("text", {class: "title", x: 8, y: 14}, svg, `${F.title} — DRAM accesses per call (words)`);
  if (two) el("text", {class: "gemms", x: 8, y: 28}, svg, F.gemms.map(g => `${g.name}: ${dims(g.dims)}`).join("  +  "));
  const steps = (buffer, accesses) => {
    const pts = [];
    buffer.forEach((b, i) => { if (i) pts.push(`${sx(b)},${sy(accesses[i - 1])}`); pts.push(`${sx(b)},${sy(accesses[i])}`); });
    pts.push(`${sx(xhi)},${sy(accesses[accesses.length - 1])}`);
    return pts.join(" ");
  };
  F.parts.forEach((p, i) => el("polyline", {class: "part", points: steps(p.buffer, p.accesses), fill: "none", stroke: "#9bb5ea",
    "stroke-width": 1, "stroke-dasharray": "5 3",
    "data-tip": `${F.gemms[i].name} (${dims(F.gemms[i].dims)}) alone: its least DRAM traffic with that buffer`}, svg));
  el("polyline", {class: "frontier", points: steps(F.buffer, F.accesses), fill: "none", stroke: "#3b6fd8", "stroke-width": 2,
    "data-tip": two ? "Orojenesis frontiers of both GEMM kernels, summed: the least DRAM traffic of one call with that buffer"
      : "Orojenesis frontier: the least DRAM traffic any mapping attains with that buffer"}, svg);
  el("line", {x1: L, x2: W - R, y1: sy(F.algo_min), y2: sy(F.algo_min), stroke: "#16a085", "stroke-dasharray": "4 3",
    "data-tip": `algorithmic minimum${two ? " of both kernels" : ""}: ${si(F.algo_min, "words")}`}, svg);
  if (F.onchip_words > 0) {
    el("line", {x1: sx(F.onchip_words), x2: sx(F.onchip_words), y1: T, y2: H - Bm, stroke: "#888", "stroke-dasharray": "3 3",
      "data-tip": `device buffer: ${si(F.onchip_words, "words")}`}, svg);
    if (F.bound_words) el("circle", {class: "bound", cx: sx(F.onchip_words), cy: sy(F.bound_words), r: 5, fill: "#16a085",
      "data-tip": `bound at the device's buffer: ${si(F.bound_words, "words")} per call (the row's oro bytes / calls)`}, svg);
    if (F.time_words) el("circle", {class: "time", cx: sx(F.onchip_words), cy: sy(F.time_words), r: 6, fill: "#d64545",
      "data-tip": `the op: its time per call${two ? " (both kernels)" : ""} moves at most ${si(F.time_words, "words")} at peak bandwidth`}, svg);
  }
}

function details() {
  const box = document.getElementById("details");
  if (!D.details.length) { box.previousElementSibling.remove(); box.remove(); return; }  // no heading over nothing
  for (const d of D.details) {
    el("h3", {}, box, d.title + (d.total > d.rows.length ? ` (first ${d.rows.length} of ${d.total})` : ""));
    const keys = [...new Set(d.rows.flatMap(r => Object.keys(r)))];
    const t = el("table", {class: "grid"}, el("div", {class: "scroll"}, box));
    const hr = el("tr", {}, el("thead", {}, t));
    keys.forEach(k => el("th", {class: "t"}, hr, k));
    const tb = el("tbody", {}, t);
    for (const r of d.rows) {
      const tr = el("tr", {}, tb);
      keys.forEach(k => el("td", {class: typeof r[k] === "number" ? "" : "t"}, tr, fmt(r[k], null)));
    }
  }
}

header(); groupsTable(); breakdown(); timeline(); roofline(); frontier(); opsTable(); details();
