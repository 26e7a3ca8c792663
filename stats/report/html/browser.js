// The problem browser of report.html. The data is one JSON blob (<script id="data">, built by
// stats/report/html/data.py); the list renders only the rows in view (a virtual list), and the
// detail pane only the selected problem, so the page stays fast at 1,000 problems x 17 conditions.
// A URL fragment drives it, for links and for headless tests:
//   #filter=exp:0,cond:doubt,action:TOOL,flip:well,unaided:wrong,q:p00&problem=p0003
// Every filter change writes the matching count and the time it took into #status (data-count,
// data-filter-ms; data-open-ms: from navigation start to the first render).
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const ROW = 26;
  const KINDS = ["SELF", "TOOL", "OTHER", "TRUNC"];
  const $ = (id) => document.getElementById(id);
  const state = { exp: 0, cond: "", action: "", flip: "", unaided: "", q: "", selected: null };
  let visible = [];

  function esc(text) {
    return String(text == null ? "" : text).replace(/[&<>"]/g, (c) => (
      { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  }
  function experiment() { return DATA.experiments[state.exp]; }
  function baseAction(exp, row, code) {
    const parent = exp.parents[code];
    if (parent === "B") return row[6] ? row[6][0] : null;
    if (parent && row[7][parent]) return row[7][parent][0];
    return null;
  }
  // flip of one arm: "" (no flip or not eligible), "well" or "ill" (stats/README.md, WT)
  function flip(exp, row, code) {
    const arm = row[7][code];
    const base = baseAction(exp, row, code);
    if (!arm || !base) return "";
    const a = arm[0];
    if ((a !== "SELF" && a !== "TOOL") || (base !== "SELF" && base !== "TOOL") || a === base) return "";
    if (row[4] < 0) return "flip";
    const ideal = row[4] === 1 ? "SELF" : "TOOL";
    return a === ideal ? "well" : "ill";
  }
  function matches(exp, row) {
    if (state.q && row[0].indexOf(state.q) < 0) return false;
    if (state.unaided === "right" && row[4] !== 1) return false;
    if (state.unaided === "wrong" && row[4] !== 0) return false;
    if (state.unaided === "unknown" && row[4] !== -1) return false;
    const codes = state.cond ? [state.cond] : exp.conditions;
    if (!state.action && !state.flip) return true;
    return codes.some((code) => {
      const arm = code === "B" ? row[6] : row[7][code];
      if (state.action && (!arm || arm[0] !== state.action)) return false;
      if (!state.flip) return true;
      const f = code === "B" ? "" : flip(exp, row, code);
      if (state.flip === "none") return f === "";
      if (state.flip === "any") return f !== "";
      return f === state.flip;
    });
  }
  function applyFilters() {
    const start = performance.now();
    const exp = experiment();
    visible = [];
    for (let i = 0; i < exp.rows.length; i++) if (matches(exp, exp.rows[i])) visible.push(i);
    $("spacer").style.height = visible.length * ROW + "px";
    $("list").scrollTop = 0;
    renderList();
    const ms = performance.now() - start;
    const status = $("status");
    status.dataset.count = visible.length;
    status.dataset.filterMs = ms.toFixed(2);
    status.textContent = visible.length + " of " + exp.rows.length + " problems (" + ms.toFixed(1) + " ms)";
  }
  function renderList() {
    const exp = experiment();
    const list = $("list");
    const first = Math.max(0, Math.floor(list.scrollTop / ROW) - 5);
    const last = Math.min(visible.length, first + Math.ceil(list.clientHeight / ROW) + 10);
    const html = [];
    for (let k = first; k < last; k++) {
      const row = exp.rows[visible[k]];
      const flips = exp.conditions.map((c) => flip(exp, row, c)).filter((f) => f === "well" || f === "ill");
      const well = flips.filter((f) => f === "well").length;
      const label = row[4] === 1 ? "right" : row[4] === 0 ? "wrong" : "?";
      html.push('<div class="row' + (visible[k] === state.selected ? " selected" : "") +
        '" data-index="' + visible[k] + '" style="top:' + k * ROW + 'px">' + esc(row[0]) +
        (row[1] ? " s" + row[1] : "") + ' <span class="' + label + '">' + label + "</span> B " +
        esc(row[6] ? row[6][0] : "–") + " · flips " + flips.length + " (" + well + " well) · " +
        esc(row[2]).slice(0, 80) + "</div>");
    }
    $("rows").innerHTML = html.join("");
  }
  function grade(g) {
    return g === 1 ? '<span class="right">right</span>' : g === 0 ? '<span class="wrong">wrong</span>' : "not graded";
  }
  function renderDetail() {
    const exp = experiment();
    const pane = $("detail");
    if (state.selected == null) { pane.innerHTML = "<p>Select a problem.</p>"; return; }
    const row = exp.rows[state.selected];
    const b = row[6];
    const parts = ['<h3 id="problem-id">' + esc(row[0]) + (row[1] ? " (seed " + row[1] + ")" : "") + "</h3>",
      "<p><b>Question.</b> " + esc(row[2] || "(not recorded by this run)") + "</p>",
      "<p><b>Gold.</b> " + esc(row[3]) + "</p>",
      "<p><b>Unaided (NT).</b> " + esc(row[5]) + " — " + grade(row[4]) + "</p>"];
    if (b) {
      parts.push("<p><b>B</b> <span class=\"tag " + b[0] + "\">" + b[0] + "</span>" + esc(b[1]) + " — " + grade(b[4]) + "</p>");
      parts.push("<details open><summary>B's reasoning up to the cut</summary><pre>" + esc(b[2]) + "</pre></details>");
    } else {
      parts.push("<p><b>B</b>: no record.</p>");
    }
    parts.push('<div class="arms">');
    for (const code of exp.conditions) {
      const arm = row[7][code];
      if (!arm) continue;
      const f = flip(exp, row, code);
      const mark = f === "well" ? '<span class="tag well">well-targeted flip</span>' :
        f === "ill" ? '<span class="tag ill">ill-targeted flip</span>' : f === "flip" ? '<span class="tag">flip (s unknown)</span>' : "";
      parts.push('<div class="arm" data-code="' + code + '"><h4>' + esc(exp.labels[code]) + " <small>" + code + "</small></h4>" +
        (exp.sentences[code] ? '<div class="sentence">“' + esc(exp.sentences[code]) + "”</div>" : "") +
        '<div><span class="tag ' + arm[0] + '">' + arm[0] + "</span>" + mark + "</div><div>" + esc(arm[1]) + "</div>" +
        "<div>" + grade(arm[3]) + "</div><pre>" + esc(arm[2]) + "</pre></div>");
    }
    parts.push("</div>");
    pane.innerHTML = parts.join("");
  }
  function select(index) { state.selected = index; renderList(); renderDetail(); }
  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    const filter = params.get("filter");
    Object.assign(state, { cond: "", action: "", flip: "", unaided: "", q: "" });
    if (filter) for (const part of filter.split(",")) {
      const at = part.indexOf(":");
      const key = part.slice(0, at), value = part.slice(at + 1);
      if (key === "exp") state.exp = Math.min(Number(value) || 0, DATA.experiments.length - 1);
      else if (key in state) state[key] = value;
    }
    for (const key of ["exp", "cond", "action", "flip", "unaided", "q"]) $("f-" + key).value = state[key];
    fillConditions();
    applyFilters();
    const problem = params.get("problem");
    const rows = experiment().rows;
    const found = problem == null ? (visible.length ? visible[0] : null) : rows.findIndex((r) => r[0] === problem);
    select(found === -1 ? null : found);
  }
  function fillConditions() {
    const exp = experiment();
    $("f-cond").innerHTML = '<option value="">any condition</option><option value="B">B</option>' +
      exp.conditions.map((c) => '<option value="' + c + '">' + esc(exp.labels[c]) + " (" + c + ")</option>").join("");
    $("f-cond").value = state.cond;
  }
  function init() {
    if (!DATA.experiments.length) {
      $("browser").innerHTML = "<p>No run directory was found, so there are no records to browse.</p>";
      return;
    }
    $("f-exp").innerHTML = DATA.experiments.map((e, i) => '<option value="' + i + '">' + esc(e.name) + "</option>").join("");
    $("f-action").innerHTML = '<option value="">any action</option>' + KINDS.map((k) => "<option>" + k + "</option>").join("");
    for (const key of ["exp", "cond", "action", "flip", "unaided", "q"]) {
      $("f-" + key).addEventListener(key === "q" ? "input" : "change", (event) => {
        state[key] = key === "exp" ? Number(event.target.value) : event.target.value;
        if (key === "exp") { fillConditions(); state.cond = ""; }
        applyFilters();
        select(visible.length ? visible[0] : null);
      });
    }
    $("list").addEventListener("scroll", renderList);
    $("rows").addEventListener("click", (event) => {
      const row = event.target.closest(".row");
      if (row) select(Number(row.dataset.index));
    });
    window.addEventListener("hashchange", readHash);
    readHash();
    $("status").dataset.openMs = performance.now().toFixed(1);
  }
  init();
})();
