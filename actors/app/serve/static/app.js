// The parlour inspector: conversations, a conversation as its transcript reads, live turns.
// Plain JavaScript, no build step; everything it loads comes from this server. Paths are
// relative, so the app works mounted under a prefix too.
"use strict";
const $ = (id) => document.getElementById(id);
const state = { current: null, cursor: 0, source: null, versions: [], query: "" };
const conversationPath = (id) => `api/conversations/${encodeURIComponent(id)}`;

// Reads of one kind overlap (a turn's end refreshes while a decision's answer redraws) and
// their answers can come back in any order: only the last one asked is drawn.
const asked = {};
function ask(kind) {
  const n = (asked[kind] || 0) + 1;
  asked[kind] = n;
  return () => asked[kind] === n;
}

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  if (response.status === 401) { showSignIn(); throw new Error("signed out"); }
  if (!response.ok && response.status !== 501) {
    const body = await response.json().catch(() => ({ error: response.statusText }));
    throw new Error(body.error);
  }
  return response.status === 204 ? null : response.json();
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function showSignIn() { $("signin").hidden = false; $("app").hidden = true; }

async function signIn(token) {
  const response = await fetch("api/session", { method: "POST", headers: { authorization: "Bearer " + token } });
  if (!response.ok) { showSignIn(); return false; }
  return true;
}

async function start() {
  const fromUrl = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromUrl) { history.replaceState(null, "", location.pathname + location.search); await signIn(fromUrl); }
  let me;
  try { me = await api("api/me"); } catch (e) { return; }
  $("who").textContent = me.user_id;
  $("model").textContent = me.model;
  $("signin").hidden = true; $("app").hidden = false;
  await loadList(true);
  const wanted = new URLSearchParams(location.search).get("c");
  if (wanted) await open(wanted);
}

async function loadList(reset) {
  if (reset) { state.cursor = 0; $("list").replaceChildren(); }
  const q = state.query ? `&q=${encodeURIComponent(state.query)}` : "";
  const page = await api(`api/conversations?limit=20&cursor=${state.cursor}${q}`);
  for (const c of page.conversations) $("list").append(listItem(c));
  state.cursor = page.next || 0;
  $("more").hidden = page.next === null;
}

function listItem(c) {
  const item = el("li");
  item.dataset.id = c.conversation_id;
  item.title = c.conversation_id;
  const when = c.updated_at ? new Date(c.updated_at).toLocaleString() : "not saved yet";
  const exporter = el("a", "export", "act export");
  exporter.href = conversationPath(c.conversation_id) + "/export";
  exporter.download = c.conversation_id + ".json";
  exporter.hidden = !c.updated_at;  // nothing stored to export yet
  const remover = el("button", "delete", "act delete");
  remover.onclick = (e) => { e.stopPropagation(); remove(c.conversation_id, remover); };
  exporter.onclick = (e) => e.stopPropagation();
  const row = el("span", undefined, "row");
  row.append(el("span", when, "when"), exporter, remover);
  item.append(el("span", c.title || "(new chat)", "name"), row);
  item.onclick = () => open(c.conversation_id);
  if (c.conversation_id === state.current) item.classList.add("current");
  return item;
}

async function remove(id, button) {
  if (button.textContent !== "sure?") { button.textContent = "sure?"; return; }  // a second click deletes
  try { await api(conversationPath(id), { method: "DELETE" }); } catch (e) { button.textContent = "delete"; button.title = e.message; return; }
  if (id === state.current) close();
  await loadList(true);
}

function close() {
  state.current = null;
  if (state.source) { state.source.close(); state.source = null; }
  history.replaceState(null, "", location.pathname);
  $("title").textContent = "Pick or start a chat";
  for (const id of ["tokens", "status"]) $(id).textContent = "";
  $("messages").replaceChildren();
  for (const id of ["chat", "live", "cancel", "interrupted", "approvals", "prompt-box", "usage-box", "versions-box", "transcript-box"]) $(id).hidden = true;
}

async function open(id) {
  state.current = id;
  $("chat").hidden = true;  // until this conversation's stream is watching
  history.replaceState(null, "", "?c=" + encodeURIComponent(id));
  for (const li of $("list").children) li.classList.toggle("current", li.dataset.id === id);
  await refresh();
  await watch(id);  // sends wait until the stream is watching, so no turn is missed
  for (const box of ["prompt-box", "usage-box", "versions-box", "transcript-box"]) $(box).hidden = false;
  $("chat").hidden = false;
}

