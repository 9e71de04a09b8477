// Renders window.ALLMEM_DATA (data.js). Every text goes through textContent: nothing from a run is parsed as HTML.
"use strict";
const D = window.ALLMEM_DATA;
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; }
function row(cells, tag) { const tr = el("tr"); for (const c of cells) { const td = c instanceof Node ? c : el(tag || "td", c); if (c instanceof Node) { const w = el(tag || "td"); w.appendChild(c); tr.appendChild(w); } else tr.appendChild(td); } return tr; }
function options(sel, values, any) { sel.replaceChildren(); if (any) sel.appendChild(new Option(any, "")); for (const v of values) sel.appendChild(new Option(v, v)); }
function fmt(x) { return x === null || x === undefined ? "–" : x.toFixed(1); }
const cats = [...new Set(D.runs.flatMap((r) => r.questions.map((q) => String(q.group))))].sort();
// Percentile bootstrap in the browser would differ from the Python one; subsets show mean and n only.
function mean(xs) { const v = xs.filter((x) => x !== null && x !== undefined); return v.length ? [100 * v.reduce((a, b) => a + b, 0) / v.length, v.length] : [null, 0]; }
function drawTable() {
  const view = $("view").value, cat = $("tcat").value, metrics = D.runs.length ? D.runs[0].metrics : [];
  const t = el("table"); t.appendChild(row(["method", "n", ...metrics], "th"));
  for (const r of D.runs) {
    const qs = r.questions.filter((q) => (view === "all" || q.split === view) && (!cat || String(q.group) === cat));
    const cells = [r.label, qs.length];
    for (const m of metrics) {
      if (view === "all" && !cat && r.table[m]) { const [mu, lo, hi] = r.table[m]; cells.push(`${fmt(mu)} [${fmt(lo)}, ${fmt(hi)}]`); }
      else cells.push(fmt(mean(qs.map((q) => q.scores[m]))[0]));
    }
    t.appendChild(row(cells));
  }
  $("tablebody").replaceChildren(t);
}
function filtered() {
  const r = D.runs[+$("emethod").value]; if (!r) return [];
  const cat = $("ecat").value, c = $("ecorrect").value, h = $("ehit").value;
  return r.questions.filter((q) => (!cat || String(q.group) === cat) && (!c || q.correct === (c === "1")) && (!h || q.hit === (h === "1")));
}
function drawExplorer() {
  const qs = filtered(), r = D.runs[+$("emethod").value]; $("ecount").textContent = `${qs.length} questions`; $("ecorrect").title = r ? `correct by ${r.correct_by}` : "";
  const t = el("table"); t.appendChild(row(["id", "category", "question", "correct", "hit"], "th"));
  for (const q of qs) { const tr = row([q.id, q.group, q.question, q.correct === null ? "?" : q.correct ? "yes" : "no", q.hit === null ? "?" : q.hit ? "yes" : "no"]); tr.className = "q " + (q.correct ? "ok" : "bad"); tr.dataset.qid = q.id; tr.addEventListener("click", () => detail(q.id)); t.appendChild(tr); }
  $("elist").replaceChildren(t);
}
function detail(qid) {
  const box = $("edetail"); box.replaceChildren();
  const first = D.runs.map((r) => r.questions.find((q) => q.id === qid)).find((q) => q);
  if (!first) return;
  box.appendChild(el("h3", `${qid}: ${first.question}`)); box.appendChild(el("p", `gold: ${first.gold}`)); box.appendChild(el("p", `evidence: ${first.evidence.join(", ")}`));
  for (const r of D.runs) {
    const q = r.questions.find((x) => x.id === qid); if (!q) continue;
    const d = el("details"); d.appendChild(el("summary", `${r.label}: ${q.answer} (${q.correct ? "correct" : "wrong"}, retrieval ${q.hit ? "hit" : "miss"})`));
    const ranked = el("p", "ranked: "); for (const id of q.ranked) { ranked.appendChild(el("span", id + " ", q.evidence.includes(id) ? "ev" : "")); } d.appendChild(ranked);
    d.appendChild(el("p", "latency ms: " + Object.entries(q.latency_ms).map(([k, v]) => `${k} ${(+v).toFixed(1)}`).join(", ")));
    if (q.context === null || q.context === undefined) d.appendChild(el("p", "context: not recorded"));
    else if (!q.context.length) d.appendChild(el("p", "context: empty (nothing fit the budget)"));
    else { const pre = el("pre"); for (const [line, ev] of q.context) pre.appendChild(el("span", line + "\n", ev ? "ev" : "")); d.appendChild(pre); }
    box.appendChild(d);
  }
}
function drawCompare() {
  const a = D.runs[+$("ca").value], b = D.runs[+$("cb").value]; if (!a || !b) return;
  const bq = new Map(b.questions.map((q) => [q.id, q]));
  const rows = a.questions.filter((q) => bq.has(q.id) && q.correct !== bq.get(q.id).correct && q.correct !== null && bq.get(q.id).correct !== null);
  const aw = rows.filter((q) => q.correct).length;
  $("ccount").textContent = `${a.label} right and ${b.label} wrong: ${aw}; ${b.label} right and ${a.label} wrong: ${rows.length - aw}`;
  const t = el("table"); t.appendChild(row(["id", "question", "gold", a.label, b.label], "th"));
  for (const q of rows) { const tr = row([q.id, q.question, q.gold, q.answer, bq.get(q.id).answer]); tr.className = "q " + (q.correct ? "ok" : "bad"); tr.addEventListener("click", () => { location.hash = "#explorer"; detail(q.id); }); t.appendChild(tr); }
  $("clist").replaceChildren(t);
}
function init() {
  options($("tcat"), cats, "all"); options($("ecat"), cats, "all");
  for (const s of ["emethod", "ca", "cb"]) { $(s).replaceChildren(); D.runs.forEach((r, i) => $(s).appendChild(new Option(r.label, String(i)))); }
  if (D.runs.length > 1) $("cb").value = "1";
  for (const s of ["view", "tcat"]) $(s).addEventListener("change", drawTable);
  for (const s of ["emethod", "ecat", "ecorrect", "ehit"]) $(s).addEventListener("change", drawExplorer);
  for (const s of ["ca", "cb"]) $(s).addEventListener("change", drawCompare);
  for (const f of D.figures) { const img = el("img"); img.src = f; img.alt = f; $("figs").appendChild(img); }
  if (!D.figures.length) $("figs").textContent = "no figures found";
  drawTable(); drawExplorer(); drawCompare();
  if (location.hash.startsWith("#q=")) detail(decodeURIComponent(location.hash.slice(3)));  // a link to one question
}
init();
