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

// An error replaces the answer on screen: its card, its citations and its feedback bar go with it.
function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
  if (message) clearAnswer();
}

function clearAnswer() {
  $("answer-section").hidden = true;
  $("timeline-section").hidden = true;
  $("timeline").replaceChildren();
  $("citations").replaceChildren();
  $("streamed-quotes").replaceChildren();
  $("streamed-quotes").hidden = true;
  renderConflicts([]);
  $("warnings").hidden = true;
  $("answer-mode").hidden = true;
  renderAnswer("");
  showReasoning("");
  showFeedback({});  // no answer on screen: no vote can go anywhere
}

function options() {
  return {
    mode: document.querySelector("input[name=mode]:checked").value,
    k: Number($("k").value) || 8,
    web: ABOUT.web_search && $("web").checked,
  };
}

// --- answer, citations, timeline -------------------------------------------------------

// Turn "[3]" marks into links that open the third citation at its quote; the rest stays plain text.
function renderAnswer(text) {
  const answer = $("answer");
  answer.replaceChildren();
  let last = 0;
  for (const match of text.matchAll(/\[(\d{1,2})\]/g)) {
    answer.append(text.slice(last, match.index));
    answer.append(citeLink(match[1], match[0]));
    last = match.index + match[0].length;
  }
  answer.append(text.slice(last));
}

function citeLink(number, label) {
  const link = el("a", { class: "cite", href: `#cite-${number}` }, label);
  link.addEventListener("click", (event) => { event.preventDefault(); openCitation(number); });
  return link;
}

// [n]: its source, scrolled so the quoted sentence is in the middle of the screen, highlighted.
function openCitation(number) {
  const item = $(`cite-${number}`);
  if (!item) return;
  $("citations").querySelectorAll("li.target").forEach((li) => li.classList.remove("target"));
  item.classList.add("target");
  (item.querySelector("mark.quote") || item).scrollIntoView({ block: "center" });
}

// What the answer quotes from source n: the 「…」 right before its [n], else the sentence before it.
function quotedBy(answer, number) {
  const at = answer.indexOf(`[${number}]`);
  if (at < 0) return "";
  const before = answer.slice(0, at).trimEnd();
  const quoted = before.match(/「([^「」]+)」$/);
  if (quoted) return quoted[1];
  const sentence = before.split(/[。！？!?\n]/).filter((s) => s.trim()).pop() || "";
  return sentence.replace(/\[\d{1,2}\]/g, "").trim();
}

// Where `quote` is in `text`: the exact place, else the text's sentence sharing most character pairs with it.
function findQuote(text, quote) {
  if (!quote) return null;
  const exact = text.indexOf(quote);
  if (exact >= 0) return [exact, exact + quote.length];
  const pairs = (s) => new Set([...s].slice(1).map((c, i) => s[i] + c));
  const wanted = pairs(quote);
  let best = null, bestShared = 0, start = 0;
  for (const sentence of text.split(/(?<=[。！？!?\n])/)) {
    const shared = [...pairs(sentence)].filter((p) => wanted.has(p)).length;
    if (shared > bestShared) { best = [start, start + sentence.length]; bestShared = shared; }
    start += sentence.length;
  }
  return bestShared >= 2 ? best : null;
}

const QUOTE_WINDOW = 70;  // characters shown either side of the quote before "全文"

// A passage with the quote marked: around the quote only, or whole.
function passageText(text, span, whole) {
  const node = el("span", { class: "passage-text" });
  if (!span) { node.append(whole ? text : text.slice(0, QUOTE_WINDOW * 2 + 20)); return node; }
  const [from, to] = whole ? [0, text.length] : [Math.max(0, span[0] - QUOTE_WINDOW), Math.min(text.length, span[1] + QUOTE_WINDOW)];
  node.append(from > 0 ? "…" : "", text.slice(from, span[0]), el("mark", { class: "quote" }, text.slice(span[0], span[1])),
    text.slice(span[1], to), to < text.length ? "…" : "");
  return node;
}

// A spreadsheet chunk begins with its header line (城市 | 住宿上限(元/晚) | …): the rows that hold
// `focus` (the quote, the matched passage), else the first rows, as a small table under that header.
const CELL = " | ";
function rowTable(text, focus) {
  const [head, ...lines] = text.split("\n").filter((line) => line.includes(CELL));
  if (!head || !lines.length) return null;
  const hits = focus ? lines.filter((line) => line.includes(focus) || focus.includes(line)) : [];
  const rows = (hits.length ? hits : lines).slice(0, 3);
  const cells = (line, tag) => el("tr", {}, ...line.split(CELL).map((cell) => el(tag, {}, cell)));
  return el("table", { class: "row-table" }, el("thead", {}, cells(head, "th")), el("tbody", {}, ...rows.map((r) => cells(r, "td"))));
}