async function refresh() {
  if (!state.current) return;
  const latest = ask("conversation");
  const c = await api(conversationPath(state.current));
  if (!latest()) return;  // a later refresh draws the newer state
  $("title").textContent = c.title || "(new chat)";
  $("tokens").textContent = `${c.tokens.used} / ${c.tokens.window} tokens · version ${c.version}`;
  renderMessages($("messages"), c.messages);
  $("transcript").textContent = c.transcript;
  $("interrupted").hidden = !c.interrupted;
  await renderApprovals(state.current);
  renderPrompt(c.prompt);
  renderUsage(c.usage);
  setRunning(c.running);
  await renderVersions(c);
}

// The tool calls the turn waits on, each with approve and deny (a reason for the model).
async function renderApprovals(id) {
  const box = $("approvals");
  const latest = ask("approvals");
  const found = await api(`${conversationPath(id)}/approvals`);
  if (id !== state.current || !latest()) return;  // another conversation, or a newer answer
  box.replaceChildren();
  box.hidden = !found.pending.length;
  if (found.pending.length) box.append(el("p", "The turn waits for your approval of these tool calls:"));
  for (const p of found.pending) {
    const item = el("div", undefined, "approval");
    item.dataset.callId = p.call_id;
    const reason = el("input", undefined, "reason");
    reason.placeholder = "reason (when denying)";
    const approve = el("button", "approve", "act approve");
    const deny = el("button", "deny", "act deny");
    const problem = el("span", "", "problem");
    approve.onclick = () => decide(id, p.call_id, { approve: true }, item, problem);
    deny.onclick = () => decide(id, p.call_id, { approve: false, reason: reason.value }, item, problem);
    item.append(el("code", `${p.tool}(${p.arguments})`), approve, reason, deny, problem);
    box.append(item);
  }
}

async function decide(id, callId, decision, item, problem) {
  for (const b of item.querySelectorAll("button")) b.disabled = true;
  try {
    await api(`${conversationPath(id)}/approvals/${encodeURIComponent(callId)}`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(decision),
    });
  } catch (e) {
    problem.textContent = e.message;
    for (const b of item.querySelectorAll("button")) b.disabled = false;
    return;
  }
  await renderApprovals(id);  // the decision's events (and the turn going on) arrive on the watch
}

function renderPrompt(prompt) {
  $("system").textContent = prompt ? prompt.system : "";
  const box = $("tools");
  box.replaceChildren();
  for (const t of prompt ? prompt.tools : []) {
    const fold = el("details", undefined, "tool");
    const when = t.announced_at ? ` (announced at message ${t.announced_at})` : "";
    fold.append(el("summary", `${t.name}: ${t.description}${when}`), el("pre", JSON.stringify(t.schema, null, 2)));
    box.append(fold);
  }
}

function renderMessages(box, messages) {
  const results = new Map();
  for (const m of messages) for (const b of m.blocks) if (b.type === "tool_result") results.set(b.tool_use_id, b);
  box.replaceChildren();
  for (const m of messages) {
    const text = m.blocks.filter((b) => b.type === "text").map((b) => b.text).join("\n");
    const calls = m.blocks.filter((b) => b.type === "tool_use");
    if (!text && !calls.length) continue;  // tool results fold under their calls
    const node = el("div", undefined, "msg " + m.role);
    node.append(el("span", m.role, "role"), el("span", text));
    for (const call of calls) node.append(toolFold(call.name, call.input_json, results.get(call.id)));
    box.append(node);
  }
}

function toolFold(name, args, result) {
  const fold = el("details", undefined, "tool" + (result && result.is_error ? " error" : ""));
  fold.append(el("summary", `${name}(${args})` + (result ? (result.is_error ? " failed" : "") : " …")));
  let pretty = args;
  try { pretty = JSON.stringify(JSON.parse(args), null, 2); } catch (e) { /* shown as sent */ }
  fold.append(el("pre", "arguments: " + pretty, "args"));
  if (result) fold.append(el("pre", "result: " + (typeof result.content === "string" ? result.content : JSON.stringify(result.content))));
  return fold;
}

function renderUsage(entries) {
  const table = $("usage");
  table.replaceChildren();
  const head = el("tr");
  for (const h of ["#", "kind", "model / level", "input", "output", "cache read", "cache write", "seconds"]) head.append(el("th", h));
  table.append(head);
  const total = { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, latency_s: 0 };
  let n = 0;
  for (const e of entries) {
    const row = el("tr");
    n += 1;
    if (e.kind === "model_call") for (const k in total) total[k] += e[k];
    const cells = e.kind === "model_call"
      ? [n, e.purpose === "summary" ? "summary call" : "model call", e.model, e.input_tokens, e.output_tokens, e.cache_read_tokens, e.cache_write_tokens, e.latency_s.toFixed(2)]
      : [n, "compaction", e.level, e.tokens_before + " before", e.tokens_after + " after", "", "", ""];
    for (const c of cells) row.append(el("td", String(c)));
    table.append(row);
  }
  const sum = el("tr", undefined, "total");
  for (const c of ["", "total", "", total.input_tokens, total.output_tokens, total.cache_read_tokens, total.cache_write_tokens, total.latency_s.toFixed(2)]) sum.append(el("td", String(c)));
  table.append(sum);
}

