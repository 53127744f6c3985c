// Lockstep fleet page: top offenders by GPU-hours lost (/capacity), the leaf x time heatmap
// (/capacity/heatmap) and the degraded fabric entities (/fabric/health). Plain DOM + SVG, no
// framework, no network beyond this worker's API; nothing from it is ever parsed as HTML.
"use strict";

const REFRESH_MS = 10000;
const SVGNS = "http://www.w3.org/2000/svg";
// The heatmap's bucket per window: hours up to a week, days beyond.
const BUCKET = { "1d": "1h", "7d": "1h", "30d": "1d" };

const state = { window: new URLSearchParams(location.search).get("window") || "7d" };

// -- small helpers (as on the timeline page) -------------------------------------------------------
const $ = (sel) => document.querySelector(sel);

// Control characters (C0, DEL, C1) and the bidi embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069) are shown as \uXXXX, not drawn: a name from the cluster must not move, hide or
// recolour the text around it. Every text the page writes goes through visible().
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

// Attributes a person reads (data-* and the like keep the raw value: the page and tests match on them).
const SHOWN_ATTRS = new Set(["title", "alt", "aria-label", "placeholder"]);

function visible(s) {
  return String(s).replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = visible(v);
    else node.setAttribute(k, v === true ? "" : SHOWN_ATTRS.has(k) ? visible(v) : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(visible(c)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    node.setAttribute(k, String(v));
  }
  if (text !== undefined) node.textContent = visible(text);
  return node;
}

function when(iso) {
  return iso ? String(iso).slice(0, 16).replace("T", " ") : "–";
}

function hours(v) {
  return Number(v).toFixed(2);
}

async function api(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || `HTTP ${r.status}`);
  return body;
}

// -- the panels ------------------------------------------------------------------------------------
function drawOffenders(cap) {
  const body = $("#offenders");
  body.replaceChildren();
  $("#offenders-total").textContent = visible(
    `${hours(cap.gpu_hours)} GPU-hours in ${cap.incidents} incident${cap.incidents === 1 ? "" : "s"}`);
  if (!cap.rows.length) {
    body.append(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "no GPU-time lost in this window" })));
    return;
  }
  for (const row of cap.rows) {
    body.append(el("tr", { "data-kind": row.kind, "data-id": row.id, "data-gpu-hours": row.gpu_hours },
      el("td", {}, el("span", { class: "muted", text: `${row.kind} ` }), row.id),
      el("td", { class: "num", "data-role": "gpu-hours", text: hours(row.gpu_hours) }),
      el("td", { class: "num", text: row.incidents }),
      el("td", {}, el("span", { class: `pill ${row.fixed ? "resolved" : "firing"}`, text: row.fixed ? "fixed" : `${row.open} open` })),
      el("td", { text: row.jobs.join(", ") }),
      el("td", { class: "mono", text: when(row.last_seen) })));
  }
}

function drawHealth(h) {
  const body = $("#health");
  body.replaceChildren();
  $("#health-count").textContent = visible(`${h.degraded} degraded · ${h.entities.length} listed`);
  if (!h.entities.length) {
    body.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "no fabric entity had an incident in this window" })));
  }
  for (const e of h.entities) {
    const ev = e.evidence[e.evidence.length - 1];
    const fm = ev && ev.first_mover;
    const cause = fm ? `first mover ${fm.source} ${fm.metric}` : "";
    body.append(el("tr", { "data-kind": e.kind, "data-id": e.id, "data-state": e.state },
      el("td", {}, el("span", { class: "muted", text: `${e.kind} ` }), e.id,
        e.nodes.length ? el("div", { class: "sub", text: `behind it: ${e.nodes.join(", ")}` }) : null),
      el("td", {}, el("span", { class: `pill ${e.state}`, text: e.state })),
      el("td", { class: "num", text: hours(e.gpu_hours) }),
      el("td", { class: "num", text: e.at_stake_gpus ? hours(e.at_stake_gpus) : "–" }),
      el("td", {}, `${e.incidents} incident${e.incidents === 1 ? "" : "s"} · ${e.jobs.join(", ")}`,
        ev ? el("div", { class: "sub" }, el("a", { href: `/alerts/${encodeURIComponent(ev.alert_id)}`, text: ev.alert_type }),
          ` ${ev.status} · ${cause}`) : null)));
  }
  const drain = $("#drain");
  drain.replaceChildren();
  if (!h.drain.length) drain.append(el("li", { class: "empty", text: "nothing to drain" }));
  for (const d of h.drain) {
    drain.append(el("li", { "data-kind": d.kind, "data-id": d.id },
      el("span", { class: `pill ${d.action === "drain" ? "firing" : "pending"}`, text: d.action }),
      el("span", { class: "grow" }, d.reason, d.command ? el("span", { class: "cmd", text: d.command }) : null)));
  }
}

function num(v, digits) {
  return v === null || v === undefined ? "–" : Number(v).toFixed(digits);
}

// "-0.98 ± 0.01 (-49%)": the change of the mean, the half-width of its 95% interval, relative to during.
function change(c, digits) {
  if (!c || c.change === null) return "–";
  const half = (c.ci95[1] - c.ci95[0]) / 2;
  const rel = c.relative === null ? "" : ` (${c.relative > 0 ? "+" : ""}${Math.round(c.relative * 100)}%)`;
  return `${c.change > 0 ? "+" : ""}${num(c.change, digits)} ± ${num(half, digits)}${rel}`;
}

