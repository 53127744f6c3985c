// Lockstep timeline page: plain DOM + SVG, no framework, no network beyond this worker's API.
// Everything shown comes from the JSON API (docs/api.md); nothing from it is ever parsed as HTML.
"use strict";

const LANE_COLORS = {
  fabric_errors: "#ff7a7a", congestion: "#ffb020", collective_time: "#5ec8f0", gpu_faults: "#ff5fa2",
  gpu_util: "#3fcf8e", storage_latency: "#b48cff", cpu_util: "#e6c15a", loader_wait: "#f08a5e",
  step_time: "#6aa7ff",
};
const REFRESH_MS = 3000;
const SVGNS = "http://www.w3.org/2000/svg";

const state = {
  jobs: [], job: null, alert: null, windowMode: "auto", zoom: null, timeline: null, diagnosis: null,
  alerts: [], silences: [], annotations: [], pickedTs: null, hoverX: null, hoverY: null, brush: null,
  token: sessionStorage.getItem("lockstep.token") || "", alertsAll: false, busy: false,
};

// -- small helpers ---------------------------------------------------------------------------------
const $ = (sel) => document.querySelector(sel);

// Control characters (C0, DEL, C1) and the bidi embeddings, overrides and isolates (U+202A-U+202E,
// U+2066-U+2069) are shown as \uXXXX, not drawn: a job name or label from the cluster must not move,
// hide or recolour the text around it. Every text the page writes goes through visible().
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

// Attributes a person reads (data-* and the like keep the raw value: the page matches on them).
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
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
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

function hms(t) {
  if (t === null || t === undefined) return "–";
  const sec = typeof t === "string" ? Date.parse(t) / 1000 : t;
  return new Date(sec * 1000).toISOString().slice(11, 19);
}

function dur(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
  const s = Math.round(seconds);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function fmt(v, unit) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (unit === "s") {
    if (a === 0) return "0 s";
    if (a * 1000 < 999.5) return `${Number((v * 1000).toPrecision(3))} ms`;
    return `${v.toPrecision(3)} s`;
  }
  if (unit === "µs") {
    if (a >= 1000) return `${(v / 1000).toFixed(a >= 100000 ? 0 : 1)} ms`;
    return `${v.toFixed(0)} µs`;
  }
  if (unit === "%") return `${v.toFixed(1)}%`;
  let s;
  if (a >= 1e6) s = `${(v / 1e6).toFixed(1)}M`;
  else if (a >= 1e4) s = `${(v / 1e3).toFixed(1)}k`;
  else if (a >= 100) s = v.toFixed(0);
  else if (a >= 1 || a === 0) s = v.toFixed(a >= 10 ? 1 : 2).replace(/\.?0+$/, "");
  else s = v.toPrecision(2);
  return unit ? `${s} ${unit.replace("events/s", "/s").replace("errors/s", "/s")}` : s;
}

