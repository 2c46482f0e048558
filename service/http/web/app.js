// The page: ask (streamed answer, citations, workflow timeline) and compare (vector vs hybrid).
// Plain browser JavaScript, no build step. Every server text is inserted as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);

const NODE_NAMES = {
  rewrite_question: "结合对话改写问题",
  route_question: "路由判断",
  direct_answer: "直接回答",
  decompose_question: "拆分子问题",
  retrieve: "本地检索",
  plan_next_step: "检索规划",
  evaluate: "充分性评估",
  web_search: "联网搜索",
  generate: "生成回答",
  split_question: "拆分问题（按连词和标点）",
  select_evidence: "挑选原文句子并判断是否足够",
  quote_answer: "摘录原文作答",
};
// Labels of the retrieval modes; the modes themselves come from the server (GET /modes).
const MODE_NAMES = { hybrid: "混合检索", vector: "仅向量", bm25: "BM25（jieba 词）", bigram: "BM25（二字词）", standard: "单字（基线）" };
const ANSWER_MODES = { llm: "大模型回答", extractive: "抽取式回答 · 原文摘录，未使用大模型" };
const ROUTES = { simple: "简单问题（直接回答）", complex: "复杂问题（检索知识库）" };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["X-API-Key"] = key;
  return h;
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

// FastAPI errors: {"detail": "..."} or, for 422, {"detail": [...], "message": "..."}.
async function errorText(response) {
  let body = {};
  try { body = await response.json(); } catch (_) { /* not JSON */ }
  const reason = body.message || (typeof body.detail === "string" ? body.detail : response.statusText);
  const hints = { 401: "需要有效的 API 密钥（见“访问设置”）", 404: "知识库尚未建立", 413: "请求过大", 422: "输入有误", 503: "依赖服务不可用" };
  return `${hints[response.status] || "请求失败"}（HTTP ${response.status}）：${reason}`;
}

function options() {
  return {
    mode: document.querySelector("input[name=mode]:checked").value,
    k: Number($("k").value) || 8,
    web: $("web").checked,
  };
}

// --- answer, citations, timeline -------------------------------------------------------

// Turn "[3]" marks into links to the third citation; the rest stays plain text.
function renderAnswer(text) {
  const answer = $("answer");
  answer.replaceChildren();
  let last = 0;
  for (const match of text.matchAll(/\[(\d{1,2})\]/g)) {
    answer.append(text.slice(last, match.index));
    answer.append(el("a", { class: "cite", href: `#cite-${match[1]}` }, match[0]));
    last = match.index + match[0].length;
  }
  answer.append(text.slice(last));
}

function renderCitations(citations) {
  const list = $("citations");
  list.replaceChildren();
  for (const c of citations || []) {
    const item = el("li", { id: `cite-${c.number}`, value: String(c.number) });
    if (c.kind === "web") {
      item.append(el("span", { class: "kind web" }, "网络"));
      // Web results are untrusted: only http(s) addresses become links (no javascript: URLs).
      const linkable = /^https?:\/\//i.test(c.url || "");
      item.append(linkable ? el("a", { href: c.url, target: "_blank", rel: "noopener noreferrer" }, c.title || c.url) : `${c.title || ""} ${c.url || ""}`);
    } else {
      item.append(el("span", { class: "kind" }, "本地"));
      // The service's label: 《title》第 3 页 · 3.2 用药, or 第12章 title · source.
      item.append(el("span", { class: "where", title: c.section || "" }, c.label || c.title || c.source || ""));
    }
    if (c.snippet) item.append(el("span", { class: "snippet" }, c.snippet));
    list.append(item);
  }
  if (!list.children.length) list.append(el("li", { class: "snippet" }, "（无引用）"));
}

