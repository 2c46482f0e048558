// Knowledge bases on the page: the selector every request uses, uploads with a progress bar,
// and the document list with delete. Loaded before app.js, which reads `selectedKb()`.
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

function kbStatus(message, bad = false) {
  const status = document.getElementById("upload-status");
  status.textContent = message;
  status.className = bad ? "error" : "";
}

async function loadKbs() {
  const select = document.getElementById("kb-select");
  const shown = select.value;
  const response = await fetch("kbs", { headers: kbHeaders() });
  if (!response.ok) { select.replaceChildren(); return; }
  const { kbs } = await response.json();
  const previous = localStorage.getItem("rag-kb") || select.value;
  select.replaceChildren(...kbs.map((kb) => {
    const option = document.createElement("option");
    option.value = kb.name;
    option.textContent = `${kb.name}（${kb.documents} 篇 · ${kb.chunks} 段）`;
    return option;
  }));
  if (kbs.some((kb) => kb.name === previous)) select.value = previous;
  else if (kbs.length) select.value = (kbs.find((kb) => kb.default) || kbs[0]).name;
  // A base newly chosen is announced, so panels opened before the list arrived (the evaluation tab,
  // the review) follow it; the change listener loads its documents.
  if (select.value !== shown) select.dispatchEvent(new Event("change"));
  else await loadDocuments();
}

async function loadDocuments() {
  const kb = selectedKb();
  const list = document.getElementById("documents");
  list.replaceChildren();
  if (!kb) return;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/documents`, { headers: kbHeaders() });
  if (!response.ok) return;
  const { documents, total } = await response.json();
  document.getElementById("documents-total").textContent = `共 ${total} 篇`;
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
  if (!confirm(`删除文档 ${docId}？`)) return;
  const response = await fetch(`kbs/${encodeURIComponent(kb)}/documents/${encodeURIComponent(docId)}`, {
    method: "DELETE", headers: kbHeaders(),
  });
  kbStatus(response.ok ? `已删除 ${docId}` : `删除失败（HTTP ${response.status}）`, !response.ok);
  await loadKbs();
}

async function upload(event) {
  event.preventDefault();
  const kb = selectedKb();
  const files = document.getElementById("upload-files").files;
  if (!kb || !files.length) { kbStatus("请选择知识库和文件", true); return; }
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
      kbStatus(`上传失败（HTTP ${response.status}）：${body.message || body.detail || response.statusText}`, true);
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
    if (!response.ok) { kbStatus(`无法读取任务 ${jobId}（HTTP ${response.status}）`, true); return; }
    const job = await response.json();
    const counts = job.counts || {};
    const todo = counts.new || 0;
    bar.value = job.state === "done" ? 1 : todo ? (counts.indexed || 0) / todo : 0;
    const errors = (job.errors || []).map((e) => `${e.file || ""}：${e.reason}`).join("；");
    kbStatus(
      `任务 ${job.state} · 文件 ${counts.files || 0} · 新写入 ${counts.indexed || 0}/${todo} 段 · 未变 ${counts.unchanged || 0} 段` +
        (errors ? ` · 失败：${errors}` : "") + (job.error ? ` · ${job.error}` : ""),
      job.state === "failed" || Boolean(errors),
    );
    if (job.state === "done" || job.state === "failed") break;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  await loadKbs();
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
  select.addEventListener("change", () => { localStorage.setItem("rag-kb", select.value); loadDocuments(); });
  document.getElementById("upload").addEventListener("submit", upload);
  document.getElementById("api-key").addEventListener("change", () => loadKbs().then(followUnfinished));
  loadKbs().then(followUnfinished).catch(() => {});
});