async function api(path, opts = {}) {
  const headers = { Accept: "application/json", ...(opts.headers || {}) };
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  if (opts.write && state.token) headers.Authorization = `Bearer ${state.token}`;
  let resp;
  for (let attempt = 0; ; attempt++) {
    resp = await fetch(path, { method: opts.method || "GET", headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    // The worker answers 429 when too many heavy reads are in flight: wait as told, then ask again.
    if (resp.status !== 429 || opts.method || attempt >= 3) break;
    const wait = Math.min(10, Number(resp.headers.get("Retry-After")) || 1);
    await new Promise((done) => setTimeout(done, wait * 1000));
  }
  let data = null;
  try { data = await resp.json(); } catch (e) { data = null; }
  if (!resp.ok) {
    const err = new Error((data && data.error) || `${resp.status} ${resp.statusText}`);
    err.status = resp.status;
    throw err;
  }
  return data;
}

// -- routing ---------------------------------------------------------------------------------------
async function routeFromLocation() {
  const parts = location.pathname.split("/").filter(Boolean).map(decodeURIComponent);
  const q = new URLSearchParams(location.search);
  if (parts[0] === "jobs" && parts[1]) {
    state.job = parts[1];
    state.alert = q.get("alert");
    if (state.alert) state.windowMode = "incident";
  } else if (parts[0] === "alerts" && parts[1]) {
    try {
      const a = await api(`/alerts/${encodeURIComponent(parts[1])}`);
      state.job = a.job_id;
      state.alert = a.alert_id;
      state.windowMode = "incident";
    } catch (e) { /* unknown alert: fall back to the job list */ }
  }
}

function pushLocation() {
  if (!state.job) return;
  let url = `/jobs/${encodeURIComponent(state.job)}/timeline`;
  if (state.alert) url += `?alert=${encodeURIComponent(state.alert)}`;
  if (location.pathname + location.search !== url) history.replaceState(null, "", url);
}

function selectJob(jobId, alertId) {
  const changed = jobId !== state.job || (alertId || null) !== state.alert;
  state.job = jobId;
  state.alert = alertId || null;
  if (changed) {
    state.zoom = null;
    state.windowMode = alertId ? "incident" : "auto";
    state.timeline = null;
    state.diagnosis = null;
    state.pickedTs = null;
  }
  pushLocation();
  renderJobs();
  refreshJob();
}

// -- data ------------------------------------------------------------------------------------------
async function refreshAll() {
  if (state.busy) return;
  state.busy = true;
  try {
    const [jobs, ready] = await Promise.all([api("/jobs"), fetch("/readyz", { headers: { Accept: "application/json" } })
      .then((r) => r.json()).catch(() => null)]);
    state.jobs = jobs.jobs;
    $("#asof").textContent = visible(jobs.as_of ? `event time ${new Date(jobs.as_of * 1000).toISOString().slice(0, 19).replace("T", " ")} UTC` : "event time –");
    const rd = $("#ready");
    rd.textContent = visible(ready && ready.ready ? "ready" : "catching up");
    rd.className = `ready ${ready && ready.ready ? "ok" : "no"}`;
    if (!state.job && state.jobs.length) {
      state.job = state.jobs[0].job_id;
      pushLocation();
    }
    renderJobs();
    await refreshJob();
  } catch (e) {
    $("#ready").textContent = visible("offline");
    $("#ready").className = "ready no";
  } finally {
    state.busy = false;
  }
}

function timelineQuery() {
  const q = new URLSearchParams();
  if (state.zoom) {
    q.set("from", String(state.zoom[0]));
    q.set("to", String(state.zoom[1]));
  } else if (state.windowMode === "incident") {
    const alertId = state.alert || currentJob()?.alert?.alert_id;
    if (alertId) q.set("alert", alertId);
  } else if (typeof state.windowMode === "number") {
    const job = currentJob();
    if (job && job.last_seen) {
      q.set("to", String(job.last_seen + 1));
      q.set("from", String(job.last_seen + 1 - state.windowMode));
    }
  }
  if (state.alert && !q.has("alert")) q.set("alert", state.alert);
  const s = q.toString();
  return s ? `?${s}` : "";
}

function currentJob() {
  return state.jobs.find((j) => j.job_id === state.job) || null;
}

async function refreshJob() {
  if (!state.job) return;
  const job = encodeURIComponent(state.job);
  const alertQ = state.alert ? `?alert=${encodeURIComponent(state.alert)}` : "";
  const alertsQ = state.alertsAll ? "?limit=50" : `?job=${job}&limit=50`;
  try {
    const [detail, tl, diag, alerts, silences, notes] = await Promise.all([
      api(`/jobs/${job}`), api(`/jobs/${job}/timeline${timelineQuery()}`), api(`/jobs/${job}/diagnosis${alertQ}`),
      api(`/alerts${alertsQ}`), api("/silences"), api(`/annotations?job=${job}`),
    ]);
    state.detail = detail;
    state.timeline = tl;
    state.diagnosis = diag;
    state.alerts = alerts.alerts;
    state.silences = silences.silences;
    state.annotations = notes.annotations;
    renderHead();
    renderTimeline();
    renderAnswers();
    renderAlerts();
    renderSilences();
    renderAnnotations();
    document.body.dataset.loaded = "true";
  } catch (e) {
    $("#job-alert").textContent = visible(`Could not load ${state.job}: ${e.message}`);
  }
}

// -- job list and header ---------------------------------------------------------------------------
function renderJobs() {
  const ul = $("#jobs");
  ul.replaceChildren();
  $("#jobs-count").textContent = visible(state.jobs.length ? `${state.jobs.length}` : "");
  for (const j of state.jobs) {
    const ratio = j.step_time && j.step_time.ratio;
    const why = j.alert && j.status === "degraded" && j.alert.first_mover
      ? `${j.alert.domain}: ${j.alert.first_mover.where}` : (j.alert && j.status === "recovered" ? `recovered ${hms(j.alert.resolved_at)}` : "");
    const li = el("li", { class: `job${j.job_id === state.job ? " sel" : ""}`, "data-job": j.job_id, "data-status": j.status,
      onclick: () => selectJob(j.job_id, null), tabindex: 0 },
      el("div", { class: "row1" }, el("span", { class: `dot ${j.status}`, title: j.status }),
        el("span", { class: "id", text: j.job_id }),
        ratio ? el("span", { class: `ratio${ratio > 1.3 ? " bad" : ""}`, title: "step time vs its hour median", text: `step ×${ratio.toFixed(2)}` }) : null),
      el("div", { class: "meta", text: [j.name, j.gpus !== null ? `${j.gpus} GPUs` : null, j.nodes !== null ? `${j.nodes} nodes` : null].filter(Boolean).join(" · ") }),
      why ? el("div", { class: "why", text: why }) : null);
    ul.append(li);
  }
}

function renderHead() {
  const d = state.detail;
  if (!d) return;
  $("#job-title").textContent = visible(d.name && d.name !== d.job_id ? `${d.job_id}  ·  ${d.name}` : d.job_id);
  const st = $("#job-status");
  st.textContent = visible(d.status.replace("_", " "));
  st.className = `pill ${d.status}`;
  const facts = $("#job-facts");
  facts.replaceChildren(
    fact("GPUs", d.gpus), fact("nodes", d.nodes), fact("hosts", d.hostlist || "–"),
    fact("leaves", (d.leaves || []).map((l) => l.switch).join(", ") || "–"), fact("spines", (d.spines || []).join(", ") || "–"),
    fact("storage", (d.pools || []).join(", ") || "–"), fact("fabric", (d.fabrics || []).join(", ") || "–"),
    fact("state", d.state));
  const box = $("#job-alert");
  box.replaceChildren();
  if (d.alert) {
    box.append(el("span", { class: `pill ${d.alert.status}`, text: d.alert.status }), " ",
      el("span", { class: `pill ${d.alert.severity}`, text: d.alert.severity }), " ",
      el("span", { text: d.alert.summary || "" }));
  }
}

function fact(label, value) {
  return el("span", { class: "fact" }, `${label} `, el("b", { text: value === null || value === undefined ? "–" : value }));
}

// -- the timeline ----------------------------------------------------------------------------------
const G = { left: 204, right: 16, top: 48, laneH: 52, gap: 7, axis: 46 };
// The entity that matters most on a lane: the highest (errors, latency, ...) or, for GPU utilisation, the lowest.
const worstOf = (lane) => (lane.lane === "gpu_util" ? lane.min : lane.max);
const worstName = (lane) => (lane.lane === "gpu_util" ? "min" : "max");

function renderTimeline() {
  const tl = state.timeline;
  const root = $("#timeline");
  if (!tl) return;
  const width = Math.max(560, $("#timeline-wrap").clientWidth);
  const lanes = tl.lanes;
  const height = G.top + lanes.length * (G.laneH + G.gap) + G.axis;
  root.setAttribute("viewBox", `0 0 ${width} ${height}`);
  root.setAttribute("height", String(height));
  root.replaceChildren();
  root.dataset.from = tl.from;
  root.dataset.to = tl.to;
  $("#tl-range").textContent = visible(`${hms(tl.from)} – ${hms(tl.to)} UTC · ${tl.step} s/point`);
  for (const b of document.querySelectorAll("[data-window]")) {
    const w = b.dataset.window;
    b.classList.toggle("on", !state.zoom && String(state.windowMode) === w);
  }
  const plotW = width - G.left - G.right;
  const span = Math.max(1, tl.to - tl.from);
  const x = (t) => G.left + ((t - tl.from) / span) * plotW;
  const laneTop = (i) => G.top + i * (G.laneH + G.gap);
  const bottom = laneTop(lanes.length) - G.gap;
  state.geom = { x, width, plotW, span, laneTop, bottom, height };

  // Grid and axis.
  const ticks = timeTicks(tl.from, tl.to, plotW);
  const grid = svg("g", { class: "grid" });
  const axis = svg("g", { class: "axis" });
  for (const t of ticks) {
    grid.append(svg("line", { class: "grid-line", x1: x(t), x2: x(t), y1: G.top - 4, y2: bottom }));
    axis.append(svg("text", { x: x(t), y: bottom + 16, "text-anchor": "middle" }, hms(t)));
  }

  // Incident windows (behind the lanes' lines, over their backgrounds).
  const incidents = svg("g", { class: "incidents" });
  for (const inc of tl.incidents || []) {
    const x1 = x(Math.max(inc.start, tl.from));
    const x2 = x(Math.min(inc.end === null ? tl.to : inc.end, tl.to));
    const g = svg("g", { "data-role": "incident", "data-alert": inc.alert_id });
    g.append(svg("rect", { class: "incident", x: x1, y: G.top - 6, width: Math.max(2, x2 - x1), height: bottom - G.top + 6, rx: 3 }));
    g.append(svg("line", { class: "onset", x1: x(inc.onset), x2: x(inc.onset), y1: G.top - 6, y2: bottom }));
    const label = `incident ${hms(inc.start)} → ${inc.end === null ? "ongoing" : hms(inc.end)} · ${inc.severity} · ${inc.domain}`;
    g.append(svg("text", { class: "incident-label", x: x1 + 4, y: G.top - 12 }, label));
    g.append(svg("title", {}, inc.summary || label));
    incidents.append(g);
  }

  const bgs = svg("g");
  const lanesG = svg("g");
  lanes.forEach((lane, i) => {
    const y0 = laneTop(i);
    bgs.append(svg("rect", { class: `lane-bg${i % 2 ? " alt" : ""}`, x: G.left, y: y0, width: plotW, height: G.laneH, rx: 3 }));
    lanesG.append(drawLane(lane, i, y0, x, tl));
  });

  // Anomaly markers, annotations, the first mover.
  const marks = svg("g", { class: "anomalies" });
  for (const m of tl.anomalies || []) {
    const i = lanes.findIndex((l) => l.lane === m.lane);
    if (i < 0 || m.ts > tl.to || (m.end_ts !== null && m.end_ts < tl.from)) continue;
    const y0 = laneTop(i);
    const xs = x(Math.max(m.ts, tl.from));
    const xe = x(Math.min(m.end_ts === null ? tl.to : m.end_ts, tl.to));
    const g = svg("g", { "data-role": "anomaly", "data-lane": m.lane, "data-metric": m.metric });
    g.append(svg("line", { class: `episode ${m.role || ""}`, x1: xs, x2: Math.max(xs + 1, xe), y1: y0 + G.laneH - 2, y2: y0 + G.laneH - 2 }));
    if (m.ts >= tl.from) {
      g.append(svg("path", { class: `anomaly ${m.role || ""}`, d: `M${xs - 5},${y0 + 1} L${xs + 5},${y0 + 1} L${xs},${y0 + 9} Z` }));
    }
    g.append(svg("title", {}, `${hms(m.ts)} ${m.layer} ${m.where} ${m.metric} ${m.direction === "down" ? "fell" : "rose"} to ${fmt(m.value)} (p50 ${fmt(m.p50)})` +
      (m.entities > 1 ? ` · ${m.entities} series` : "") + (m.end_ts ? ` · until ${hms(m.end_ts)}` : " · ongoing")));
    marks.append(g);
  }
  const notes = svg("g", { class: "notes" });
  for (const n of tl.annotations || []) {
    const nx = x(n.ts);
    notes.append(svg("line", { class: "note-line", x1: nx, x2: nx, y1: G.top - 4, y2: bottom }));
    const text = `${n.kind}: ${n.text}`.slice(0, 48);
    const w = text.length * 6.2 + 10;
    const bx = nx + w + 4 > G.left + state.geom.plotW ? nx - w - 4 : nx + 4;
    notes.append(svg("line", { class: "note-line", x1: nx, x2: nx, y1: bottom, y2: bottom + 24 }));
    notes.append(svg("rect", { class: "note-box", x: bx, y: bottom + 23, width: w, height: 16, rx: 3 }));
    notes.append(svg("text", { class: "note-label", x: bx + 5, y: bottom + 35 }, text));
  }
  if (state.pickedTs !== null && state.pickedTs >= tl.from && state.pickedTs <= tl.to) {
    notes.append(svg("line", { class: "picked", x1: x(state.pickedTs), x2: x(state.pickedTs), y1: G.top - 4, y2: bottom }));
  }
  const mover = drawFirstMover(tl, lanes, x, laneTop, bottom, width);

  const overlay = svg("rect", { x: G.left, y: G.top - 6, width: plotW, height: bottom - G.top + 6, fill: "transparent", class: "overlay" });
  const cursor = svg("line", { class: "cursor", x1: -10, x2: -10, y1: G.top - 4, y2: bottom, visibility: "hidden" });
  const brush = svg("rect", { class: "brush", x: 0, y: G.top - 4, width: 0, height: bottom - G.top + 4, visibility: "hidden" });
  root.append(bgs, grid, incidents, lanesG, notes, marks, axis, mover, cursor, brush, overlay);
  state.cursor = cursor;
  state.brushRect = brush;
  bindPointer(overlay);
  if (state.hoverX !== null) hover(state.hoverX);
}

function drawLane(lane, i, y0, x, tl) {
  const g = svg("g", { class: "lane", "data-lane": lane.lane, "data-has-data": lane.has_data ? "true" : "false" });
  const color = LANE_COLORS[lane.lane] || "#5ec8f0";
  g.append(svg("text", { class: "lane-title", x: 14, y: y0 + 15 }, lane.title));
  g.append(svg("text", { class: "lane-unit", x: 14, y: y0 + 29 }, `${lane.layers} · ${lane.unit}`));
  const lastIdx = lastIndex(lane.p50);
  const value = svg("text", { class: "lane-value", x: G.left - 10, y: y0 + 15, "text-anchor": "end", "data-role": "lane-value" },
    lastIdx >= 0 ? fmt(lane.p50[lastIdx], lane.unit) : "");
  g.append(value);
  g.append(svg("rect", { x: 4, y: y0 + 4, width: 3, height: G.laneH - 8, rx: 1.5, fill: color }));
  if (!lane.has_data) {
    g.append(svg("text", { class: "nodata", x: G.left + 10, y: y0 + G.laneH / 2 + 4 }, "no data for this job in this window"));
    return g;
  }
  const vals = [];
  const worst = worstOf(lane);
  for (const arr of [lane.p50, lane.p99, worst]) for (const v of arr) if (v !== null) vals.push(v);
  if (lane.baseline.p50 !== null) vals.push(lane.baseline.p50);
  let lo = Math.min(...vals);
  let hi = Math.max(...vals);
  if (lo > 0 && lo < hi * 0.35) lo = 0;
  if (hi - lo < 1e-12) { hi = lo + (Math.abs(lo) || 1) * 0.5; lo = lo - (Math.abs(lo) || 1) * 0.5; if (lo < 0 && hi > 0 && vals.every((v) => v >= 0)) lo = 0; }
  const pad = (hi - lo) * 0.08;
  lo -= pad; hi += pad;
  const inner = G.laneH - 8;
  const y = (v) => y0 + 4 + inner - ((Math.min(Math.max(v, lo), hi) - lo) / (hi - lo)) * inner;
  const ts = tl.ts;
  const half = tl.step / 2;
  const px = (k) => x(ts[k] + half);
  g.append(svg("path", { class: "minmax", d: bandPath(lane.min, lane.max, px, y), fill: color, opacity: 0.07 }));
  g.append(svg("path", { class: "band", d: bandPath(lane.p50, lane.p99, px, y), fill: color, opacity: 0.28 }));
  if (lane.baseline.p50 !== null) {
    const by = y(lane.baseline.p50);
    g.append(svg("line", { class: "base", x1: G.left, x2: G.left + state.geom.plotW, y1: by, y2: by }));
  }
  g.append(svg("path", { class: "worst", d: linePath(worst, px, y), stroke: color }));
  g.append(svg("path", { class: "p50", d: linePath(lane.p50, px, y), stroke: color }));
  g.append(svg("text", { class: "lane-unit", x: 14, y: y0 + 43 },
    lane.baseline.p50 !== null ? `baseline ${fmt(lane.baseline.p50, lane.unit)}` : ""));
  return g;
}

function lastIndex(arr) {
  for (let k = arr.length - 1; k >= 0; k--) if (arr[k] !== null) return k;
  return -1;
}

function linePath(values, px, y) {
  let d = "";
  let pen = false;
  values.forEach((v, k) => {
    if (v === null) { pen = false; return; }
    d += `${pen ? "L" : "M"}${px(k).toFixed(1)},${y(v).toFixed(1)}`;
    pen = true;
  });
  return d;
}

function bandPath(lower, upper, px, y) {
  let d = "";
  let run = [];
  const flush = () => {
    if (run.length) {
      d += "M" + run.map((k) => `${px(k).toFixed(1)},${y(upper[k]).toFixed(1)}`).join("L");
      d += "L" + run.slice().reverse().map((k) => `${px(k).toFixed(1)},${y(lower[k]).toFixed(1)}`).join("L") + "Z";
    }
    run = [];
  };
  lower.forEach((v, k) => {
    if (v === null || upper[k] === null) flush();
    else run.push(k);
  });
  flush();
  return d;
}

function drawFirstMover(tl, lanes, x, laneTop, bottom, width) {
  const g = svg("g", { class: "mover" });
  const fm = tl.first_mover;
  if (!fm || fm.ts === null || fm.ts < tl.from || fm.ts > tl.to) return g;
  const i = Math.max(0, lanes.findIndex((l) => l.lane === fm.lane));
  const mx = x(fm.ts);
  g.setAttribute("data-role", "first-mover");
  g.setAttribute("data-source", fm.source);
  g.setAttribute("data-port", (fm.labels && fm.labels.port) || "");
  g.setAttribute("data-lane", fm.lane || "");
  g.setAttribute("data-domain", fm.domain || "");
  g.append(svg("line", { class: "mover-line", x1: mx, x2: mx, y1: 21, y2: bottom }));
  const cy = laneTop(i) + G.laneH / 2;
  g.append(svg("circle", { class: "mover-dot", cx: mx, cy, r: 6 }));
  const label = `① first mover · ${fm.where} · ${fm.metric} · ${hms(fm.ts)}`;
  const w = Math.min(label.length * 6.6 + 16, width - 20);
  const bx = Math.min(Math.max(mx - 8, G.left), width - w - 6);
  g.append(svg("rect", { class: "mover-box", x: bx, y: 2, width: w, height: 19, rx: 4 }));
  g.append(svg("text", { class: "mover-label", x: bx + 8, y: 15.5 }, label));
  g.append(svg("title", {}, `${fm.domain}: ${fm.reason}`));
  return g;
}

function timeTicks(from, to, plotW) {
  const span = to - from;
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];
  const want = Math.max(2, Math.floor(plotW / 95));
  const step = steps.find((s) => span / s <= want) || 7200;
  const out = [];
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) out.push(t);
  return out;
}