function drawEffects(eff) {
  const body = $("#effects");
  body.replaceChildren();
  if (!eff.incidents.length) {
    body.append(el("tr", {}, el("td", { colspan: 9, class: "muted", text: "no incident resolved in this window" })));
  }
  for (const i of eff.incidents) {
    const st = i.step_time, c = i.cause;
    const who = i.entities.map((e) => e.id).join(" · ");
    if (!i.held || !st) {
      body.append(el("tr", { "data-alert": i.alert_id }, el("td", { text: i.job_id }), el("td", { text: who }),
        el("td", { colspan: 7, class: "muted", text: "older than the read model's history" })));
      continue;
    }
    body.append(el("tr", { "data-alert": i.alert_id },
      el("td", {}, el("a", { href: `/alerts/${encodeURIComponent(i.alert_id)}`, text: i.job_id })),
      el("td", { text: who }),
      el("td", { class: "num", text: `${num(st.during.mean, 3)} s` }),
      el("td", { class: "num", text: `${num(st.after.mean, 3)} s` }),
      el("td", { class: "num", "data-role": "step-change", text: change(st, 3) }),
      el("td", { class: "mono", text: i.cause_lane || "–" }),
      el("td", { class: "num", text: c ? num(c.during.mean, 2) : "–" }),
      el("td", { class: "num", text: c ? num(c.after.mean, 2) : "–" }),
      el("td", { class: "num", "data-role": "cause-change", text: change(c, 2) })));
  }
}

function drawHeatmap(hm) {
  const root = $("#heatmap");
  root.replaceChildren();
  const n = hm.starts.length;
  const cell = n > 60 ? Math.max(6, Math.floor(1100 / n)) : 30;
  const left = 90, top = 22, rowH = 26;
  const rows = hm.rows.length ? hm.rows : [];
  const width = left + n * cell + 10;
  const height = top + Math.max(1, rows.length) * rowH + 8;
  root.setAttribute("viewBox", `0 0 ${width} ${height}`);
  root.setAttribute("width", width);
  root.setAttribute("height", height);
  $("#heat-range").textContent = visible(n ? `${when(hm.starts_iso[0])} – ${when(hm.as_of_iso)} UTC · per ${hm.bucket}` : "");
  const max = Math.max(0, ...rows.flatMap((r) => r.values));
  // Column labels: about one every 60 px.
  const every = Math.max(1, Math.ceil(60 / cell));
  for (let i = 0; i < n; i += every) {
    const iso = hm.starts_iso[i];
    root.append(svg("text", { x: left + i * cell, y: 14 }, hm.bucket_s >= 86400 ? iso.slice(5, 10) : iso.slice(11, 16)));
  }
  if (!rows.length) {
    root.append(svg("text", { x: left, y: top + 16 }, "no GPU-time lost in this window"));
    return;
  }
  rows.forEach((row, r) => {
    const y = top + r * rowH;
    root.append(svg("text", { class: "row-label", x: 0, y: y + rowH / 2 + 4 }, row.id));
    const g = svg("g", { "data-role": "heat-row", "data-leaf": row.id, "data-gpu-hours": row.gpu_hours });
    row.values.forEach((v, i) => {
      const attrs = { x: left + i * cell, y, width: cell, height: rowH - 2, "data-start": hm.starts_iso[i], "data-value": v };
      if (v > 0) {
        // a square-root scale: one large incident must not hide the small ones
        const rect = svg("rect", { ...attrs, class: "cell hot", "fill-opacity": (0.25 + 0.75 * Math.sqrt(v / max)).toFixed(3) });
        rect.append(svg("title", {}, `${row.id} ${when(hm.starts_iso[i])} UTC: ${hours(v)} GPU-hours`));
        g.append(rect);
        if (cell >= 30) g.append(svg("text", { class: "cell-value", x: left + i * cell + 3, y: y + rowH / 2 + 3 }, v.toFixed(1)));
      } else {
        g.append(svg("rect", { ...attrs, class: "cell empty" }));
      }
    });
    root.append(g);
  });
}

// -- loading ---------------------------------------------------------------------------------------
async function load() {
  const w = encodeURIComponent(state.window);
  const bucket = encodeURIComponent(BUCKET[state.window] || "1h");
  try {
    const [cap, hm, health, eff] = await Promise.all([
      api(`/capacity?by=entity&window=${w}&limit=10`),
      api(`/capacity/heatmap?by=leaf&window=${w}&bucket=${bucket}&limit=30`),
      api(`/fabric/health?window=${w}`),
      api(`/capacity/effects?window=${w}&limit=10`),
    ]);
    drawOffenders(cap);
    drawHeatmap(hm);
    drawHealth(health);
    drawEffects(eff);
    $("#asof").textContent = visible(`event time ${when(cap.as_of_iso)} UTC`);
    $("#fleet-msg").textContent = visible("");
    $("#fleet-msg").className = "msg";
  } catch (e) {
    $("#fleet-msg").textContent = visible(`Could not load the fleet: ${e.message}`);
    $("#fleet-msg").className = "msg err";
  }
  document.body.dataset.loaded = "true";
}

function init() {
  for (const b of document.querySelectorAll("[data-window]")) {
    b.classList.toggle("on", b.dataset.window === state.window);
    b.addEventListener("click", () => {
      state.window = b.dataset.window;
      for (const o of document.querySelectorAll("[data-window]")) o.classList.toggle("on", o === b);
      load();
    });
  }
  load();
  setInterval(load, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", init);
