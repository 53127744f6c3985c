// The fabric section of the page: the six fabric questions (GET /fabric/report, docs/fabric.md),
// one row per question, fabric and tier, with the first row of evidence. Self-contained: it only
// fills #fabric-report and refreshes every 15 s; every value is set as text (no HTML from data).
"use strict";

(function () {
  const REFRESH_MS = 15000;

  function figure(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return Number.isInteger(v) ? v.toLocaleString("en") : v.toPrecision(4);
    if (typeof v === "object") return Object.entries(v).map(([k, x]) => `${k} ${figure(x)}`).join(", ");
    return String(v);
  }

  function evidenceText(row) {
    if (!row) return "";
    return Object.entries(row).filter(([, v]) => !Array.isArray(v)).slice(0, 5)
      .map(([k, v]) => `${k} ${figure(v)}`).join(" · ");
  }

  // Why a group has no number, in words, from the figures the report gives beside it ("" if none
  // says): a bandwidth group's links without a line rate in the inventory, say, with the throughput
  // that was measured all the same.
  function unanswered(name, g) {
    if (g.value !== null && g.value !== undefined) return "";
    if (name === "bandwidth") {
      if (!g.links_measured) return "no transmit-byte counters from these links";
      if (g.links_without_line_rate) {
        const gbps = g.throughput_gbps_p99 === null ? "" : `; throughput p99 ${figure(g.throughput_gbps_p99)} Gb/s`;
        return `${figure(g.links_without_line_rate)} of ${figure(g.links_measured)} links without a line rate ` +
          `in the inventory (link speed_gbps, switch ports)${gbps}`;
      }
    }
    if (g.expected === 0) return "none expected by the inventory";
    return "";
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }

  async function refresh() {
    const body = document.getElementById("fabric-report");
    const asof = document.getElementById("fabric-asof");
    if (!body) return;
    let report;
    try {
      const resp = await fetch("/fabric/report", { headers: { Accept: "application/json" } });
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      report = await resp.json();
    } catch (err) {
      asof.textContent = `not available (${err.message})`;
      return;
    }
    asof.textContent = `as of ${String(report.now_iso || "").slice(0, 19).replace("T", " ")} UTC`;
    const rows = [];
    for (const [name, q] of Object.entries(report.questions)) {
      for (const g of q.groups) {
        const tr = document.createElement("tr");
        tr.title = q.question;
        cell(tr, name);
        cell(tr, g.fabric);
        cell(tr, g.tier);
        cell(tr, `${figure(g.value)} ${g.unit}`, "num");
        cell(tr, unanswered(name, g) || evidenceText(g.evidence[0]), "muted small");
        rows.push(tr);
      }
    }
    if (!rows.length) {
      const tr = document.createElement("tr");
      cell(tr, "no fabric counters or jobs yet", "muted");
      rows.push(tr);
    }
    body.replaceChildren(...rows);
  }

  window.LockstepFabric = { unanswered };  // (for the page's tests)

  document.addEventListener("DOMContentLoaded", () => {
    refresh();
    setInterval(refresh, REFRESH_MS);
  });
})();
