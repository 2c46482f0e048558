// What a person reads when something fails: Chinese, saying what to do, never a setting's name or an
// API path. The API keeps its own codes and fields (HTTP status, a 422's `loc` and `type`, a job
// error's `code`); this file maps them to words. `ABOUT` is the service's /about (limits, file types).
"use strict";

let ABOUT = { max_question_chars: 2000, max_upload_mb: 50, max_upload_files: 20, upload_types: [], web_search: false };

// What was being done, for the messages that depend on it (a 404 of a question set is no missing base).
const FAILED_DOING = {
  ask: "提问", compare: "对比检索", upload: "上传", create: "新建知识库", deleteKb: "删除知识库",
  questions: "读取问题集", evaluate: "评测", draft: "起草问题", vote: "评价", documents: "读取文档",
  aliases: "别名",
};

const BY_STATUS = {
  400: "请求格式有误，请刷新页面后重试",
  401: "需要 API 密钥：请在“访问设置”里填写管理员给你的密钥",
  403: "当前密钥没有权限做这件事，请向管理员申请",
  404: "找不到这个知识库或内容，它可能已被删除：请刷新页面后重新选择",
  409: "知识库与当前服务的设置不一致，请联系管理员",
  413: () => `内容太大：每个文件最多 ${ABOUT.max_upload_mb} MB，一次最多 ${ABOUT.max_upload_files} 个文件，请分批上传`,
  415: "不支持这种内容，请刷新页面后重试",
  422: "输入有误，请检查后再试",
  429: "大模型服务繁忙，请稍等片刻再试",
  502: "依赖的服务出错，请稍后再试",
  503: "服务暂时不可用（搜索引擎或大模型未就绪），请稍后再试",
};

const NO_QUESTION_SET = "这个知识库还没有问题集：按上面的三种办法之一得到一个";

const BY_DOING = {
  "create:403": "只有有写入或管理权限的密钥才能新建知识库，请向管理员申请",
  "create:409": "已有同名的知识库，请换一个名字",
  "create:422": "名称只能用小写字母、数字和 - _ .，以字母或数字开头，最长 100 个字符",
  "deleteKb:403": "只有这个知识库的管理员可以删除它",
  "upload:403": "当前密钥只能读取这个知识库，不能上传",
  "questions:404": NO_QUESTION_SET,
  "evaluate:404": NO_QUESTION_SET,
  "questions:422": "问题集文件无法读取：请确认每行是一个 JSON 对象，可对照示例",
  "draft:503": "起草问题需要已连接的大模型；没有大模型时，请下载示例自己写问题",
  "evaluate:409": "已有一次评测在进行，请等它结束",
  "aliases:422": "别名和它指的名字都要填写，且不能相同",
};

// A 422 names its field (`loc`) and its kind (`type`): the field the person typed in decides the words.
function invalidField(body) {
  const first = Array.isArray(body.detail) ? body.detail[0] || {} : {};
  const field = (first.loc || []).slice(-1)[0];
  if ((field === "question" || field === "query") && first.type === "string_too_long") {
    return `问题最长 ${ABOUT.max_question_chars} 字，请缩短后再问`;
  }
  if (field === "question" || field === "query") return "请输入问题";
  if (field === "files") return `只能上传这些类型的文件：${ABOUT.upload_types.join(" ")}`;
  return null;
}

// The message for a failed response; `doing` is a key of FAILED_DOING.
async function friendlyError(response, doing) {
  let body = {};
  try { body = await response.json(); } catch (_) { /* not JSON */ }
  const text = BY_DOING[`${doing}:${response.status}`] || (response.status === 422 && invalidField(body))
    || BY_STATUS[response.status] || "服务内部出错，请稍后再试；反复出现请联系管理员";
  const said = typeof text === "function" ? text() : text;
  return `${FAILED_DOING[doing] || "操作"}失败：${said}`;
}

function networkError(doing) {
  return `${FAILED_DOING[doing] || "操作"}失败：连接中断，请检查网络后重试`;
}

// Why one file of an upload was not indexed (the job's per-file `code`).
const FILE_REASONS = {
  unsupported: () => `不是本服务能读的文件类型，请上传 ${ABOUT.upload_types.join(" ")}`,
  empty: "文件里没有可索引的文字（扫描件需先做文字识别）",
  wrong_type: "文件内容与扩展名不符，请确认文件类型",
  corrupt: "文件已损坏或不完整，请重新导出后再上传",
  encrypted: "文件有密码保护，请去掉密码后再上传",
  too_large: "文件太大，请拆分后再上传",
  too_many_pages: "页数太多，请拆分后再上传",
  bad_line: "有一行不是有效的 JSON，请检查该行",
  duplicate_id: "文档编号与另一篇重复，请改名后再上传",
  timeout: "读取超时，文件可能过于复杂，请拆分后再上传",
  crashed: "读取时出错，文件可能损坏或过于复杂",
  out_of_memory: "文件太复杂，读取时内存不足，请拆分后再上传",
  missing: "文件不见了，请重新上传",
  chunk_failed: "部分段落没能写入，请稍后重新上传",
};

function fileReason(error) {
  const reason = FILE_REASONS[error.code] || "无法读取这个文件，请检查后重新上传";
  return typeof reason === "function" ? reason() : reason;
}

const JOB_STATES = { queued: "排队中", running: "正在索引", done: "已完成", failed: "失败", cancelled: "已取消" };

// The answer stream's `error` event: its type decides what to say.
function streamError(data) {
  if (data.type === "IndexNotFoundError") return "回答失败：这个知识库的索引不见了，请刷新页面后重新选择";
  if (data.type === "EmbedderMismatchError") return "回答失败：知识库与当前的向量模型不匹配，请联系管理员重建索引";
  return "回答失败：服务暂时出错，请稍后再问" + (data.error_id ? `（错误编号 ${data.error_id}）` : "");
}

let aboutLoaded = null;

// /about once per page: kbs.js (the file types) and app.js (the model, web search) both wait for it.
function loadAbout() {
  aboutLoaded = aboutLoaded || fetch("about", { headers: kbHeaders() }).then(async (response) => {
    if (response.ok) ABOUT = await response.json();
    return ABOUT;
  });
  return aboutLoaded;
}