function bindPointer(overlay) {
  overlay.addEventListener("mousemove", (ev) => {
    const px = svgX(ev);
    state.hoverX = px;
    state.hoverY = svgY(ev);
    if (state.brush) {
      const a = Math.min(state.brush, px);
      state.brushRect.setAttribute("x", String(a));
      state.brushRect.setAttribute("width", String(Math.abs(px - state.brush)));
      state.brushRect.setAttribute("visibility", "visible");
    }
    hover(px);
  });
  overlay.addEventListener("mouseleave", () => {
    state.hoverX = null;
    state.brush = null;
    state.cursor.setAttribute("visibility", "hidden");
    state.brushRect.setAttribute("visibility", "hidden");
    $("#tip").hidden = true;
  });
  overlay.addEventListener("mousedown", (ev) => { state.brush = svgX(ev); });
  overlay.addEventListener("mouseup", (ev) => {
    const start = state.brush;
    state.brush = null;
    state.brushRect.setAttribute("visibility", "hidden");
    if (start === null) return;
    const end = svgX(ev);
    const t0 = timeAt(Math.min(start, end));
    const t1 = timeAt(Math.max(start, end));
    if (Math.abs(end - start) > 8 && t1 - t0 >= 5) {
      state.zoom = [Math.floor(t0), Math.ceil(t1)];
      refreshJob();
    } else {
      state.pickedTs = Math.round(timeAt(end));
      const input = document.querySelector("#note-form [name=ts]");
      input.value = new Date(state.pickedTs * 1000).toISOString().replace(".000Z", "Z");
      renderTimeline();
    }
  });
}