function citationText(c, answer) {
  const text = c.text || c.snippet || "";
  const table = c.sheet ? rowTable(text, quotedBy(answer, c.number)) : null;
  if (table) return table;
  const span = findQuote(text, quotedBy(answer, c.number));
  const box = el("span", { class: "snippet" }, passageText(text, span, false));
  if (text.length > QUOTE_WINDOW * 2 + 20 || (span && (span[0] > QUOTE_WINDOW || text.length - span[1] > QUOTE_WINDOW))) {
    const toggle = el("button", { type: "button", class: "whole", "aria-expanded": "false" }, "显示全文");
    toggle.addEventListener("click", () => {
      const whole = toggle.getAttribute("aria-expanded") !== "true";
      box.firstChild.replaceWith(passageText(text, span, whole));
      toggle.setAttribute("aria-expanded", String(whole));
      toggle.textContent = whole ? "只看引文附近" : "显示全文";
    });
    box.append(" ", toggle);
  }
  return box;
}

function renderCitations(citations, answer = "") {
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
    if (c.text || c.snippet) item.append(citationText(c, answer));
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
        citeLink(s.number, `[${s.number}]`),
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

// A quote of an extractive answer, as soon as it is chosen (the composed answer replaces them).
function showQuote(data) {
  $("streamed-quotes").append(el("li", {}, el("q", {}, data.text)));
  $("streamed-quotes").hidden = false;
}

async function ask(event) {
  event.preventDefault();
  const question = $("question").value.trim();
  showError("");
  clearAnswer();
  if (!question) { showError("请先输入问题"); return; }
  $("answer-section").hidden = false;
  $("timeline-section").hidden = false;
  $("ask-button").disabled = true;
  let text = "";
  let thought = "";
  try {
    const response = await fetch("query/stream", { method: "POST", headers: headers(), body: JSON.stringify({ question, kb: selectedKb(), ...options() }) });
    if (!response.ok) { showError(await friendlyError(response, "ask")); return; }
    for await (const { event: kind, data } of sseEvents(response)) {
      if (kind === "mode") showMode(data);
      else if (kind === "node") addTimelineStep(data);
      else if (kind === "quote") showQuote(data);
      else if (kind === "token") { text += data.text; renderAnswer(text); $("streamed-quotes").hidden = true; }
      else if (kind === "reasoning") { thought += data.text; showReasoning(thought); }
      else if (kind === "final") {
        renderAnswer(data.answer ?? text);
        $("streamed-quotes").hidden = true;
        showReasoning(data.reasoning ?? thought);
        renderCitations(data.citations, data.answer ?? text);
        renderConflicts(data.conflicts);
        finishTimeline(data);
        showFeedback(data);
        if (data.warnings && data.warnings.length) { $("warnings").textContent = `提示：${data.warnings.join("；")}`; $("warnings").hidden = false; }
      } else if (kind === "error") showError(streamError(data));
    }
  } catch (err) {
    showError(networkError("ask"));
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
    const best = (hit.passages || [])[0];
    const table = hit.sheet ? rowTable(hit.text, best ? hit.text.slice(best.start, best.end).trim() : "") : null;
    list.append(el("li", { class: shared.has(hit.id) ? "hit overlap" : "hit", "data-id": hit.id }, meta, table || text));
    const marked = text.querySelector("mark.best");
    if (marked && !table) text.scrollTop = marked.offsetTop;  // the sentence asked about, the rest of the chunk around it
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
  if (!query) { showError("请先输入问题"); return; }
  showError("");
  $("compare-button").disabled = true;
  try {
    const k = Number($("k").value) || 8;
    const response = await fetch("compare", { method: "POST", headers: headers(), body: JSON.stringify({ query, k, kb: selectedKb() }) });
    if (!response.ok) { showError(await friendlyError(response, "compare")); return; }
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
    showError(networkError("compare"));
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

let READY = null;  // /readyz: whether search works (null: not asked yet, false: no answer)

// The header: the selected base with its size, and whether search works.
function showReady() {
  const badge = $("ready");
  const base = selectedBase();
  if (READY === null) return;
  if (!READY) { badge.textContent = "服务未就绪：搜索引擎不可用，请稍后刷新"; badge.className = "badge bad"; return; }
  badge.textContent = base ? `知识库 ${base.name} · ${base.documents} 篇 · ${base.chunks} 段` : "没有可用的知识库：请新建一个";
  badge.className = `badge ${base ? "ok" : "bad"}`;
}

async function checkReady() {
  try {
    READY = (await (await fetch("readyz")).json()).ready === true;
  } catch (err) {
    READY = false;
  }
  showReady();
}

// The model in words, and web search offered only when it is set up.
function showAbout() {
  const model = ABOUT.model || { connected: false, reason: "状态未知" };
  $("model-state").textContent = model.connected ? "大模型：已连接" : `大模型：未连接：${model.reason}`;
  $("model-state").className = `badge ${model.connected ? "ok" : "extractive"}`;
  $("web").disabled = !ABOUT.web_search;
  $("web").checked = ABOUT.web_search;
  $("web-note").hidden = ABOUT.web_search;
  $("web-choice").title = ABOUT.web_search ? "知识库里找不到时，到网上搜索" : "未设置联网搜索密钥";
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
  loadModes().catch(() => showError("无法读取检索方式：请刷新页面"));
  loadAbout().then(showAbout).catch(() => showAbout());
  checkReady();
});
