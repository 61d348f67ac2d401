"""The wafer view as one self-contained HTML page: a `wse_core.trace.PeTrace` drawn on a canvas.
Written by `wse view` and shown inline in a notebook (`PeTrace._repr_html_`).

Contract. `page_html(trace) -> str` is a page that needs nothing but itself (no CDN, no
server, no network): the trace's header as JSON and every layer as base64 float32 (a layer
that is one constant is sent as that constant) in a `<script type="application/json">`, and
the script below. It shows a layer switcher (SRAM, busy cycles per part, link traffic N / S /
E / W, defects, regions), zoom (wheel) and pan (drag), a hover box with the PE's
coordinates, every layer's number and the allocations and regions covering it, each phase's
critical PE marked, and a legend with units. Sum layers in blocks of several PEs are shown
per PE (the block's mean) and hovered as block total and per-PE mean.

Of the header the page carries only the fields `load` checks (each record's
`fields.FIELDS`, meta's `fields.META`), so its size follows the grid's, not what a file
adds. The JSON is written as script data may hold it: every `<`, `>`, `&`, U+2028 and
U+2029 as a `\\uXXXX` escape (Django's `json_script`), so no text can end the block.

For tests and links: `?pe=R,C` opens the hover box on PE (R, C) and `?layer=KEY` selects a
layer; an unknown layer or a `pe` that is not a PE on the grid is ignored with a one-line
notice in `<pre id="notes">`. The hover box's rows carry `data-key` and `data-value` (the
exact stored number). Script errors are written into `<pre id="errors">`; when the first draw
is done `<div id="status">` says `rendered in N ms` (since navigation start) and `body` gets
`data-ready="1"`.
"""

from __future__ import annotations

import base64
import html
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from wse_core.trace.fields import FIELDS, META, sram_capacity

if TYPE_CHECKING:  # PeTrace.plot / _repr_html_ import this module
    from wse_core.trace.schema import PeTrace

__all__ = ["page_html", "page_data"]


def _colormap(name: str, n: int = 256) -> list[list[int]]:
    from matplotlib import colormaps

    rgba = colormaps[name](np.linspace(0.0, 1.0, n))
    return (rgba[:, :3] * 255).round().astype(int).tolist()


def page_data(trace: PeTrace) -> dict[str, Any]:
    """The JSON the page reads: header, layers (base64 float32 or a constant), dead PEs."""
    layers: dict[str, dict[str, Any]] = {}
    for key, a in trace.layers.items():
        flat = np.ascontiguousarray(a, dtype="<f4").ravel()
        if flat.size and flat.min() == flat.max():
            layers[key] = {"const": float(flat[0])}
        else:
            layers[key] = {"b64": base64.b64encode(flat.tobytes()).decode("ascii")}
    return {
        "header": _page_header(trace),
        "sram_capacity": sram_capacity(trace.meta),  # the SRAM layer's legend (hunt 82 L2)
        "layers": layers,
        "dead": trace.dead.tolist(),
        "viridis": _colormap("viridis"),
        "categorical": _colormap("tab20", 20),
    }


def _page_header(trace: PeTrace) -> dict[str, Any]:
    """`trace.header()` with each record's and meta's fields that `load` checks, and no other
    (hunt 68: a 61 kB file's unchecked meta.notes of 60,000,000 characters was carried whole
    into a 60 MB page, which never shows it)."""
    head = trace.header()
    for key, fields in FIELDS.items():
        head[key] = [{f: r[f] for f in fields if f in r} for r in head[key]]
    head["meta"] = {k: v for k, v in head["meta"].items() if k in META}
    return head


# JSON as a <script> block's data may hold it: with every "<" escaped no "</script>", "<!--"
# or "<script" can end the block or put the HTML tokenizer in its "double escaped" state
# (hunt 68: a name holding "<!--<script>" swallowed the page's script, the page was blank);
# ">", "&", U+2028 and U+2029 as Django's json_script and Jinja's tojson write them.
_SCRIPT_SAFE = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def page_html(trace: PeTrace) -> str:
    """The whole page as a string (write it with UTF-8)."""
    # allow_nan=False: NaN / Infinity are no JSON, and the page's JSON.parse failed on them,
    # leaving a blank page (hunt 64; `load` refuses them, a trace built in memory may not)
    data = json.dumps(page_data(trace), separators=(",", ":"), allow_nan=False)
    data = data.translate(_SCRIPT_SAFE)  # inside JSON strings only: JSON's syntax has no <>&
    title = html.escape(f"wse view: {trace.name} on {trace.wafer}")
    return _PAGE.replace("__TITLE__", title).replace("__DATA__", data)


_PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
html,body{margin:0;height:100%;font:13px system-ui,sans-serif;background:#111;color:#ddd}
#top{padding:6px 10px;background:#1c1c1c;border-bottom:1px solid #333}
#top b{color:#fff}
#bar{padding:4px 10px;background:#181818;border-bottom:1px solid #333}
#bar button{background:#2a2a2a;color:#ddd;border:1px solid #444;border-radius:3px;
 margin:2px;padding:3px 7px;cursor:pointer}
#bar button.on{background:#3d6fb6;color:#fff;border-color:#5b8ad0}
#main{position:absolute;top:64px;bottom:0;left:0;right:280px}
#c{width:100%;height:100%;display:block;cursor:crosshair}
#side{position:absolute;top:64px;bottom:0;right:0;width:280px;overflow:auto;
 background:#161616;border-left:1px solid #333;padding:8px;box-sizing:border-box}
#hover{position:absolute;pointer-events:none;background:rgba(20,20,20,.93);
 border:1px solid #555;border-radius:4px;padding:6px 8px;display:none;max-width:460px}
#hover table{border-collapse:collapse}#hover td{padding:0 6px 0 0;white-space:nowrap}
#hover td.v{text-align:right;color:#fff}
#legend canvas{width:100%;height:14px;display:block;border:1px solid #444}
.row{display:flex;justify-content:space-between}.muted{color:#999}
#phases div{cursor:pointer;padding:1px 0}#phases div:hover{color:#fff}
#errors{color:#f66;white-space:pre-wrap;margin:0}
#notes{color:#e8b04a;white-space:pre-wrap;margin:0 0 6px;font:inherit}
</style></head>
<body>
<div id="top"></div>
<div id="bar"></div>
<div id="main"><canvas id="c"></canvas><div id="hover"></div></div>
<div id="side"><pre id="notes"></pre><div id="legend"></div>
<h4>Phases (critical PE)</h4><div id="phases"></div>
<h4>Allocations</h4><div id="allocs"></div><pre id="errors"></pre><div id="status"></div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const errBox = document.getElementById("errors");
window.addEventListener("error", e => { errBox.textContent += "error: " + e.message + "\n"; });
// A link parameter the page cannot follow: one line (as text: the URL is anyone's), ignored.
const note = t => { document.getElementById("notes").textContent += t + "\n"; };
const cut = t => t.length > 40 ? t.slice(0, 40) + "…" : t;
const D = JSON.parse(document.getElementById("data").textContent);
const H = D.header, [R, C] = H.shape, B = H.block, NR = H.rows, NC = H.cols;
const SPEC = {}; for (const l of H.layers) SPEC[l.key] = l;
function decode(L) {
  if (L.const !== undefined) return new Float32Array(R * C).fill(L.const);
  const s = atob(L.b64), u = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i);
  return new Float32Array(u.buffer);
}
const LAYER = {}; for (const k in D.layers) LAYER[k] = decode(D.layers[k]);
function count(i, j) { return Math.min(B, NR - i * B) * Math.min(B, NC - j * B); }
// What a cell shows: sum layers per PE (block mean), max layers as stored.
function shown(key, idx) {
  const v = LAYER[key][idx];
  return SPEC[key].reduction === "sum" && B > 1 ? v / count(Math.floor(idx / C), idx % C) : v;
}
const VIEWS = [
  ["sram_bytes", "SRAM"], ["busy_cycles", "busy cycles"], ["compute_cycles", "compute"],
  ["sram_cycles", "SRAM cycles"], ["fabric_cycles", "fabric"], ["latency_cycles", "latency"],
  ["link_N", "link N"], ["link_S", "link S"], ["link_E", "link E"], ["link_W", "link W"],
  ["detour_hops", "defects"], ["regions", "regions"]];
const params = new URLSearchParams(location.search);
const KEYS = VIEWS.map(v => v[0]).filter(k => k === "regions" || Object.hasOwn(LAYER, k));
let layer = params.get("layer") || "busy_cycles";
if (!KEYS.includes(layer)) {  // hunt 68: ?layer=sram was a TypeError and a blank canvas
  note(`?layer=${cut(layer)} is not a layer of this page; showing busy_cycles (layers: ` +
    `${KEYS.join(", ")})`);
  layer = "busy_cycles";
}
const fmt = v => (Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-2)) ?
  v.toExponential(3) : (Number.isInteger(v) ? String(v) : v.toFixed(2));