// Sources that disagree: each point, and every side with its citation link (text only, never HTML).
function renderConflicts(conflicts) {
  const list = $("conflicts");
  list.replaceChildren();
  for (const c of conflicts || []) {
    const sides = el("ul");
    for (const s of c.sources) {
      sides.append(el("li", {},
        el("a", { class: "cite", href: `#cite-${s.number}` }, `[${s.number}]`),
        el("span", { class: s.kind === "web" ? "kind web" : "kind" }, s.kind === "web" ? "网络" : s.kind === "given" ? "对话" : "本地"),
        el("span", { class: "where" }, s.title || ""),
        el("q", {}, s.says)));
    }
    list.append(el("li", {}, el("strong", {}, c.claim), sides));
  }
  $("conflicts-section").hidden = !list.children.length;
}

// A "node" event: {node, ms, outcome}; the final result later adds route, sub-questions, verdicts.
function addTimelineStep(data) {
  const item = el("li", { "data-node": data.node },
    el("span", { class: "node" }, NODE_NAMES[data.node] || data.node),
    el("span", { class: "ms" }, `${Math.round(data.ms)} ms`),
    el("span", { class: "detail" }, data.outcome || ""),
  );
  $("timeline").append(item);
}

function annotate(item, text) {
  if (item) item.append(el("span", { class: "detail strong" }, text));
}

// Attach the final result's structured facts to the steps they came from.
function finishTimeline(result) {
  const steps = (node) => [...$("timeline").querySelectorAll(`li[data-node="${node}"]`)];
  annotate(steps("route_question")[0], `路由：${ROUTES[result.route] || result.route}${result.route_reason ? `（${result.route_reason}）` : ""}`);
  if (result.sub_questions.length) {
    annotate(steps("decompose_question")[0], `子问题：${result.sub_questions.map((q, i) => `${i + 1}. ${q}`).join("　")}`);
  }
  steps(result.mode === "extractive" ? "select_evidence" : "evaluate").forEach((item, i) => {
    const verdict = result.evaluations[i];
    if (!verdict) return;
    item.classList.add(verdict.enough ? "enough" : "missing");
    const missing = verdict.missing.length ? `；缺少：${verdict.missing.join("、")}` : "";
    annotate(item, `${verdict.enough ? "证据充分" : "证据不足"}${verdict.with_web ? "（含网络资料）" : ""}${missing}`);
  });
  $("timeline").append(el("li", { class: "total" },
    el("span", { class: "node" }, "完成"),
    el("span", { class: "ms" }, `共 ${Math.round(result.timings.total || 0)} ms`),
    el("span", { class: "detail" }, `模型调用 ${result.llm_calls} 次 · 联网搜索 ${result.web_calls} 次${result.web_used ? "（答案使用了网络结果）" : ""}`),
  ));
}

// The "mode" event: who writes the answer (the model, or quotes only) and why.
function showMode(data) {
  const badge = $("answer-mode");
  badge.textContent = ANSWER_MODES[data.mode] || data.mode;
  badge.title = data.reason || "";
  badge.className = `badge ${data.mode === "extractive" ? "extractive" : "ok"}`;
  badge.hidden = false;
}

// The model's reasoning ("reasoning" events, then the final `reasoning`): folded, never in the answer.
function showReasoning(text) {
  $("reasoning").textContent = text.trim();
  $("reasoning-box").hidden = !text.trim();
  if (!text) $("reasoning-box").open = false;
}

