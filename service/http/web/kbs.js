// Knowledge bases on the page: the selector every request uses (remembered across reloads), creating
// and deleting a base, uploads with a progress bar and each failed file's reason, the document list
// (chapters summed up) and the base's example questions. Loaded before app.js, which reads `selectedKb()`.
"use strict";

function kbHeaders(json = true) {
  const h = json ? { "Content-Type": "application/json" } : {};
  // The stored key too: this runs before app.js puts it back in the field after a reload.
  const key = document.getElementById("api-key").value.trim() || localStorage.getItem("rag-api-key") || "";
  if (key) h["X-API-Key"] = key;
  return h;
}

// The base the user chose; null before the list is loaded (the server's default base then).
function selectedKb() {
  const value = document.getElementById("kb-select").value;
  return value || null;
}

function kbStatus(message, bad = false, id = "upload-status") {
  const status = document.getElementById(id);
  status.textContent = message;
  status.className = bad ? "error" : "";
}

let KBS = [];  // the bases the caller may read, as GET kbs lists them

function selectedBase() {
  return KBS.find((kb) => kb.name === selectedKb()) || null;
}

async function loadKbs() {
  const select = document.getElementById("kb-select");
  const shown = select.value;
  const response = await fetch("kbs", { headers: kbHeaders() });
  if (!response.ok) { select.replaceChildren(); return; }
  const { kbs } = await response.json();
  KBS = kbs;
  const previous = localStorage.getItem("rag-kb") || select.value;
  select.replaceChildren(...kbs.map((kb) => {
    const option = document.createElement("option");
    option.value = kb.name;
    option.textContent = kb.name;
    return option;
  }));
  if (kbs.some((kb) => kb.name === previous)) select.value = previous;
  else if (kbs.length) select.value = (kbs.find((kb) => kb.default) || kbs[0]).name;
  // A base newly chosen is announced, so panels opened before the list arrived (the evaluation tab,
  // the review) follow it; the change listener loads its documents.
  if (select.value !== shown) select.dispatchEvent(new Event("change"));
  else await showBase();
}

// The header and the overview follow the selected base: its name and size, its description, who may delete it.
async function showBase() {
  const base = selectedBase();
  document.getElementById("kb-delete").hidden = !base || base.role !== "admin";
  document.getElementById("base-description").textContent = base && base.description ? base.description : "";
  if (typeof showReady === "function") showReady();
  await Promise.all([loadDocuments(), loadExamples()]);
}

async function createKb(event) {
  event.preventDefault();
  const name = document.getElementById("kb-name").value.trim();
  if (!name) { kbStatus("请先填写知识库名称", true, "kb-status"); return; }
  const description = document.getElementById("kb-description").value.trim();
  const response = await fetch("kbs", { method: "POST", headers: kbHeaders(), body: JSON.stringify({ name, description }) });
  if (!response.ok) { kbStatus(await friendlyError(response, "create"), true, "kb-status"); return; }
  localStorage.setItem("rag-kb", name);
  kbStatus(`已新建知识库「${name}」：现在可以在“文档管理”里上传文件`, false, "kb-status");
  document.getElementById("kb-name").value = "";
  document.getElementById("kb-description").value = "";
  document.getElementById("documents-section").open = true;
  await loadKbs();
}

async function deleteKb() {
  const kb = selectedKb();
  if (!kb || !confirm(`删除知识库「${kb}」和其中的全部文档？此操作无法撤销。`)) return;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}`, { method: "DELETE", headers: kbHeaders() });
  if (!response.ok) { kbStatus(await friendlyError(response, "deleteKb"), true, "kb-status"); return; }
  localStorage.removeItem("rag-kb");
  kbStatus(`已删除知识库「${kb}」`, false, "kb-status");
  await loadKbs();
}

// Chaptered files are summed up as 《file》第 1–20 章 (20 章); other documents by their titles.
function documentsSummary(documents, total) {
  const chapters = new Map();
  const others = [];
  for (const doc of documents) {
    if (doc.chapter === null || doc.chapter === undefined) { others.push(doc.title || doc.source); continue; }
    chapters.set(doc.source, [...(chapters.get(doc.source) || []), doc.chapter]);
  }
  const parts = [...chapters].map(([source, numbers]) =>
    `《${source}》第 ${Math.min(...numbers)}–${Math.max(...numbers)} 章（共 ${numbers.length} 章）`);
  if (others.length) parts.push(others.slice(0, 8).join("、") + (others.length > 8 ? ` 等 ${others.length} 篇` : ""));
  return total ? `共 ${total} 篇文档：${parts.join("；")}` : "这个知识库还没有文档：在“文档管理”里上传文件。";
}

// Questions the base can answer (its own question set's, else made from its headings): buttons that ask them.
async function loadExamples() {
  const box = document.getElementById("examples");
  box.querySelectorAll("button").forEach((b) => b.remove());
  box.hidden = true;
  const kb = selectedKb();
  const question = document.getElementById("question");
  question.placeholder = "输入问题";
  if (!kb) return;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/examples?count=4`, { headers: kbHeaders() });
  if (!response.ok || kb !== selectedKb()) return;
  const { questions } = await response.json();
  for (const text of questions) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "example";
    button.textContent = text;
    button.addEventListener("click", () => { question.value = text; document.getElementById("ask").requestSubmit(); });
    box.append(button);
  }
  box.hidden = !questions.length;
  if (questions.length) question.placeholder = `输入问题，例如：${questions[0]}`;
}