function svgY(ev) {
  const rect = $("#timeline").getBoundingClientRect();
  return ((ev.clientY - rect.top) / rect.height) * state.geom.height;
}

function svgX(ev) {
  const root = $("#timeline");
  const rect = root.getBoundingClientRect();
  return ((ev.clientX - rect.left) / rect.width) * state.geom.width;
}

function timeAt(px) {
  const g = state.geom;
  return state.timeline.from + ((px - G.left) / g.plotW) * g.span;
}

function hover(px) {
  const tl = state.timeline;
  const g = state.geom;
  if (!tl || !g) return;
  const k = Math.min(tl.ts.length - 1, Math.max(0, Math.floor((timeAt(px) - tl.from) / tl.step)));
  const cx = g.x(tl.ts[k] + tl.step / 2);
  state.cursor.setAttribute("x1", String(cx));
  state.cursor.setAttribute("x2", String(cx));
  state.cursor.setAttribute("visibility", "visible");
  const rows = tl.lanes.map((lane) => el("tr", {}, el("td", { text: lane.title }),
    el("td", { class: "v", text: fmt(lane.p50[k], lane.unit) }),
    el("td", { class: "v muted", text: lane.p99[k] === null ? "" : `p99 ${fmt(lane.p99[k], lane.unit)}` }),
    el("td", { class: "v muted", text: worstOf(lane)[k] === null ? "" : `${worstName(lane)} ${fmt(worstOf(lane)[k], lane.unit)}` })));
  const t0 = tl.ts[k];
  const near = (tl.anomalies || []).filter((m) => m.ts >= t0 && m.ts < t0 + tl.step);
  const tip = $("#tip");
  tip.replaceChildren(el("div", { class: "t", text: `${hms(t0)} UTC` }), el("table", {}, rows),
    ...near.slice(0, 4).map((m) => el("div", { class: "an", text: `▼ ${m.layer} ${m.where} ${m.metric}${m.entities > 1 ? ` (+${m.entities - 1})` : ""}` })));
  tip.hidden = false;  // visible before it is measured
  const wrap = $("#timeline-wrap");
  const scale = wrap.clientWidth / g.width;
  const tw = tip.offsetWidth;
  const th = tip.offsetHeight;
  let left = cx * scale + 14;
  if (left + tw > wrap.clientWidth) left = cx * scale - tw - 14;
  const my = (state.hoverY === null ? G.top : state.hoverY) * scale;
  const top = my < wrap.clientHeight / 2 ? my + 14 : my - th - 14;
  tip.style.left = `${Math.max(0, left)}px`;
  tip.style.top = `${Math.max(0, Math.min(top, wrap.clientHeight - th))}px`;
  // The lane labels on the left follow the cursor.
  document.querySelectorAll("#timeline .lane").forEach((node, i) => {
    const lane = tl.lanes[i];
    const v = node.querySelector("[data-role=lane-value]");
    if (v) v.textContent = visible(fmt(lane.p50[k], lane.unit));
  });
}