// Server-sent events over a POST body: fetch + a small parser (EventSource only does GET).
async function* sseEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value.replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) yield { event, data: JSON.parse(data.join("\n")) };
    }
  }
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question) { showError("请输入问题"); return; }
  showError("");
  $("answer-section").hidden = false;
  $("timeline-section").hidden = false;
  $("timeline").replaceChildren();
  $("citations").replaceChildren();
  renderConflicts([]);
  $("warnings").hidden = true;
  $("answer-mode").hidden = true;
  $("feedback").hidden = true;
  renderAnswer("");
  showReasoning("");
  $("ask-button").disabled = true;
  let text = "";
  let thought = "";
  try {
    const response = await fetch("query/stream", { method: "POST", headers: headers(), body: JSON.stringify({ question, kb: selectedKb(), ...options() }) });
    if (!response.ok) { showError(await errorText(response)); return; }
    for await (const { event: kind, data } of sseEvents(response)) {
      if (kind === "mode") showMode(data);
      else if (kind === "node") addTimelineStep(data);
      else if (kind === "token") { text += data.text; renderAnswer(text); }
      else if (kind === "reasoning") { thought += data.text; showReasoning(thought); }
      else if (kind === "final") {
        renderAnswer(data.answer ?? text);
        showReasoning(data.reasoning ?? thought);
        renderCitations(data.citations);
        renderConflicts(data.conflicts);
        finishTimeline(data);
        showFeedback(data);
        if (data.warnings && data.warnings.length) { $("warnings").textContent = `提示：${data.warnings.join("；")}`; $("warnings").hidden = false; }
      } else if (kind === "error") showError(`回答失败（${data.type}）：${data.message}`);
    }
  } catch (err) {
    showError(`连接中断：${err.message}`);
  } finally {
    $("ask-button").disabled = false;
  }
}

// --- comparison ---------------------------------------------------------------------------

const LIST_LABELS = { vector: "向量", bm25: "词(jieba)", bigram: "二元字", standard: "单字" };

// One column; `shared` ids are in both columns, `ranks` gives each id's rank per mode.
function renderHits(list, hits, mode, other, shared, ranks) {
  list.replaceChildren();
  for (const hit of hits) {
    const meta = el("span", { class: "meta" },
      el("span", { class: "where", title: hit.section || "" }, hit.label || hit.title || hit.source || ""),
      el("span", {}, `分数 ${Number(hit.score).toFixed(4)}`),
    );
    // A hybrid hit explains itself: its rank in each fused list and that list's share of the score.
    for (const [list, part] of Object.entries(hit.explain || {})) {
      const label = LIST_LABELS[list] || list;
      const text = part.rank ? `${label} 第${part.rank}名 +${part.contribution.toFixed(4)}` : `${label} 未召回`;
      meta.append(el("span", { class: `rank ${list}` }, text));
    }
    // The query's other names this chunk holds: the keyword lists found it by them too.
    for (const found of hit.expansions || []) {
      meta.append(el("span", { class: "rank alias", title: `来源：${found.source}` }, `别名 ${found.term}→${found.expansion}`));
    }
    // A reranked hit: the reranker's score and where fusion had it before (hybrid vs hybrid + reranking).
    if (hit.rerank) meta.append(el("span", { class: "rank rerank" }, `重排 ${Number(hit.rerank.score).toFixed(3)} · 融合第${hit.rerank.fused_rank}名`));
    const otherRank = (ranks.get(hit.id) || {})[other];
    if (shared.has(hit.id)) meta.append(el("span", { class: "rank both" }, `两者皆有 · 另一列第${otherRank}名`));
    const text = hitText(hit);
    list.append(el("li", { class: shared.has(hit.id) ? "hit overlap" : "hit", "data-id": hit.id }, meta, text));
    const best = text.querySelector("mark.best");
    if (best) text.scrollTop = best.offsetTop;  // the sentence asked about, the rest of the chunk around it
  }
  if (!hits.length) list.append(el("li", {}, "（无结果）"));
}

// The chunk's text with the passages the vector search matched marked, the best one (`best`) apart:
// the chunk stays the context, the passage is where the question was found. Passages may overlap, so
// the text is cut at every passage boundary and each piece marked by the passages that cover it.
function hitText(hit) {
  const node = el("span", { class: "text" });
  const passages = hit.passages || [];
  const cuts = [...new Set([0, hit.text.length, ...passages.flatMap((p) => [p.start, p.end])])].sort((a, b) => a - b);
  for (let i = 0; i + 1 < cuts.length; i++) {
    const [start, end] = [cuts[i], cuts[i + 1]];
    const covering = passages.filter((p) => p.start <= start && end <= p.end);
    const piece = hit.text.slice(start, end);
    if (!covering.length) { node.append(piece); continue; }
    const best = covering.includes(passages[0]);
    const score = Math.max(...covering.map((p) => p.score)).toFixed(3);
    node.append(el("mark", { class: best ? "passage best" : "passage", title: `向量匹配的段落 ${score}` }, piece));
  }
  return node;
}

