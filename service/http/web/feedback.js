// Ratings and their review: thumbs under each answer with a "the right passage is…" picker that
// searches the base, and, in the 评测 tab, the admin's review of rated answers (accept one as a
// question of the base's set, or undo that). Uses kbs.js (`selectedKb`, `kbHeaders`); every
// server text goes in as text, never as HTML.
"use strict";

const fbEl = (id) => document.getElementById(id);
// evalNode (element builder) comes from evaluation.js, loaded before this file.
let currentAnswer = null;  // {answer_id, question} of the answer on the page

async function fbError(response) {
  return friendlyError(response, "vote");
}

// A list of the base's passages for `query`, each with a button that calls `choose(hit)`.
async function searchPassages(query, list, choose, buttonText) {
  list.replaceChildren();
  const response = await fetch("search", { method: "POST", headers: kbHeaders(), body: JSON.stringify({ query, kb: selectedKb(), k: 5 }) });
  if (!response.ok) { list.append(evalNode("li", { class: "error" }, await fbError(response))); return; }
  for (const hit of (await response.json()).hits) {
    const button = evalNode("button", { type: "button", class: "pick" }, buttonText);
    button.addEventListener("click", () => choose(hit));
    list.append(evalNode("li", { class: "hit", "data-id": hit.id },
      evalNode("span", { class: "meta" }, evalNode("span", { class: "where" }, hit.label || hit.title || "")), button,
      evalNode("span", { class: "text" }, hit.text)));
  }
  if (!list.children.length) list.append(evalNode("li", {}, "（无结果）"));
}

// --- under an answer ----------------------------------------------------------------------

function showFeedback(result) {
  currentAnswer = result.answer_id ? { answer_id: result.answer_id, question: result.question } : null;
  fbEl("feedback").hidden = !currentAnswer;
  fbEl("passage-picker").hidden = true;
  fbEl("feedback-status").textContent = "";
  fbEl("feedback-comment").value = "";
  fbEl("passage-hits").replaceChildren();
  for (const id of ["vote-up", "vote-down"]) fbEl(id).setAttribute("aria-pressed", "false");
}

async function sendVote(vote, chunkId = null) {
  if (!currentAnswer) return;
  const body = { vote, comment: fbEl("feedback-comment").value.trim() };
  if (chunkId) body.chunk_id = chunkId;
  const response = await fetch(`answers/${currentAnswer.answer_id}/feedback`, { method: "POST", headers: kbHeaders(), body: JSON.stringify(body) });
  if (!response.ok) { fbEl("feedback-status").textContent = await fbError(response); return; }
  fbEl("vote-up").setAttribute("aria-pressed", String(vote === "up"));
  fbEl("vote-down").setAttribute("aria-pressed", String(vote === "down"));
  fbEl("feedback-status").textContent = chunkId ? "已记录：这段才是答案，谢谢" : vote === "up" ? "已记录：有用" : "已记录：没用。可以在下面指出正确的段落";
  if (vote === "down" && !chunkId) {
    fbEl("passage-picker").hidden = false;
    fbEl("passage-query").value = currentAnswer.question;
  }
}

// --- the admin's review (评测 tab) ---------------------------------------------------------

const REVIEW_VOTES = { up: "点赞", down: "点踩" };

function reviewItem(answer) {
  const rating = answer.rating || {};
  const cited = answer.cited.map((c) => c.label || c.chunk_id).join("；") || "（无本地引用）";
  const item = evalNode("li", { class: "review-item", "data-id": answer.id },
    evalNode("span", { class: "question" }, answer.question || "（未保存问题文本）"),
    evalNode("span", { class: "vote" }, `${REVIEW_VOTES[rating.vote] || "未评价"}${answer.gap ? " · 回答含“无法从上下文确认”" : ""}`),
    rating.comment ? evalNode("span", { class: "comment" }, `备注：${rating.comment}`) : null,
    evalNode("span", { class: "cited" }, `引用：${cited}`),
    rating.chunk_id ? evalNode("span", { class: "picked" }, `提问者指出的段落：${rating.chunk_id}`) : null,
  );
  const actions = evalNode("span", { class: "actions" });
  if (answer.accepted) {
    const what = answer.accepted.kind === "question" ? `已加入问题集（${answer.accepted.question_id}）` : "已记为知识缺口";
    const undo = evalNode("button", { type: "button", class: "undo" }, "撤销");
    undo.addEventListener("click", () => reviewAction(answer.id, "DELETE"));
    actions.append(what, " ", undo);
  } else if (answer.rating) {
    const accept = evalNode("button", { type: "button", class: "accept" }, rating.chunk_id || rating.vote === "up" ? "加入问题集" : "记为知识缺口");
    accept.addEventListener("click", () => reviewAction(answer.id, "POST", {}));
    const pick = evalNode("button", { type: "button", class: "pick-passage" }, "选择正确段落…");
    const hits = evalNode("ol", { class: "hits" });
    pick.addEventListener("click", () => searchPassages(answer.question, hits,
      (hit) => reviewAction(answer.id, "POST", { chunk_id: hit.id }), "以此段加入问题集"));
    actions.append(accept, " ", pick, hits);
  }
  item.append(actions);
  return item;
}