// -- the seven answers -----------------------------------------------------------------------------
function renderAnswers() {
  const d = state.diagnosis;
  const ol = $("#answers");
  ol.replaceChildren();
  if (!d) return;
  $("#answers-asof").textContent = visible(d.as_of ? `as of ${hms(d.as_of)} UTC` : "");
  for (const a of d.answers) {
    const hot = d.alert_id && (a.key === "change" || a.key === "domain");
    const ev = evidence(a);
    ol.append(el("li", { class: `answer${hot ? " hot" : ""}`, "data-key": a.key },
      el("span", { class: "n", text: a.n }),
      el("div", {}, el("div", { class: "q", text: a.question }),
        el("div", { class: "a", text: a.answer }),
        ev ? el("details", {}, el("summary", { text: "evidence" }), el("div", { class: "ev" }, ev)) : null)));
  }
}

function evidence(a) {
  const e = a.evidence || {};
  if (a.key === "change" && e.sequence) {
    const rows = e.sequence.map((s) => el("tr", {}, el("td", { class: "num", text: `+${s.offset_s}s` }),
      el("td", { text: s.layer }), el("td", { text: s.where }), el("td", { text: s.metric }),
      el("td", { class: "num", text: fmt(s.value) }), el("td", { class: "num muted", text: `p50 ${fmt(s.p50)}` }),
      el("td", { class: "num", text: s.entities > 1 ? `×${s.entities}` : "" })));
    const bars = (e.lanes || []).filter((l) => l.ratio !== null && l.before_p50).map((l) => ratioBar(l));
    return [el("table", { class: "seq" }, el("tbody", {}, rows)), bars.length ? el("div", { class: "bars" }, bars) : null];
  }
  if (a.key === "after_fix" && e.step_time) {
    const st = e.step_time;
    const max = Math.max(st.before_p50 || 0, st.during_p50 || 0, st.after_p50 || 0) || 1;
    const bar = (label, v, cls) => el("div", { class: "bar" }, el("span", { text: label }),
      el("span", { class: "track" }, barFill(v, max, cls)), el("span", { class: "v", text: fmt(v, "s") }));
    return el("div", { class: "bars" }, bar("before", st.before_p50, ""), bar("during", st.during_p50, "bad"),
      bar("after", st.after_p50, e.recovered ? "good" : "bad"));
  }
  if (a.key === "paths" && e.leaves) {
    const rows = e.leaves.map((l) => el("tr", {}, el("td", { text: l.switch }),
      el("td", { class: "muted", text: `ports ${l.ports.join(",")}` }), el("td", { text: `${l.nodes.length} nodes` }),
      el("td", { class: "muted", text: `→ ${l.spines.join(", ")}` })));
    return el("table", { class: "seq" }, el("tbody", {}, rows));
  }
  if (a.key === "domain" && e.order) {
    return el("div", {}, el("span", { class: `pill ${e.domain}`, text: e.domain }), " ",
      ...e.order.map((o) => el("span", { class: "chip", text: o })),
      ...(e.other_jobs || []).map((o) => el("div", { class: "muted", text: `also exposed: ${o.job_id} (${o.gpus} GPUs, ${o.relation})` })));
  }
  if (a.key === "storage" && e.pools) {
    return e.pools.map((p) => el("div", {}, el("b", { text: p.pool }), ` via ${p.switches.join(", ") || "–"}`,
      p.shared_with.length ? el("span", { class: "muted", text: ` · shared with ${p.shared_with.map((s) => s.job_id).join(", ")}` }) : null));
  }
  if (a.key === "gpus" && e.gpu_list) {
    return el("div", { class: "mono", text: `${e.gpu_list.slice(0, 12).join(" ")}${e.gpu_list.length > 12 ? ` … (${e.gpu_list.length})` : ""}` });
  }
  if (a.key === "nodes" && e.nodes) {
    return el("div", { class: "mono", text: e.nodes.join(" ") });
  }
  return null;
}

