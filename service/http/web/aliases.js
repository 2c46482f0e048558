// 别名 (a base's aliases, for its admins): the pairs its keyword lists take as one, each with the
// sentence it was found in; remove one, add one, restore a removed one, or take the list to a
// spreadsheet as CSV. Every change PUTs the whole list (GET/PUT kbs/{kb}/aliases). Uses kbs.js
// (`selectedKb`, `kbHeaders`); every server text goes in as text.
"use strict";

const ORIGIN_NAMES = { mined: "文中发现", admin: "管理员添加", removed: "已移除" };
let shownAliases = { aliases: [], removed: [] };

function aliasStatus(message, bad = false) {
  const status = document.getElementById("aliases-status");
  status.textContent = message;
  status.className = bad ? "error" : "";
}

function aliasesUrl(kb, query = "") {
  return `kbs/${encodeURIComponent(kb)}/aliases${query}`;
}

async function loadAliases() {
  const kb = selectedKb();
  const list = document.getElementById("aliases");
  list.replaceChildren();
  shownAliases = { aliases: [], removed: [] };
  if (!kb || !document.getElementById("aliases-section").open) return;
  const response = await fetch(aliasesUrl(kb), { headers: kbHeaders() });
  if (response.status === 403) { aliasStatus("仅知识库管理员可查看和修改别名"); return; }
  if (!response.ok) { aliasStatus(await friendlyError(response, "aliases"), true); return; }
  shownAliases = await response.json();
  aliasStatus(`${shownAliases.aliases.length} 组别名，${shownAliases.removed.length} 组已移除`);
  for (const entry of [...shownAliases.aliases, ...shownAliases.removed]) list.append(aliasRow(entry));
}

function aliasRow(entry) {
  const row = document.createElement("li");
  row.dataset.origin = entry.origin;
  const source = entry.sources.length ? ` · ${entry.sources[0].label}：${entry.sources[0].sentence}` : "";
  const label = document.createElement("span");
  label.textContent = `${entry.alias} → ${entry.name}（${ORIGIN_NAMES[entry.origin]}）${source}`;
  const removed = entry.origin === "removed";
  const button = document.createElement("button");
  button.type = "button";
  button.className = removed ? "restore-alias" : "remove-alias";
  button.textContent = removed ? "恢复" : "移除";
  button.addEventListener("click", () => saveAliases(entry, removed));
  row.append(label, " ", button);
  return row;
}

// The whole list again, with `changed` added (`keep`) or left out.
async function saveAliases(changed, keep) {
  const kb = selectedKb();
  const same = (e) => e.alias === changed.alias && e.name === changed.name;
  const pairs = shownAliases.aliases.filter((e) => !same(e)).map(({ alias, name }) => ({ alias, name }));
  if (keep) pairs.push({ alias: changed.alias, name: changed.name });
  const response = await fetch(aliasesUrl(kb), {
    method: "PUT", headers: kbHeaders(), body: JSON.stringify({ aliases: pairs }),
  });
  if (!response.ok) { aliasStatus(await friendlyError(response, "aliases"), true); return; }
  await loadAliases();
}

function addAlias(event) {
  event.preventDefault();
  const alias = document.getElementById("alias-new").value.trim();
  const name = document.getElementById("alias-name").value.trim();
  if (alias && name) saveAliases({ alias, name }, true);
}

async function downloadAliases() {
  const kb = selectedKb();
  const response = await fetch(aliasesUrl(kb, "?format=csv"), { headers: kbHeaders() });
  if (!response.ok) { aliasStatus(await friendlyError(response, "aliases"), true); return; }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = `${kb}-aliases.csv`;
  link.click();
  URL.revokeObjectURL(link.href);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("aliases-section").addEventListener("toggle", loadAliases);
  document.getElementById("kb-select").addEventListener("change", loadAliases);
  document.getElementById("alias-add").addEventListener("submit", addAlias);
  document.getElementById("aliases-csv").addEventListener("click", downloadAliases);
});
