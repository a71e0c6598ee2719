// Fairlane fleet dashboard: draws the frames of /dashboard/events (server-sent events).
// The first frame holds every node row; later frames only the rows that changed.
// Strings from the server always go through textContent, never innerHTML.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const rows = new Map();   // node -> {el, cells: [cell]}
  const byUuid = new Map(); // uuid -> {node, cell, el}
  let threshold = 0.65;
  let selected = null;      // uuid
  let chart = null;
  let history = null;       // {uuid, ts: [], score: []} of the selected GPU

  function colour(score) { return `hsl(${Math.round(Math.max(0, Math.min(1, score)) * 120)}, 70%, 45%)`; }
  function cls(state) { return state.replace(/[^a-z]+/g, "-"); }
  function clock(ms) { return ms == null ? "" : new Date(ms).toLocaleTimeString(); }
  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text != null) e.textContent = String(text);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  function stateText(c) { return c.st === "cooling" && c.r ? `cooling until ${clock(c.r)}` : c.st; }
  // A GPU fractional placements share (issue 29): c.sh = [share, tenants, memory MiB, GPU's MiB].
  function shareText(c) {
    if (!c.sh) return "";
    const [share, tenants, memory, total] = c.sh;
    return `${share.toFixed(2)} shared, ${tenants} tenant${tenants === 1 ? "" : "s"}, memory ${memory} of ${total} MiB`;
  }
  function placementGpus(p) { return p.share == null ? p.gpus : `${p.share.toFixed(2)} of 1 (${p.memory_mib} MiB)`; }
  function tooltip(node, c) {
    const parts = Object.entries(c.c).map(([k, v]) => `${k}: ${v == null ? "n/a" : v.toFixed(2)}`);
    const learned = Object.entries(c.ls || {}).map(
      ([k, [speed, reports, confidence]]) => `learned ${k}: ${speed.toFixed(3)} (${reports} reports, confidence ${confidence.toFixed(2)})`);
    const shared = c.sh ? [shareText(c)] : [];
    return `${node} GPU ${c.i} (${c.m})\nscore ${c.s.toFixed(3)}, ${stateText(c)}\n${[...shared, ...parts, ...learned].join("\n")}`;
  }

  function drawRow(node, cells) {
    let row = rows.get(node);
    if (!row) {
      const e = el("div", null, { class: "node", "data-node": node });
      e.appendChild(el("span", node, { class: "name", title: node }));
      row = { el: e, cells: [] };
      rows.set(node, row);
      insertSorted(node, e);
    }
    row.el.querySelectorAll(".cell").forEach((c) => c.remove());
    for (const c of cells) {
      const e = el("span", null, {
        class: `cell ${cls(c.st)}${c.sh ? " shared" : ""}${c.u === selected ? " selected" : ""}`,
        "data-uuid": c.u, "data-state": c.st, "data-score": c.s, title: tooltip(node, c),
      });
      e.style.background = colour(c.s);
      if (c.sh) {
        // The used share fills the tile from the bottom; the rest shows the score's colour.
        e.dataset.share = c.sh[0];
        e.dataset.tenants = c.sh[1];
        const fill = el("span", null, { class: "share-fill" });
        fill.style.height = `${Math.round(c.sh[0] * 100)}%`;
        e.appendChild(fill);
      }
      e.addEventListener("click", () => select(c.u));
      row.el.appendChild(e);
      byUuid.set(c.u, { node, cell: c, el: e });
    }
    row.cells = cells;
    if (cells.some((c) => c.u === selected)) showDetail(true);
  }
  function insertSorted(node, e) {
    const fleet = $("fleet");
    for (const other of fleet.children) {
      if (other.dataset.node > node) { fleet.insertBefore(e, other); return; }
    }
    fleet.appendChild(e);
  }
  function removeRow(node) {
    const row = rows.get(node);
    if (!row) return;
    row.cells.forEach((c) => byUuid.delete(c.u));
    row.el.remove();
    rows.delete(node);
  }

  function summary() {
    const counts = {};
    let gpus = 0;
    let shared = 0;
    for (const { cell } of byUuid.values()) {
      counts[cell.st] = (counts[cell.st] || 0) + 1;
      gpus++;
      if (cell.sh) shared++;
    }
    const text = Object.entries(counts).sort().map(([k, v]) => `${v} ${k}`).join(", ") + (shared ? ` (${shared} shared)` : "");
    $("summary").textContent = `${rows.size} nodes, ${gpus} GPUs: ${text} (threshold ${threshold})`;
  }

  async function select(uuid) {
    selected = uuid;
    document.querySelectorAll(".cell.selected").forEach((e) => e.classList.remove("selected"));
    const found = byUuid.get(uuid);
    if (found) found.el.classList.add("selected");
    history = { uuid, ts: [], score: [] };
    const answer = await fetch(`/dashboard/gpus/${encodeURIComponent(uuid)}/history`, { credentials: "same-origin" });
    if (answer.ok && selected === uuid) {
      const body = await answer.json();
      history = { uuid, ts: body.ts_ms.map((t) => t / 1000), score: body.score };
    }
    showDetail(false);
  }

  function showDetail(live) {
    const found = byUuid.get(selected);
    if (!found) return;
    const { node, cell: c } = found;
    $("detail").hidden = false;
    $("detail-title").textContent = `${node} · GPU ${c.i} · ${c.m}`;
    $("detail-state").textContent = `score ${c.s.toFixed(3)} (capacity ${c.e}), ${stateText(c)} — ${c.u}`;
    $("detail-share").hidden = !c.sh;
    $("detail-share").textContent = shareText(c);
    const table = $("detail-components");
    table.replaceChildren();
    for (const [k, v] of Object.entries(c.c)) {
      const tr = el("tr");
      tr.appendChild(el("td", k));
      tr.appendChild(el("td", v == null ? "n/a" : v.toFixed(3)));
      table.appendChild(tr);
    }
    const speeds = $("detail-speeds");
    speeds.replaceChildren();
    const learned = Object.entries(c.ls || {});
    speeds.hidden = learned.length === 0;
    if (learned.length) {
      const head = el("tr");
      for (const h of ["job class", "learned speed", "reports", "confidence"]) head.appendChild(el("th", h));
      speeds.appendChild(head);
    }
    for (const [k, [speed, reports, confidence]] of learned) {
      const tr = el("tr");
      for (const v of [k, speed.toFixed(3), String(reports), confidence.toFixed(2)]) tr.appendChild(el("td", v));
      speeds.appendChild(tr);
    }
    if (live && history && history.uuid === selected) {
      const now = Date.now() / 1000;
      if (history.score[history.score.length - 1] !== c.s) { history.ts.push(now); history.score.push(c.s); }
    }
    drawChart();
  }

  function drawChart() {
    const data = [history.ts, history.score, history.ts.map(() => threshold)];
    if (chart) { chart.setData(data); return; }
    chart = new uPlot({
      width: 320, height: 160, scales: { y: { range: [0, 1] } },
      series: [{}, { label: "score", stroke: "#2e7d32", width: 2 }, { label: "threshold", stroke: "#e53935", dash: [4, 4] }],
    }, data, $("chart"));
  }

  function table(id, items, cols) {
    const body = $(id).querySelector("tbody");
    body.replaceChildren();
    for (const p of items) {
      const tr = el("tr", null, { "data-placement-id": p.id, "data-job": p.job });
      cols(p).forEach((v) => tr.appendChild(el("td", v)));
      body.appendChild(tr);
    }
  }

  function apply(frame) {
    if (frame.full) {
      threshold = frame.threshold;
      for (const node of [...rows.keys()]) if (!(node in frame.rows)) removeRow(node);
    }
    for (const [node, cells] of Object.entries(frame.rows || {})) drawRow(node, cells);
    (frame.removed || []).forEach(removeRow);
    if (frame.placements) {
      $("placements-count").textContent = `${frame.placements.length} live`;
      table("placements", frame.placements, (p) => [p.job + (p.idle ? " (idle)" : ""), p.ns, placementGpus(p), Object.keys(p.nodes).join(", "), clock(p.created_ms), clock(p.lease_ms)]);
      // An idle placement (its GPUs near-idle for the idle window): its row and GPUs marked.
      byUuid.forEach((c) => c.el.classList.remove("idle"));
      for (const p of frame.placements) {
        $("placements").querySelector(`tr[data-placement-id="${p.id}"]`).classList.toggle("idle", p.idle);
        for (const uuids of Object.values(p.nodes)) uuids.forEach((u) => {
          const found = byUuid.get(u);
          if (!found) return;
          found.el.title += `\nplacement ${p.job} (${p.ns})${p.share == null ? "" : `, share ${p.share.toFixed(2)}`}${p.idle ? ", idle" : ""}`;
          if (p.idle) found.el.classList.add("idle");
        });
      }
    }
    if (frame.pending) {
      $("pending-count").textContent = `${frame.pending.length} waiting`;
      table("pending", frame.pending, (p) => [p.job, p.ns, clock(p.created_ms)]);
    }
    if (frame.counters) {
      const t = $("counters");
      t.replaceChildren();
      for (const [k, v] of Object.entries(frame.counters)) {
        const tr = el("tr");
        tr.appendChild(el("td", k));
        tr.appendChild(el("td", v, { "data-counter": k }));
        t.appendChild(tr);
      }
    }
    summary();
    document.body.dataset.seq = frame.seq;
  }

  function connect() {
    const source = new EventSource("/dashboard/events");
    source.addEventListener("frame", (e) => {
      $("live").textContent = "live";
      $("live").classList.remove("off");
      apply(JSON.parse(e.data));
    });
    source.onerror = () => { $("live").textContent = "reconnecting"; $("live").classList.add("off"); };
  }

  async function start() {
    const who = await fetch("/dashboard/session", { credentials: "same-origin" });
    if (who.status === 401) {
      $("login").hidden = false;
      $("login").addEventListener("submit", async (e) => {
        e.preventDefault();
        const answer = await fetch("/dashboard/session", {
          method: "POST", credentials: "same-origin",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ token: $("token").value }),
        });
        if (answer.ok) location.reload(); else $("login-error").textContent = "unknown token";
      });
      return;
    }
    $("main").hidden = false;
    connect();
  }
  start();
})();