function barFill(v, max, cls) {
  const f = el("span", { class: `fill ${cls}` });
  f.style.width = `${Math.max(2, ((v || 0) / max) * 100)}%`;
  f.style.display = "block";
  return f;
}

function ratioBar(l) {
  const r = l.ratio;
  const shown = Math.min(Math.abs(Math.log2(r)) / 2, 1) * 100;
  const f = el("span", { class: `fill ${r > 1.2 || r < 0.8 ? "bad" : ""}` });
  f.style.width = `${Math.max(2, shown)}%`;
  f.style.display = "block";
  return el("div", { class: "bar" }, el("span", { text: l.lane.replace("_", " ") }), el("span", { class: "track" }, f),
    el("span", { class: "v", text: `×${r.toFixed(2)}` }));
}

// -- alerts, silences, annotations -----------------------------------------------------------------
function renderAlerts() {
  const tb = $("#alerts");
  tb.replaceChildren();
  if (!state.alerts.length) {
    tb.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "no alerts" })));
    return;
  }
  for (const a of state.alerts) {
    const fm = a.first_mover;
    const life = a.lifecycle.map((ev, k) => [k ? " → " : "", el("b", { text: ev.status }), ` ${hms(ev.at)}`]).flat();
    const opened = Date.parse(a.started_at) / 1000;
    const closed = a.resolved_at ? Date.parse(a.resolved_at) / 1000 : null;
    const tr = el("tr", { class: a.alert_id === state.alert ? "sel" : "", "data-alert": a.alert_id,
      onclick: () => selectJob(a.job_id, a.alert_id) },
      el("td", {}, el("span", { class: `pill ${a.status}`, text: a.status }), " ", el("span", { class: `pill ${a.severity}`, text: a.severity }),
        a.silenced_by.length ? el("div", { class: "muted small", title: a.silenced_by.join(", "), text: "silenced (not notified)" }) : null,
        !a.silenced_by.length && a.matching_silences.length ? el("div", { class: "muted small", text: "a silence matches it now" }) : null),
      el("td", {}, el("div", { text: a.job_id || "–" }), el("div", { class: "muted small", text: `${a.gpus} GPUs` })),
      el("td", {}, el("div", {}, el("span", { class: `pill ${a.domain}`, text: a.domain || "?" }), " ", fm ? fm.where : "no first mover"),
        el("div", { class: "muted small", text: fm ? `${fm.metric} at ${hms(fm.first_seen)}` : (a.summary || "") })),
      el("td", { class: "life" }, el("div", {}, `onset ${hms(a.started_at)}`), el("div", {}, ...life),
        closed ? el("div", { class: "muted", text: `lasted ${dur(closed - opened)}` }) : null),
      el("td", {}, el("a", { href: `/jobs/${encodeURIComponent(a.job_id)}/timeline?alert=${encodeURIComponent(a.alert_id)}`, text: "timeline",
        onclick: (ev) => { ev.preventDefault(); } })));
    tb.append(tr);
  }
}

