// Renders window.ALLMEM_DATA (index.js: what the main table, the explorer list and the comparison's counts need) and
// loads a run's answers (chunks/<run>/answers.js) when the comparison lists it or a question is opened, and its details
// (chunks/<run>/d<n>.js) and packed contexts (chunks/<run>/c<p>.js) when a question is opened, by adding a <script>
// (file:// blocks fetch). Every text goes through textContent: nothing from a run is parsed as HTML.
"use strict";
const D = window.ALLMEM_DATA;
const Q = D.questions;  // shared rows: [id, dialogue, category, question, gold, evidence]
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined && text !== null) e.textContent = String(text); if (cls) e.className = cls; return e; }
function row(cells, tag) { const tr = el("tr"); for (const c of cells) { const td = c instanceof Node ? c : el(tag || "td", c); if (c instanceof Node) { const w = el(tag || "td"); w.appendChild(c); tr.appendChild(w); } else tr.appendChild(td); } return tr; }
function options(sel, values, any) { sel.replaceChildren(); if (any) sel.appendChild(new Option(any, "")); for (const v of values) sel.appendChild(new Option(v, v)); }
function fmt(x) { return x === null || x === undefined ? "–" : x.toFixed(1); }
// A run's questions as objects, built from index.js's columns once per run.
function questions(r) {
  if (!r._qs) r._qs = r.q.map((i, p) => ({ pos: p, id: Q[i][0], dialogue: Q[i][1], group: Q[i][2], question: Q[i][3], gold: Q[i][4], evidence: Q[i][5], correct: r.correct[p] === null ? null : r.correct[p] === 1, hit: r.hit[p] === null ? null : r.hit[p] === 1 }));
  return r._qs;
}
const cats = [...new Set(Q.map((q) => String(q[2])))].sort();
// On-demand parts: a part file calls allmemPart(its path, value); load(path) resolves with that value.
const parts = new Map();
window.allmemPart = (path, value) => { const p = parts.get(path); if (p) p.value = value; };
function load(path) {
  if (!parts.has(path)) {
    const p = {};
    p.promise = new Promise((resolve, reject) => {
      const s = document.createElement("script"); s.src = path;
      s.onload = () => ("value" in p ? resolve(p.value) : reject(new Error(`${path} did not hand over its data`)));
      s.onerror = () => reject(new Error(`could not load ${path}`));
      document.head.appendChild(s);
    });
    parts.set(path, p);
  }
  return parts.get(path).promise;
}
// The main table: cells computed by the site builder (mean and n; the bootstrap interval for all questions).
function drawTable() {
  const view = $("view").value, cat = $("tcat").value, metrics = D.runs.length ? D.runs[0].metrics : [];
  const t = el("table"); t.appendChild(row(["method", "n", ...metrics], "th"));
  for (const r of D.runs) {
    const [n, means] = r.views[`${view}|${cat}`] || [0, []];
    const cells = [r.label, n];
    metrics.forEach((m, j) => {
      if (view === "all" && !cat && r.table[m]) { const [mu, lo, hi] = r.table[m]; cells.push(`${fmt(mu)} [${fmt(lo)}, ${fmt(hi)}]`); }
      else cells.push(fmt(r.metrics.indexOf(m) >= 0 ? means[r.metrics.indexOf(m)] : null));
    });
    t.appendChild(row(cells));
  }
  $("tablebody").replaceChildren(t);
}
// A long list is drawn PAGE rows at a time (drawing every row of a full run made the first page slow); the
// counts above it are of all rows.
const PAGE = 200;
function paged(box, header, items, makeRow) {
  const t = el("table"); t.appendChild(row(header, "th"));
  const more = el("button"); let shown = 0;
  const next = () => {
    for (const it of items.slice(shown, shown + PAGE)) t.appendChild(makeRow(it));
    shown = Math.min(items.length, shown + PAGE);
    more.textContent = `show ${Math.min(PAGE, items.length - shown)} more (${shown} of ${items.length} shown)`;
    more.hidden = shown >= items.length;
  };
  more.addEventListener("click", next); next();
  box.replaceChildren(t, more);
}
function filtered() {
  const r = D.runs[+$("emethod").value]; if (!r) return [];
  const cat = $("ecat").value, c = $("ecorrect").value, h = $("ehit").value;
  return questions(r).filter((q) => (!cat || String(q.group) === cat) && (!c || q.correct === (c === "1")) && (!h || q.hit === (h === "1")));
}
function drawExplorer() {
  const qs = filtered(), r = D.runs[+$("emethod").value]; $("ecount").textContent = `${qs.length} questions`; $("ecorrect").title = r ? `correct by ${r.correct_by}` : "";
  paged($("elist"), ["id", "category", "question", "correct", "hit"], qs, (q) => { const tr = row([q.id, q.group, q.question, q.correct === null ? "?" : q.correct ? "yes" : "no", q.hit === null ? "?" : q.hit ? "yes" : "no"]); tr.className = "q " + (q.correct ? "ok" : "bad"); tr.dataset.qid = q.id; tr.addEventListener("click", () => detail(q.id)); return tr; });
}
// One run's block of an opened question: its answer at once, then its details and context as their parts arrive.
function runDetail(r, q) {
  const d = el("details"), summary = el("summary", `${r.label}: loading… (${q.correct ? "correct" : "wrong"}, retrieval ${q.hit ? "hit" : "miss"})`);
  const body = el("div", "loading…"); d.append(summary, body);
  load(r.answers).then((answers) => { summary.textContent = `${r.label}: ${answers[q.pos]} (${q.correct ? "correct" : "wrong"}, retrieval ${q.hit ? "hit" : "miss"})`; })
    .catch((e) => { summary.textContent = `${r.label}: ${e.message}`; });
  load(r.chunks[r.part[q.pos]]).then((part) => {
    const x = part[String(q.pos)]; body.replaceChildren();
    const ranked = el("p", "ranked: "); for (const id of x.ranked) { ranked.appendChild(el("span", id + " ", q.evidence.includes(id) ? "ev" : "")); } body.appendChild(ranked);
    body.appendChild(el("p", "latency ms: " + Object.entries(x.latency_ms).map(([k, v]) => `${k} ${(+v).toFixed(1)}`).join(", ")));
    if (x.context === null || x.context === undefined) { body.appendChild(el("p", "context: not recorded")); return null; }
    if (!x.context.length) { body.appendChild(el("p", "context: empty (nothing fit the budget)")); return null; }
    const pre = el("pre", "loading context…"); body.appendChild(pre);
    return load(x.context).then((lines) => { pre.replaceChildren(); for (const [line, ev] of lines) pre.appendChild(el("span", line + "\n", ev ? "ev" : "")); });
  }).catch((e) => body.appendChild(el("p", String(e.message), "bad")));
  return d;
}
function detail(qid) {
  const box = $("edetail"); box.replaceChildren();
  const first = D.runs.map((r) => questions(r).find((q) => q.id === qid)).find((q) => q);
  if (!first) return;
  box.appendChild(el("h3", `${qid}: ${first.question}`)); box.appendChild(el("p", `gold: ${first.gold}`)); box.appendChild(el("p", `evidence: ${first.evidence.join(", ")}`));
  for (const r of D.runs) { const q = questions(r).find((x) => x.id === qid); if (q) box.appendChild(runDetail(r, q)); }
}
function drawCompare() {
  const a = D.runs[+$("ca").value], b = D.runs[+$("cb").value]; if (!a || !b) return;
  const bq = new Map(questions(b).map((q) => [q.id, q]));
  const rows = questions(a).filter((q) => bq.has(q.id) && q.correct !== bq.get(q.id).correct && q.correct !== null && bq.get(q.id).correct !== null);
  const aw = rows.filter((q) => q.correct).length;
  $("ccount").textContent = `${a.label} right and ${b.label} wrong: ${aw}; ${b.label} right and ${a.label} wrong: ${rows.length - aw}`;
  const chosen = [$("ca").value, $("cb").value].join();
  $("clist").textContent = "loading answers…";
  Promise.all([load(a.answers), load(b.answers)]).then(([aa, ba]) => {
    if ([$("ca").value, $("cb").value].join() !== chosen) return;  // another pair was picked meanwhile
    paged($("clist"), ["id", "question", "gold", a.label, b.label], rows, (q) => { const tr = row([q.id, q.question, q.gold, aa[q.pos], ba[bq.get(q.id).pos]]); tr.className = "q " + (q.correct ? "ok" : "bad"); tr.addEventListener("click", () => { location.hash = "#explorer"; detail(q.id); }); return tr; });
  }).catch((e) => { $("clist").textContent = e.message; });
}
function init() {
  options($("tcat"), cats, "all"); options($("ecat"), cats, "all");
  for (const s of ["emethod", "ca", "cb"]) { $(s).replaceChildren(); D.runs.forEach((r, i) => $(s).appendChild(new Option(r.label, String(i)))); }
  if (D.runs.length > 1) $("cb").value = "1";
  for (const s of ["view", "tcat"]) $(s).addEventListener("change", drawTable);
  for (const s of ["emethod", "ecat", "ecorrect", "ehit"]) $(s).addEventListener("change", drawExplorer);
  for (const s of ["ca", "cb"]) $(s).addEventListener("change", drawCompare);
  // only figures drawn from the runs on this page (allmem/report/site/), each captioned with its runs
  for (const f of D.figures) { const fig = el("figure"); const img = el("img"); img.src = f.src; img.alt = f.src; fig.appendChild(img); fig.appendChild(el("figcaption", `drawn from ${f.runs.join(", ")}`)); $("figs").appendChild(fig); }
  if (!D.figures.length) $("figs").textContent = "none: no figure was drawn from these runs";
  drawTable(); drawExplorer(); drawCompare();
  if (location.hash.startsWith("#q=")) detail(decodeURIComponent(location.hash.slice(3)));  // a link to one question
}
init();