async function reviewAction(answerId, method, body) {
  const kb = selectedKb();
  const init = { method, headers: kbHeaders() };
  if (body) init.body = JSON.stringify(body);
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/answers/${answerId}/accept`, init);
  if (!response.ok) { fbEl("review-status").textContent = await fbError(response); return; }
  const done = await response.json();
  const summary = done.questions ? `问题集现有可用问题 ${done.questions.usable} 条（开发集 ${done.questions.dev} / 测试集 ${done.questions.test}）` : "";
  fbEl("review-status").textContent = method === "DELETE" ? `已撤销。${summary}` :
    done.line ? `已加入问题集：${done.line.question}。${summary}。运行评测后才会影响检索` : "已记入知识缺口报告";
  if (done.questions) showQuestions(done.questions);
  await loadReview();
}

async function loadReview() {
  const kb = selectedKb();
  if (!kb) return;
  const kind = fbEl("review-kind").value;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/answers?kind=${kind}`, { headers: kbHeaders() });
  if (!response.ok) { fbEl("review-status").textContent = await fbError(response); return; }
  const { answers } = await response.json();
  fbEl("review-list").replaceChildren(...answers.map(reviewItem));
  if (!answers.length) fbEl("review-list").append(evalNode("li", {}, "（暂无）"));
}

// --- what an evaluation changed, and its undo ----------------------------------------------

function showChange(status) {
  const box = fbEl("eval-change");
  const before = status.report.before;
  box.hidden = !before;
  if (!before) return;
  const sign = (x) => (x >= 0 ? "+" : "") + x.toFixed(3);
  const rows = Object.entries(before.change).map(([metric, c]) => {
    const verdict = c.interval[0] > 0 ? "better" : c.interval[1] < 0 ? "worse" : "level";
    return evalNode("tr", {}, evalNode("th", { scope: "row" }, metric),
      evalNode("td", {}, before.test[metric].toFixed(3)), evalNode("td", {}, status.report.test.hybrid[metric].toFixed(3)),
      evalNode("td", { class: verdict }, `${sign(c.diff)} [${sign(c.interval[0])}, ${sign(c.interval[1])}]`));
  });
  fbEl("eval-change-text").textContent =
    `融合 ${before.label} → ${status.report.chosen.label}${status.stored ? "（已生效）" : "（仅报告，未生效）"}`;
  const head = evalNode("tr", {}, ...["指标", "之前", "之后", "变化（95% 区间）"].map((h) => evalNode("th", {}, h)));
  fbEl("eval-change-table").replaceChildren(evalNode("thead", {}, head), evalNode("tbody", {}, ...rows));
  const undo = fbEl("eval-undo");
  undo.hidden = !status.stored;
  undo.onclick = async () => {
    const response = await fetch(`kbs/${encodeURIComponent(selectedKb())}/evaluations/${status.job}/undo`, { method: "POST", headers: kbHeaders() });
    fbEl("eval-change-text").textContent = response.ok ? "已撤销：融合恢复为评测之前的设置" : await fbError(response);
    undo.hidden = response.ok;
    await showFusion();
  };
}

document.addEventListener("DOMContentLoaded", () => {
  fbEl("vote-up").addEventListener("click", () => sendVote("up"));
  fbEl("vote-down").addEventListener("click", () => sendVote("down"));
  fbEl("passage-search").addEventListener("click", () => searchPassages(fbEl("passage-query").value.trim(),
    fbEl("passage-hits"), (hit) => sendVote("down", hit.id), "就是这段"));
  fbEl("review-refresh").addEventListener("click", loadReview);
  fbEl("review-kind").addEventListener("change", loadReview);
  fbEl("tab-evaluation").addEventListener("click", loadReview);
  document.getElementById("kb-select").addEventListener("change", () => {
    if (!fbEl("evaluation-panel").hidden) loadReview();
  });
});