function renderSilences() {
  const ul = $("#silences");
  ul.replaceChildren();
  const shown = state.silences.filter((s) => s.state !== "expired").concat(state.silences.filter((s) => s.state === "expired").slice(0, 3));
  if (!shown.length) ul.append(el("li", { class: "empty", text: "no silences" }));
  for (const s of shown) {
    ul.append(el("li", { "data-silence": s.silence_id },
      el("span", { class: `pill ${s.state}`, text: s.kind === "maintenance" ? `${s.state} · maint.` : s.state }),
      el("span", { class: "grow" }, ...Object.entries(s.matchers).map(([k, v]) => el("span", { class: "chip", text: `${k}=${v}` })),
        el("div", { class: "muted small", text: `${hms(s.starts_at)} → ${hms(s.ends_at)} UTC · ${s.created_by}: ${s.comment}` })),
      s.state !== "expired" ? el("button", { class: "btn danger", type: "button", text: "Expire",
        onclick: () => expireSilence(s.silence_id) }) : null));
  }
}

function renderAnnotations() {
  const ul = $("#annotations");
  ul.replaceChildren();
  if (!state.annotations.length) ul.append(el("li", { class: "empty", text: "no annotations for this job" }));
  for (const n of state.annotations.slice().reverse()) {
    ul.append(el("li", {}, el("span", { class: `pill ${n.kind === "fix" ? "ok" : "pending"}`, text: n.kind }),
      el("span", { class: "mono", text: `${hms(n.ts)}` }), el("span", { class: "grow", text: n.text }),
      n.author ? el("span", { class: "muted small", text: n.author }) : null));
  }
}