// The query's alias expansions (玄德 → 刘备) and where each was learnt: the query analysis, shown once.
function expansionNote(result) {
  const found = result.expansions || [];
  return found.length ? `别名扩展：${found.map((e) => `${e.term} → ${e.expansion}（${e.source}）`).join("；")}` : "";
}

// What the reranking stage did to a column: applied (its weight), or why the fused order was kept.
function rerankNote(result) {
  const used = result.rerank;
  if (!used) return "";
  return used.applied ? ` · 已重排（权重 ${used.weight}）` : used.warning ? ` · ${used.warning}` : "";
}

async function compare() {
  const query = $("question").value.trim();
  if (!query) { showError("请输入问题"); return; }
  showError("");
  $("compare-button").disabled = true;
  try {
    const k = Number($("k").value) || 8;
    const response = await fetch("compare", { method: "POST", headers: headers(), body: JSON.stringify({ query, k, kb: selectedKb() }) });
    if (!response.ok) { showError(await errorText(response)); return; }
    const comparison = await response.json();
    const overlap = comparison.overlaps[0];
    const shared = new Set(overlap.shared);
    const ranks = new Map(comparison.ranks.map((row) => [row.id, row.ranks]));
    const [left, right] = comparison.modes;  // the server's default pair: vector, hybrid
    renderHits($("vector-hits"), comparison.results[left].hits, left, right, shared, ranks);
    renderHits($("hybrid-hits"), comparison.results[right].hits, right, left, shared, ranks);
    $("compare-summary").textContent =
      `前 ${comparison.k} 条中重合 ${overlap.shared.length} 条（overlap@${comparison.k} = ${overlap.overlap_at_k.toFixed(2)}）` +
      ` · ${MODE_NAMES[left] || left} ${Math.round(comparison.results[left].took_ms)} ms，` +
      `${MODE_NAMES[right] || right} ${Math.round(comparison.results[right].took_ms)} ms` +
      rerankNote(comparison.results[right]);
    const note = expansionNote(comparison.results[right]);
    $("compare-expansions").textContent = note;
    $("compare-expansions").hidden = !note;
    $("compare-section").hidden = false;
  } catch (err) {
    showError(`连接中断：${err.message}`);
  } finally {
    $("compare-button").disabled = false;
  }
}

async function loadModes() {
  const { modes, default: chosen } = await (await fetch("modes")).json();
  $("modes").append(...modes.map((mode) => {
    const input = el("input", { type: "radio", name: "mode", value: mode });
    input.checked = mode === chosen;
    return el("label", {}, input, ` ${MODE_NAMES[mode] || mode}`);
  }));
}

async function checkReady() {
  const badge = $("ready");
  try {
    const ready = await (await fetch("readyz")).json();
    badge.textContent = ready.ready
      ? `已就绪 · 知识库 ${ready.index.name}（${ready.index.docs} 段）${ready.llm_configured ? "" : " · 未配置大模型：回答为原文摘录（抽取式）"}`
      : `未就绪：${ready.elasticsearch.error || ready.index.error || "索引与向量模型不匹配"}`;
    badge.className = `badge ${ready.ready ? "ok" : "bad"}`;
  } catch (err) {
    badge.textContent = "服务无响应";
    badge.className = "badge bad";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("api-key").value = localStorage.getItem("rag-api-key") || "";
  $("api-key").addEventListener("change", () => localStorage.setItem("rag-api-key", $("api-key").value.trim()));
  $("ask").addEventListener("submit", ask);
  // As chat pages do: Enter sends, Shift+Enter starts a new line (not while an IME is composing).
  $("question").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("ask").requestSubmit();
    }
  });
  $("compare-button").addEventListener("click", compare);
  loadModes().catch((err) => showError(`无法读取检索方式：${err.message}`));
  checkReady();
});
