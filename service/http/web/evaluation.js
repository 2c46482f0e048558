// The 评测 tab: upload a question set for the selected knowledge base, run an evaluation in the
// background, and show its test table, intervals, plot and misses (each miss opens the comparison
// view of its question). Uses kbs.js (`selectedKb`, `kbHeaders`); every server text goes in as text.
"use strict";

const EVAL_MODES = ["vector", "bm25", "bigram", "standard", "hybrid"];
const EVAL_METRICS = ["R@1", "R@5", "R@10", "MRR@10", "nDCG@10"];
const EVAL_MODE_NAMES = { vector: "仅向量", bm25: "BM25（jieba 词）", bigram: "BM25（二字词）", standard: "单字", hybrid: "混合检索" };
const FUSION_ORIGINS = { default: "服务默认", evaluation: "评测选出", pinned: "手动固定" };

const evalEl = (id) => document.getElementById(id);

function evalNode(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

function evalStatus(message, bad = false) {
  evalEl("eval-status").textContent = message;
  evalEl("eval-status").className = bad ? "error" : "";
}

async function evalError(response, doing = "evaluate") {
  return friendlyError(response, doing);
}

function evalBase() {
  return selectedKb();
}

// --- tabs ---------------------------------------------------------------------------------

function showTab(name) {
  const evaluation = name === "evaluation";
  document.querySelector("body > main:not(#evaluation-panel)").hidden = evaluation;
  evalEl("evaluation-panel").hidden = !evaluation;
  evalEl("tab-ask").setAttribute("aria-selected", String(!evaluation));
  evalEl("tab-evaluation").setAttribute("aria-selected", String(evaluation));
  if (evaluation) refreshEvaluation();
}

// --- question set and fusion --------------------------------------------------------------

// Lines about documents not in the base are skipped and counted; only the lines that are wrong are listed.
function showQuestions(summary) {
  const generated = summary.generated ? `，其中模型生成 ${summary.generated} 条` : "";
  const skipped = summary.bad_lines.filter((bad) => bad.absent);
  const wrong = summary.bad_lines.filter((bad) => !bad.absent);
  evalEl("eval-questions").textContent =
    `问题集：${summary.lines} 行，可用 ${summary.usable} 条（开发集 ${summary.dev} / 测试集 ${summary.test}${generated}）` +
    (wrong.length ? `，格式有误 ${wrong.length} 行（见下，请改正后重新上传）` : "");
  evalEl("eval-skipped").textContent = skipped.length
    ? `跳过 ${skipped.length} 条：它们依据的原文不在本知识库中（例如知识库只收了部分章节），评测时不计。` : "";
  evalEl("eval-skipped").hidden = !skipped.length;
  evalEl("eval-bad-lines").replaceChildren(
    ...wrong.map((bad) => evalNode("li", {}, `第 ${bad.line} 行格式有误：请确认它是一个含 question 和 evidence 的 JSON 对象`, evalNode("code", {}, bad.text))),
  );
}

// A two-line sample set, from the base's own example questions when it has them.
function sampleQuestions() {
  const lines = [
    { question: "这里写一个问题？", evidence: "这里抄下知识库中回答它的原文片段" },
    { question: "另一个问题？", evidence: "另一段原文", split: "test" },
  ];
  const blob = new Blob([lines.map((line) => JSON.stringify(line)).join("\n") + "\n"], { type: "application/jsonl" });
  evalEl("eval-sample").href = URL.createObjectURL(blob);
}

async function draftQuestions() {
  const kb = evalBase();
  if (!kb) { evalStatus("请先选择知识库", true); return; }
  evalEl("eval-draft").disabled = true;
  evalStatus("大模型正在起草问题…");
  try {
    const response = await fetch(`kbs/${encodeURIComponent(kb)}/questions/draft`, { method: "POST", headers: kbHeaders(), body: JSON.stringify({ count: 10 }) });
    if (!response.ok) { evalStatus(await evalError(response, "draft"), true); return; }
    const { drafted, questions } = await response.json();
    if (questions) showQuestions(questions);
    evalStatus(`已起草 ${drafted.length} 个问题并加入问题集`);
  } finally {
    evalEl("eval-draft").disabled = false;
  }
}

async function showFusion() {
  const kb = evalBase();
  if (!kb) return;
  // The base shows the fusion its hybrid search uses, its own or the default (GET …/fusion: its own only).
  const response = await fetch(`kbs/${encodeURIComponent(kb)}`, { headers: kbHeaders() });
  if (!response.ok) { evalEl("eval-fusion-text").textContent = await evalError(response, "questions"); return; }
  const { fusion: effective, calibration } = await response.json();
  showCalibration(calibration);
  const weights = Object.entries(effective.weights).map(([list, w]) => `${list}×${w}`).join("，");
  evalEl("eval-fusion-text").textContent =
    `当前融合：${effective.method}，深度 ${effective.depth}，列表 ${effective.lists.join("+")}${weights ? `，权重 ${weights}` : ""}` +
    `（${FUSION_ORIGINS[effective.origin] || effective.origin}）`;
  evalEl("eval-reset").hidden = effective.origin === "default";
}

// --- calibration: the base's own thresholds for refusing (extractive answers) and its alias weight ---

function calibrationFigures(figures) {
  return `平衡准确率 ${figures.balanced_accuracy.toFixed(3)}（可回答的答出 ${figures.answerable_answered.toFixed(3)}，应拒答的拒绝 ${figures.refused.toFixed(3)}）`;
}

function calibrationBasis(c) {
  const answerable = c.source === "questions" ? `问题集 ${c.questions} 题` : `由原文自动生成的可回答问题 ${c.answerable} 个`;
  const refuse = [c.ratings ? `评分中确认的知识缺口 ${c.ratings} 个` : "", c.negative ? `自动生成的应拒答问题 ${c.negative} 个` : ""];
  return `依据：${answerable}，${refuse.filter(Boolean).join("、")}`;
}

// Shown to every reader (the values); what they were chosen on and how they fared to the base's admins.
function showCalibration(c) {
  evalEl("eval-calibration-reset").hidden = !c;
  if (!c) { evalEl("eval-calibration-text").textContent = "拒答阈值：服务默认（未校准）"; return; }
  const aliases = c.alias_weight === 0 ? "别名扩展：关闭" : "别名扩展：服务默认";
  const values = `拒答阈值（已校准）：相似度 ≥ ${c.min_similarity}，关键词覆盖 ≥ ${c.min_coverage}，${aliases}`;
  const provenance = c.at_defaults && c.at_chosen
    ? `。${calibrationBasis(c)}；默认值下${calibrationFigures(c.at_defaults)}，校准后${calibrationFigures(c.at_chosen)}；${c.note}（${c.chosen_at.slice(0, 16).replace("T", " ")}）`
    : "";
  evalEl("eval-calibration-text").textContent = values + provenance;
}

async function calibrate(reset = false) {
  const kb = evalBase();
  if (!kb) { evalStatus("请先选择知识库", true); return; }
  const button = evalEl(reset ? "eval-calibration-reset" : "eval-calibrate");
  button.disabled = true;
  if (!reset) evalStatus("正在校准：逐个回答知识库自己的问题，约需一分钟…");
  try {
    const response = await fetch(`kbs/${encodeURIComponent(kb)}/calibration`, { method: reset ? "DELETE" : "POST", headers: kbHeaders(), body: reset ? undefined : "{}" });
    if (!response.ok) { evalStatus(await evalError(response), true); return; }
    showCalibration((await response.json()).calibration);
    evalStatus(reset ? "已恢复默认阈值" : "校准完成，该知识库的抽取式回答已使用新阈值");
  } finally {
    button.disabled = false;
  }
}

async function refreshEvaluation() {
  const kb = evalBase();
  evalEl("eval-base").textContent = kb || "（未选择）";
  evalEl("eval-questions").textContent = "";
  evalEl("eval-bad-lines").replaceChildren();
  evalEl("eval-skipped").hidden = true;
  if (!kb) return;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/questions`, { headers: kbHeaders() });
  if (response.ok) showQuestions(await response.json());
  else if (response.status === 404) evalEl("eval-questions").textContent = NO_QUESTION_SET;
  else evalEl("eval-questions").textContent = await evalError(response, "questions");
  await showFusion();
}

async function uploadQuestions() {
  const file = evalEl("eval-file").files[0];
  const kb = evalBase();
  if (!file || !kb) { evalStatus("请先选择知识库和问题集文件", true); return; }
  evalEl("eval-upload").disabled = true;
  try {
    const text = await file.text();
    const response = await fetch(`kbs/${encodeURIComponent(kb)}/questions`, { method: "PUT", headers: kbHeaders(), body: JSON.stringify({ text }) });
    if (!response.ok) { evalStatus(await evalError(response, "questions"), true); return; }
    showQuestions(await response.json());
    evalStatus("问题集已保存");
  } finally {
    evalEl("eval-upload").disabled = false;
  }
}

async function resetFusion() {
  const kb = evalBase();
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/fusion`, { method: "DELETE", headers: kbHeaders() });
  if (!response.ok) { evalStatus(await evalError(response), true); return; }
  await showFusion();
}