function writeMessage(text, ok) {
  const m = $("#write-msg");
  m.textContent = visible(text);
  m.className = `msg ${ok ? "ok" : "err"}`;
}

async function write(path, method, body) {
  if (!state.token) {
    writeMessage("Writes need the API token: set it with the token button (top right).", false);
    return null;
  }
  try {
    const out = await api(path, { method, body, write: true });
    writeMessage("saved", true);
    await refreshJob();
    return out;
  } catch (e) {
    writeMessage(e.message, false);
    return null;
  }
}

async function expireSilence(id) {
  await write(`/silences/${encodeURIComponent(id)}`, "DELETE");
}

function bindForms() {
  $("#silence-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const matchers = {};
    for (const part of f.matchers.value.trim().split(/\s+/)) {
      const [k, ...rest] = part.split("=");
      if (!k || !rest.length) { writeMessage(`matcher "${part}" is not name=value`, false); return; }
      matchers[k] = rest.join("=");
    }
    const out = await write("/silences", "POST", { matchers, kind: f.kind.value, duration_s: Number(f.duration.value),
      comment: f.comment.value, created_by: f.created_by.value });
    if (out) f.comment.value = "";
  });
  $("#note-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const body = { job_id: state.job, kind: f.kind.value, text: f.text.value };
    if (f.ts.value.trim()) body.ts = /^\d+(\.\d+)?$/.test(f.ts.value.trim()) ? Number(f.ts.value) : f.ts.value.trim();
    const out = await write("/annotations", "POST", body);
    if (out) { f.text.value = ""; }
  });
  $("#token-btn").addEventListener("click", () => {
    const t = prompt("API token for writes (kept in this tab only):", state.token);
    if (t === null) return;
    state.token = t.trim();
    sessionStorage.setItem("lockstep.token", state.token);
    updateTokenButton();
  });
  for (const b of document.querySelectorAll("[data-window]")) {
    b.addEventListener("click", () => {
      const w = b.dataset.window;
      state.zoom = null;
      state.windowMode = w === "incident" ? "incident" : Number(w);
      refreshJob();
    });
  }
  $("#alerts-all").addEventListener("change", (ev) => { state.alertsAll = ev.target.checked; refreshJob(); });
  $("#timeline").addEventListener("dblclick", () => { state.zoom = null; state.windowMode = "auto"; refreshJob(); });
  window.addEventListener("resize", () => renderTimeline());
}

function updateTokenButton() {
  $("#token-btn").textContent = visible(state.token ? "token: set" : "token: none");
}

async function main() {
  bindForms();
  updateTokenButton();
  await routeFromLocation();
  await refreshAll();
  setInterval(() => { if (!document.hidden) refreshAll(); }, REFRESH_MS);
}

main();