const ESC = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"};
const esc = s => String(s).replace(/[&<>"]/g, ch => ESC[ch]);

// Header, buttons, side panels.
const m = H.meta || {};
document.getElementById("top").innerHTML = `<b>${esc(H.name)}</b> on <b>${esc(H.wafer)}</b> ·
 ${NR} x ${NC} PEs${B > 1 ? ` (shown in ${B} x ${B} blocks: ${R} x ${C})` : " (exact)"} ·
 predicted ${fmt((m.predicted_s || 0) * 1e6)} µs per ${esc(m.units || "run")}
 (${fmt(m.critical_cycles || 0)} cycles, ${esc(m.bound || "-")}-bound, critical phase
 ${esc(m.critical_phase || "-")}) · ${H.num_dead} dead PEs`;
const bar = document.getElementById("bar");
for (const [key, label] of VIEWS) {
  const b = document.createElement("button");
  b.textContent = label; b.dataset.layer = key;
  b.onclick = () => { layer = key; paint(); draw(); };
  bar.appendChild(b);
}
document.getElementById("phases").innerHTML = H.phases.map((p, n) =>
  `<div data-n="${n}">${esc(p.path)}: ${fmt(p.cycles)} cycles (${esc(p.bound)})
   ${p.critical_pe ? "@ " + p.critical_pe.join(", ") : ""}</div>`).join("");
document.getElementById("allocs").innerHTML = H.allocations.map(a =>
  `<div>${esc(a.name)}: ${a.bytes_per_pe} B/PE on ${a.region[2]} x ${a.region[3]} at
   (${a.region[0]}, ${a.region[1]})</div>`).join("") || "<div class=muted>none</div>";

// The image: one pixel per cell, coloured by the layer.
const img = document.createElement("canvas"); img.width = C; img.height = R;
const ictx = img.getContext("2d");
let lo = 0, hi = 1;
function paint() {
  for (const b of bar.children) b.classList.toggle("on", b.dataset.layer === layer);
  const im = ictx.createImageData(C, R), px = im.data;
  if (layer === "regions") {
    for (let i = 0; i < R * C; i++) {
      px[4 * i] = px[4 * i + 1] = px[4 * i + 2] = 40; px[4 * i + 3] = 255;
    }
    H.regions.forEach((g, n) => fillRect(px, g.rect, D.categorical[n % 20]));
    lo = 0; hi = H.regions.length;
  } else {
    lo = Infinity; hi = -Infinity;
    for (let i = 0; i < R * C; i++) {
      const v = shown(layer, i); if (v < lo) lo = v; if (v > hi) hi = v;
    }
    const span = hi > lo ? hi - lo : 1;
    for (let i = 0; i < R * C; i++) {
      const col = D.viridis[Math.min(255, Math.floor(255 * (shown(layer, i) - lo) / span))];
      px[4 * i] = col[0]; px[4 * i + 1] = col[1]; px[4 * i + 2] = col[2]; px[4 * i + 3] = 255;
    }
  }
  ictx.putImageData(im, 0, 0);
  legend();
}
function fillRect(px, rect, col) {
  const [r0, c0, nr, nc] = rect;
  for (let i = Math.floor(r0 / B); i < Math.ceil((r0 + nr) / B); i++)
    for (let j = Math.floor(c0 / B); j < Math.ceil((c0 + nc) / B); j++) {
      const k = 4 * (i * C + j); px[k] = col[0]; px[k + 1] = col[1]; px[k + 2] = col[2];
    }
}
function legend() {
  const el = document.getElementById("legend");
  if (layer === "regions") {
    el.innerHTML = "<b>regions</b> (what each placement owns)" + H.regions.map((g, n) =>
      `<div><span style="color:rgb(${D.categorical[n % 20]})">■</span> ${esc(g.name)}
       (${g.rect[2]} x ${g.rect[3]} at ${g.rect[0]}, ${g.rect[1]})</div>`).join("");
    return;
  }
  const s = SPEC[layer], per = s.reduction === "sum" && B > 1 ? ` per PE (mean of ${B} x ${B})` :
    (B > 1 ? ` (max of ${B} x ${B})` : " per PE");
  const tot = s.reduction === "sum" ? `; total ${fmt(s.total)} ${esc(s.unit)}` : "";
  const cap = layer === "sram_bytes" && D.sram_capacity ?
    `<div class=muted>${esc(D.sram_capacity)}</div>` : "";
  el.innerHTML = `<b>${esc(s.title)}</b><div class=muted>${esc(s.unit)}${per}${tot}, max
    ${fmt(s.max)}</div>${cap}<canvas width=256 height=1></canvas>
    <div class=row><span>${fmt(lo)}</span><span>${fmt(hi)} ${esc(s.unit)}</span></div>
    <div class=muted>○ critical PE of a phase${layer === "detour_hops" ?
      "; ■ dead PE (physical position)" : ""}</div>`;
  const g = el.querySelector("canvas").getContext("2d");
  for (let x = 0; x < 256; x++) { g.fillStyle = `rgb(${D.viridis[x]})`; g.fillRect(x, 0, 1, 1); }
}

// View: cell (i, j) is drawn at screen (ox + j s, oy + i s).
const cv = document.getElementById("c"), ctx = cv.getContext("2d");
let s = 1, ox = 0, oy = 0, pinned = null;
function fit() {
  cv.width = cv.clientWidth; cv.height = cv.clientHeight;
  s = Math.min(cv.width / C, cv.height / R);
  ox = (cv.width - C * s) / 2; oy = (cv.height - R * s) / 2;
}
function draw() {
  ctx.setTransform(1, 0, 0, 1, 0, 0);
  ctx.fillStyle = "#111"; ctx.fillRect(0, 0, cv.width, cv.height);
  ctx.imageSmoothingEnabled = false;
  ctx.setTransform(s, 0, 0, s, ox, oy); ctx.drawImage(img, 0, 0);
  ctx.lineWidth = 1.5 / s; ctx.font = `${12 / s}px system-ui`;
  if (layer === "regions" || H.regions.length < 40) H.regions.forEach((g, n) => {
    const [r0, c0, nr, nc] = g.rect.map(v => v / B);
    ctx.strokeStyle = layer === "regions" ? "#fff" : `rgba(${D.categorical[n % 20]},0.8)`;
    ctx.strokeRect(c0, r0, nc, nr);
    if (layer !== "regions") return;
    ctx.fillStyle = "#fff"; ctx.fillText(g.name, c0 + 2 / s, r0 + 13 / s);
  });
  if (layer === "detour_hops") {
    ctx.fillStyle = "#ff3030"; const d = Math.max(1, 3 / s);
    for (const [r, c] of D.dead) ctx.fillRect(c / B + 0.5 - d / 2, r / B + 0.5 - d / 2, d, d);
  }
  const seen = new Set();
  for (const p of H.phases) {
    if (!p.critical_pe) continue;
    const key = p.critical_pe.join(","); const [r, c] = p.critical_pe;
    ctx.strokeStyle = "#ff4fd8"; ctx.beginPath();
    const x = Math.floor(c / B) + 0.5, y = Math.floor(r / B) + 0.5;
    ctx.arc(x, y, Math.max(0.7, 7 / s), 0, 2 * Math.PI); ctx.stroke();
    if (seen.has(key)) continue;
    ctx.fillStyle = "#ff4fd8"; ctx.fillText(p.name, x + 8 / s, y - 4 / s); seen.add(key);
  }
  if (pinned) { ctx.strokeStyle = "#fff"; ctx.strokeRect(pinned[1], pinned[0], 1, 1); }
}

// Hover: the PE (or block) under the cursor, every layer's number, what covers it.
const hover = document.getElementById("hover");
function inside(rect, r, c) {
  return r >= rect[0] && r < rect[0] + rect[2] && c >= rect[1] && c < rect[1] + rect[3];
}
function showCell(i, j, x, y) {
  if (i < 0 || j < 0 || i >= R || j >= C) {
    hover.style.display = "none"; pinned = null; draw(); return;
  }
  pinned = [i, j];
  const r = i * B, c = j * B, idx = i * C + j, n = count(i, j);
  const where = B > 1 ? `PEs rows ${r}-${Math.min(NR, r + B) - 1}, cols ${c}-` +
    `${Math.min(NC, c + B) - 1} (${n} PEs)` : `PE (${r}, ${c})`;
  let rows = "";
  for (const l of H.layers) {
    const v = LAYER[l.key][idx], sum = l.reduction === "sum" && B > 1;
    const note = sum ? ` (block; ${fmt(v / n)} per PE)` : (B > 1 ? " (block max)" : "");
    rows += `<tr data-key="${l.key}" data-value="${v}"><td>${esc(l.title)}</td>
      <td class=v>${fmt(v)}</td><td class=muted>${esc(l.unit)}${note}</td></tr>`;
  }
  const allocs = H.allocations.filter(a => inside(a.region, r, c));
  const regs = H.regions.filter(g => inside(g.rect, r, c)).map(g => esc(g.name));
  const crit = H.phases.filter(p => p.critical_pe && Math.floor(p.critical_pe[0] / B) === i &&
    Math.floor(p.critical_pe[1] / B) === j).map(p => esc(p.path));
  const dead = D.dead.filter(([pr, pc]) =>
    Math.floor(pr / B) === i && Math.floor(pc / B) === j).length;
  const owned = allocs.map(a => `${esc(a.name)} ${a.bytes_per_pe} B`).join(", ") || "none";
  hover.innerHTML = `<b id="hover-pe" data-row="${r}" data-col="${c}">${where}</b>` +
    `<table>${rows}</table><div>allocations: ${owned}</div>` +
    `<div>regions: ${regs.join(", ") || "none"}</div>` +
    (crit.length ? `<div style="color:#ff4fd8">critical PE of: ${crit.join(", ")}</div>` : "") +
    (dead ? `<div style="color:#ff6060">${dead} dead PE(s) at this physical position</div>` : "");
  hover.style.display = "block";
  hover.style.left = Math.min(x + 14, cv.width - 300) + "px";
  hover.style.top = Math.max(0, y + 14) + "px";
  draw();
}
const cell = (x, y) => [Math.floor((y - oy) / s), Math.floor((x - ox) / s)];
let drag = null;
cv.addEventListener("mousedown", e => { drag = [e.offsetX, e.offsetY, ox, oy]; });
window.addEventListener("mouseup", () => { drag = null; });
cv.addEventListener("mousemove", e => {
  if (drag) {
    ox = drag[2] + e.offsetX - drag[0]; oy = drag[3] + e.offsetY - drag[1]; draw(); return;
  }
  const [i, j] = cell(e.offsetX, e.offsetY); showCell(i, j, e.offsetX, e.offsetY);
});
cv.addEventListener("mouseleave", () => { hover.style.display = "none"; });
cv.addEventListener("wheel", e => {
  e.preventDefault();
  const k = Math.exp(-e.deltaY * 0.0015), x = e.offsetX, y = e.offsetY;
  ox = x - (x - ox) * k; oy = y - (y - oy) * k; s *= k; draw();
}, {passive: false});
cv.addEventListener("dblclick", () => { fit(); draw(); });
window.addEventListener("resize", () => { fit(); draw(); });
for (const el of document.getElementById("phases").children) el.onclick = () => {
  const p = H.phases[+el.dataset.n]; if (!p.critical_pe) return;
  const i = Math.floor(p.critical_pe[0] / B), j = Math.floor(p.critical_pe[1] / B);
  s = Math.max(s, 12); ox = cv.width / 2 - (j + 0.5) * s; oy = cv.height / 2 - (i + 0.5) * s;
  showCell(i, j, cv.width / 2, cv.height / 2);
};

fit(); paint(); draw();
function openPe(text) {  // ?pe=R,C (hunt 68: ?pe=3 was a TypeError and a blank canvas)
  const rc = text.split(",").map(v => v.trim() === "" ? NaN : Number(v)), [r, c] = rc;
  if (rc.length !== 2 || !rc.every(Number.isFinite))
    return note(`?pe=${cut(text)} is not a PE; give ?pe=ROW,COL (e.g. ?pe=0,0)`);
  if (r < 0 || c < 0 || r >= NR || c >= NC)
    return note(`?pe=${cut(text)} is off the ${NR} x ${NC} grid`);
  const i = Math.floor(r / B), j = Math.floor(c / B);
  showCell(i, j, ox + (j + 1) * s, oy + (i + 1) * s);
}
if (params.has("pe")) openPe(params.get("pe"));
document.getElementById("status").textContent = `rendered in ${performance.now().toFixed(0)} ms`;
document.body.dataset.ready = "1";
</script></body></html>
"""