// --- running and the report ---------------------------------------------------------------

async function runEvaluation() {
  const kb = evalBase();
  if (!kb) { evalStatus("请先选择知识库", true); return; }
  evalEl("eval-run").disabled = true;
  evalEl("evaluation-results").hidden = true;
  try {
    const body = JSON.stringify({ dry_run: evalEl("eval-dry-run").checked });
    const response = await fetch(`kbs/${encodeURIComponent(kb)}/evaluate`, { method: "POST", headers: kbHeaders(), body });
    if (!response.ok) { evalStatus(await evalError(response), true); return; }
    const { status_url: statusUrl } = await response.json();
    const progress = evalEl("eval-progress");
    progress.hidden = false;
    for (;;) {
      const polled = await fetch(statusUrl.replace(/^\//, ""), { headers: kbHeaders() });
      if (!polled.ok) { evalStatus(await evalError(polled), true); return; }
      const status = await polled.json();
      progress.max = status.total || 1;
      progress.value = status.done;
      if (status.status === "failed") { evalStatus("评测失败：请检查问题集后重试；反复出现请联系管理员", true); return; }
      if (status.status === "done") { await renderReport(status); return; }
      evalStatus(status.status === "queued" ? "排队中…" : `已检索 ${status.done} / ${status.total} 个问题…`);
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  } catch (err) {
    evalStatus(networkError("evaluate"), true);
  } finally {
    evalEl("eval-run").disabled = false;
    evalEl("eval-progress").hidden = true;
  }
}

function figureRow(label, figures, strong = false) {
  const cells = EVAL_METRICS.map((metric) => evalNode("td", {}, figures[metric].toFixed(3)));
  return evalNode("tr", { class: strong ? "strong" : "" }, evalNode("th", { scope: "row" }, label), ...cells);
}

function intervalCell(value) {
  const [low, high] = value.interval;
  const verdict = low > 0 ? "better" : high < 0 ? "worse" : "level";
  const sign = (x) => (x >= 0 ? "+" : "") + x.toFixed(3);
  return evalNode("td", { class: verdict }, `${sign(value.diff)} [${sign(low)}, ${sign(high)}]`);
}

function openComparison(question) {
  showTab("ask");
  document.getElementById("question").value = question;
  document.getElementById("compare-button").click();
}

function renderMisses(misses) {
  evalEl("eval-miss-count").textContent = `${misses.length} 个`;
  evalEl("eval-misses").replaceChildren(...misses.map((miss) => {
    const ranks = EVAL_MODES.map((mode) => `${EVAL_MODE_NAMES[mode]} ${miss.ranks[mode] ? `第${miss.ranks[mode]}名` : "未找到"}`);
    const found = miss.found_by.length ? `前 10 名找到：${miss.found_by.map((m) => EVAL_MODE_NAMES[m] || m).join("、")}` : "前 10 名都没找到";
    const link = evalNode("a", { href: "#", class: "compare-link" }, "对比检索");
    link.addEventListener("click", (event) => { event.preventDefault(); openComparison(miss.question); });
    return evalNode("li", { class: "miss", "data-id": miss.id },
      evalNode("span", { class: "question" }, miss.question), " ", link,
      evalNode("span", { class: "ranks" }, `${ranks.join(" · ")}；${found}${miss.generated ? "（模型生成的问题）" : ""}`));
  }));
}

// The reranking row (a reranker configured): test figures at each weight, the one chosen on dev.
function renderRerank(row) {
  evalEl("eval-rerank").hidden = !row;
  if (!row) return;
  evalEl("eval-rerank-summary").textContent =
    `${row.reranker} · 开发集选出的权重 ${row.chosen_weight}（0 为不重排）· 增加延迟 p50 ${row.added_ms.p50} ms · 失败 ${row.failed}/${row.questions}`;
  const head = evalNode("tr", {}, evalNode("th", {}, "重排权重"), ...EVAL_METRICS.map((m) => evalNode("th", {}, m)));
  evalEl("eval-rerank-table").replaceChildren(
    evalNode("thead", {}, head),
    evalNode("tbody", {}, ...row.weights.map((entry) =>
      figureRow(`${entry.weight}${entry.weight === 0 ? "（不重排）" : ""}`, entry.test, entry.weight === row.chosen_weight))),
  );
}

async function renderReport(status) {
  const report = status.report;
  const q = report.questions;
  evalEl("eval-summary").textContent =
    `测试集 ${q.test} 题（开发集 ${q.dev} 题用于选择融合；模型生成 ${q.generated} 题；` +
    `跳过不在本知识库的 ${q.bad_lines.filter((b) => b.absent).length} 条）· 用时 ${report.seconds} 秒`;
  const head = evalNode("tr", {}, evalNode("th", {}, "检索方式"), ...EVAL_METRICS.map((m) => evalNode("th", {}, m)));
  evalEl("eval-table").replaceChildren(
    evalNode("thead", {}, head),
    evalNode("tbody", {},
      ...EVAL_MODES.map((mode) => figureRow(EVAL_MODE_NAMES[mode], report.test[mode], mode === "hybrid")),
      figureRow("混合检索（服务默认融合）", report.default.test)),
  );
  const intervalHead = evalNode("tr", {}, evalNode("th", {}, "混合减去"), ...EVAL_METRICS.map((m) => evalNode("th", {}, m)));
  evalEl("eval-intervals").replaceChildren(
    evalNode("thead", {}, intervalHead),
    evalNode("tbody", {}, ...Object.entries(report.intervals).map(([name, diffs]) => evalNode("tr", {},
      evalNode("th", { scope: "row" }, EVAL_MODE_NAMES[name.replace("hybrid-", "")] || name),
      ...EVAL_METRICS.map((metric) => intervalCell(diffs[metric]))))),
  );
  evalEl("eval-chosen").textContent =
    `开发集选出的融合：${report.chosen.label}${status.stored ? "（已保存为该知识库的融合设置）" : "（仅报告，未保存）"}`;
  renderRerank(report.rerank);
  renderMisses(report.misses);
  showChange(status);
  const plot = await fetch(status.plot_url.replace(/^\//, ""), { headers: kbHeaders(false) });
  if (plot.ok) evalEl("eval-plot").src = URL.createObjectURL(await plot.blob());
  evalEl("evaluation-results").hidden = false;
  evalStatus("评测完成");
  await showFusion();
}

document.addEventListener("DOMContentLoaded", () => {
  evalEl("tab-ask").addEventListener("click", () => showTab("ask"));
  evalEl("tab-evaluation").addEventListener("click", () => showTab("evaluation"));
  evalEl("eval-upload").addEventListener("click", () => uploadQuestions().catch(() => evalStatus(networkError("questions"), true)));
  evalEl("eval-draft").addEventListener("click", () => draftQuestions().catch(() => evalStatus(networkError("draft"), true)));
  sampleQuestions();
  evalEl("eval-run").addEventListener("click", runEvaluation);
  evalEl("eval-reset").addEventListener("click", () => resetFusion().catch(() => evalStatus(networkError("evaluate"), true)));
  evalEl("eval-calibrate").addEventListener("click", () => calibrate().catch(() => evalStatus(networkError("evaluate"), true)));
  evalEl("eval-calibration-reset").addEventListener("click", () => calibrate(true).catch(() => evalStatus(networkError("evaluate"), true)));
  document.getElementById("kb-select").addEventListener("change", () => {
    evalEl("evaluation-results").hidden = true;
    if (!evalEl("evaluation-panel").hidden) refreshEvaluation();
  });
});