async function renderVersions(c) {
  const box = $("versions");
  const latest = ask("versions");
  if (!c.versions_supported) { box.replaceChildren(el("p", `This store answers no version history; this is version ${c.version}.`)); return; }
  if (!c.version) { box.replaceChildren(el("p", "Not saved yet: its first message makes version 1.")); return; }
  const found = await api(`${conversationPath(c.conversation_id)}/versions`);
  if (!latest()) return;
  box.replaceChildren();
  if (!found.versions) { box.append(el("p", found.error || "No version history.")); return; }
  for (const v of found.versions) {
    const at = new Date(v.saved_at).toLocaleTimeString();
    const button = el("button", `v${v.version} · ${at} · ${v.step || "saved"}`);
    button.onclick = () => showVersion(c.conversation_id, v.version);
    box.append(button);
  }
}

async function showVersion(id, version) {
  const old = await api(`api/conversations/${encodeURIComponent(id)}/versions/${encodeURIComponent(version)}`);
  const now = $("transcript").textContent.split("\n");
  const then = old.transcript.split("\n");
  $("diff").textContent = now.slice(then.length).map((l) => "+ " + l).join("\n") || "(no change since)";
}

function setRunning(running) {
  $("status").textContent = running ? "turn running" : "idle";
  $("status").classList.toggle("running", running);
  $("cancel").hidden = !running;
}

function watch(id) {
  if (state.source) state.source.close();
  const source = new EventSource(`api/conversations/${encodeURIComponent(id)}/events`);
  state.source = source;
  const watching = new Promise((resolve) => source.addEventListener("watching", resolve, { once: true }));
  let live = null, text = null;
  const begin = () => {
    live = $("live"); live.hidden = false; live.replaceChildren();
    live.className = "msg assistant"; live.append(el("span", "assistant (live)", "role"));
    text = el("span"); live.append(text); setRunning(true);
  };
  source.addEventListener("turn_start", begin);
  source.addEventListener("text_delta", (e) => { if (!live) begin(); text.textContent += JSON.parse(e.data).text; });
  source.addEventListener("restart", () => { if (text) text.textContent = ""; });
  source.addEventListener("tool_call", (e) => { if (!live) begin(); const d = JSON.parse(e.data); live.append(toolFold(d.name, d.arguments)); text = el("span"); live.append(text); });
  source.addEventListener("tool_result", (e) => { const d = JSON.parse(e.data); live.append(el("pre", (d.is_error ? "error: " : "") + d.content)); });
  const end = (label) => async (e) => {
    if (label && live) live.append(el("p", label + ": " + JSON.parse(e.data).message));
    await refresh(); await loadList(true);
    if (!label) { $("live").hidden = true; live = null; }
  };
  source.addEventListener("done", end(null));
  source.addEventListener("error", (e) => { if (e.data) end("failed")(e); });
  source.addEventListener("cancelled", end("cancelled"));
  source.addEventListener("approval_decided", (e) => {
    const d = JSON.parse(e.data);
    if (live) live.append(el("p", `${d.approved ? "approved" : "denied"} ${d.tool}` + (d.reason ? `: ${d.reason}` : "")));
  });
  return watching;
}

async function send(text) {
  const id = state.current;
  if (!id) return;  // no conversation is open: there is nowhere to send it
  await api(`api/conversations/${encodeURIComponent(id)}/messages`, {
    method: "POST", headers: { "content-type": "application/json", accept: "application/json" },
    body: JSON.stringify({ text }),
  });
}

$("new").onclick = async () => {
  const created = await api("api/conversations", { method: "POST" });
  await loadList(true);
  await open(created.conversation_id);
};
$("more").onclick = () => loadList(false);
let searching = null;
$("search").oninput = () => {
  clearTimeout(searching);
  searching = setTimeout(() => { state.query = $("search").value.trim(); loadList(true); }, 200);
};
$("cancel").onclick = () => api(`api/conversations/${encodeURIComponent(state.current)}/cancel`, { method: "POST" });
$("chat").onsubmit = (e) => { e.preventDefault(); const t = $("text").value.trim(); if (t && state.current) { $("text").value = ""; send(t); } };
$("text").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("chat").requestSubmit(); } };
$("signin-form").onsubmit = async (e) => { e.preventDefault(); if (await signIn($("token").value)) start(); };
start();
