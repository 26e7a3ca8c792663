// The extra cuts of the problem browser (report.html of a run made with `nudge run --cuts`; the
// page carries this script only then). browser.js draws the selected problem into #detail; this
// adds, under the paper's arms, each extra cut of that problem with its arms side by side (the
// data: each experiment's `cuts`, stats/report/html/data.py), flips marked as browser.js marks them.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  function esc(text) {
    return String(text == null ? "" : text).replace(/[&<>"]/g, (c) => (
      { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  }
  // browser.js heads the detail with the row's id and seed: the same text finds the row here
  function heading(row) { return row[0] + (row[1] ? " (seed " + row[1] + ")" : ""); }
  function baseKind(row, base) {
    if (base === "B") return row[6] ? row[6][0] : null;
    return row[7][base] ? row[7][base][0] : null;
  }
  function mark(row, base, kind) {
    const b = baseKind(row, base);
    if ((kind !== "SELF" && kind !== "TOOL") || (b !== "SELF" && b !== "TOOL") || kind === b) return "";
    if (row[4] < 0) return '<span class="tag">flip (s unknown)</span>';
    const well = kind === (row[4] === 1 ? "SELF" : "TOOL");
    return well ? '<span class="tag well">well-targeted flip</span>' : '<span class="tag ill">ill-targeted flip</span>';
  }
  function grade(g) {
    return g === 1 ? '<span class="right">right</span>' : g === 0 ? '<span class="wrong">wrong</span>' : "not graded";
  }
  function render() {
    const pane = $("detail");
    const title = $("problem-id");
    if (!title || pane.querySelector(".cuts")) return;
    const exp = DATA.experiments[Number($("f-exp").value) || 0];
    if (!exp || !exp.cuts) return;
    const index = exp.rows.findIndex((row) => heading(row) === title.textContent);
    const cuts = index < 0 ? null : exp.cuts[index];
    if (!cuts || !cuts.length) return;
    const row = exp.rows[index];
    const parts = ['<div class="cuts"><h3>Extra cuts (' + cuts.length + ")</h3>"];
    for (const [at, relative, base, arms] of cuts) {
      const where = relative == null ? "" : ", relative position " + relative.toFixed(2);
      parts.push('<div class="cut" data-at="' + at + '" data-base="' + esc(base) + '"><h4>cut at token ' + at +
        " of " + esc(base) + where + '</h4><div class="arms">');
      for (const code of exp.conditions) {
        const arm = arms[code];
        if (!arm) continue;
        parts.push('<div class="arm" data-code="' + esc(code) + '"><h4>' + esc(exp.labels[code]) + " <small>" + esc(code) + "</small></h4>" +
          (exp.sentences[code] ? '<div class="sentence">“' + esc(exp.sentences[code]) + "”</div>" : "") +
          '<div><span class="tag ' + arm[0] + '">' + arm[0] + "</span>" + mark(row, base, arm[0]) + "</div><div>" + esc(arm[1]) +
          "</div><div>" + grade(arm[3]) + "</div><pre>" + esc(arm[2]) + "</pre></div>");
      }
      parts.push("</div></div>");
    }
    parts.push("</div>");
    pane.insertAdjacentHTML("beforeend", parts.join(""));
  }
  new MutationObserver(render).observe($("detail"), { childList: true });
  render();
})();