async function loadDocuments() {
  const kb = selectedKb();
  const list = document.getElementById("documents");
  list.replaceChildren();
  if (!kb) return;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/documents`, { headers: kbHeaders() });
  if (!response.ok) { document.getElementById("documents-summary").textContent = await friendlyError(response, "documents"); return; }
  const { documents, total } = await response.json();
  document.getElementById("documents-total").textContent = `共 ${total} 篇`;
  document.getElementById("documents-summary").textContent = documentsSummary(documents, total);
  for (const doc of documents) {
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "删除";
    remove.className = "delete-document";
    remove.addEventListener("click", () => deleteDocument(kb, doc.doc_id));
    const row = document.createElement("li");
    row.dataset.docId = doc.doc_id;
    const pages = doc.pages ? ` · ${doc.pages} 页` : "";
    const label = document.createElement("span");
    label.textContent = `${doc.title || doc.source} · ${doc.source} · ${doc.chunks} 段${pages}`;
    row.append(label, " ", remove);
    list.append(row);
  }
}

async function deleteDocument(kb, docId) {
  if (!confirm(`删除文档「${docId}」？`)) return;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/documents/${encodeURIComponent(docId)}`, {
    method: "DELETE", headers: kbHeaders(),
  });
  kbStatus(response.ok ? `已删除「${docId}」` : await friendlyError(response, "upload"), !response.ok);
  await loadKbs();
}

async function upload(event) {
  event.preventDefault();
  const kb = selectedKb();
  const files = document.getElementById("upload-files").files;
  if (!kb || !files.length) { kbStatus("请先选择知识库和要上传的文件", true); return; }
  const form = new FormData();
  for (const file of files) form.append("files", file);
  const access = document.getElementById("upload-access").value.trim();
  if (access) form.append("access", access);
  const button = document.getElementById("upload-button");
  button.disabled = true;
  try {
    const response = await fetch(`kbs/${encodeURIComponent(kb)}/documents`, { method: "POST", headers: kbHeaders(false), body: form });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      kbStatus(await friendlyError(new Response(JSON.stringify(body), { status: response.status }), "upload"), true);
      return;
    }
    await follow(body.job);
  } finally {
    button.disabled = false;
  }
}

// Poll the job until it ends, moving the progress bar by chunks written of chunks to write.
async function follow(jobId) {
  const bar = document.getElementById("upload-progress");
  bar.hidden = false;
  bar.value = 0;
  for (;;) {
    const response = await fetch(`jobs/${encodeURIComponent(jobId)}`, { headers: kbHeaders() });
    if (!response.ok) { kbStatus(await friendlyError(response, "upload"), true); return; }
    const job = await response.json();
    const counts = job.counts || {};
    const todo = counts.new || 0;
    bar.value = job.state === "done" ? 1 : todo ? (counts.indexed || 0) / todo : 0;
    showFileErrors(job.errors || []);
    const failed = job.state === "failed" ? (job.errors || []).length ? " · 没有文件能读取，原因见下" : " · 请重新上传" : "";
    kbStatus(
      `上传${JOB_STATES[job.state] || job.state} · 文件 ${counts.files || 0} 个 · 新写入 ${counts.indexed || 0}/${todo} 段 · 未变 ${counts.unchanged || 0} 段${failed}`,
      job.state === "failed" || Boolean((job.errors || []).length),
    );
    if (job.state === "done" || job.state === "failed") break;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  await loadKbs();
}

// Each file that failed, with its own reason in words.
function showFileErrors(errors) {
  const list = document.getElementById("upload-errors");
  list.replaceChildren(...errors.map((error) => {
    const item = document.createElement("li");
    item.textContent = `${error.file || "文件"}：${fileReason(error)}`;
    return item;
  }));
  list.hidden = !errors.length;
}

// The file picker offers the types the service reads (/about), nothing else.
function offerUploadTypes() {
  const types = ABOUT.upload_types;
  document.getElementById("upload-files").accept = types.join(",");
  document.getElementById("upload-types").textContent = types.join(" ");
}

// After a reload: follow the selected base's newest upload again if it is still queued or running.
async function followUnfinished() {
  const kb = selectedKb();
  if (!kb) return;
  const response = await fetch(`jobs?kb=${encodeURIComponent(kb)}&size=5`, { headers: kbHeaders() });
  if (!response.ok) return;
  const { jobs } = await response.json();
  const unfinished = jobs.find((job) => job.state === "queued" || job.state === "running");
  if (unfinished) await follow(unfinished.id);
}

document.addEventListener("DOMContentLoaded", () => {
  const select = document.getElementById("kb-select");
  select.addEventListener("change", () => { localStorage.setItem("rag-kb", select.value); showBase(); });
  document.getElementById("upload").addEventListener("submit", upload);
  document.getElementById("kb-create").addEventListener("submit", createKb);
  document.getElementById("kb-delete").addEventListener("click", deleteKb);
  loadAbout().then(offerUploadTypes).catch(() => {});
  document.getElementById("api-key").addEventListener("change", () => loadKbs().then(followUnfinished));
  loadKbs().then(followUnfinished).catch(() => {});
});
