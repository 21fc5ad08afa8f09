// The acpgate web console: sign in with a gateway token, list and open sessions, take part
// in them, and (for an admin token) watch the host. Every call goes over the gateway's own
// /acp (ACP over a WebSocket); the token lives in this tab's sessionStorage only.

import { AcpClient, RpcError, acpUrl } from "./acp.js";
import { Transcript, contentNode } from "./transcript.js";
import { renderHost } from "./host.js";
import {
  AGENT_KEY, M_AGENTS_LIST, dirProblem, fillAgents, fillDirs, forgetChoices, isDirError,
  rememberDir, showDirError,
} from "./newsession.js";

const TOKEN_KEY = "acpgate.console.token";
const CLIENT_INFO = { name: "acpgate-console", version: "1" };
const SECTIONS = ["signin", "sessions", "session", "host"];
const HOST_POLL_MS = 2000;

const $ = (id) => document.getElementById(id);

const state = {
  client: null,
  canAttach: false,
  sessions: [],
  views: new Map(), // sessionId → { box, transcript, role, title, running }
  openId: null,
  permissions: new Map(), // request id → { params, resolve }
  hostTimer: null,
};

function show(section) {
  for (const id of SECTIONS) $(id).hidden = id !== section;
  current($("nav-sessions"), section === "sessions" || section === "session");
  current($("nav-host"), section === "host");
  if (section === "host") startHostPolling(); else stopHostPolling();
  const heading = $(section).querySelector("h2");
  if (heading) { heading.tabIndex = -1; heading.focus({ preventScroll: true }); }
}

function current(node, on) {
  if (on) node.setAttribute("aria-current", "page"); else node.removeAttribute("aria-current");
}

function setStatus(id, text, isError) {
  const node = $(id);
  node.textContent = text;
  node.classList.toggle("error", !!isError);
}

function describe(err) {
  if (err instanceof RpcError) return `${err.message}${err.code !== undefined ? ` (${err.code})` : ""}`;
  return err?.message ?? String(err);
}

// ------------------------------------------------------------------ sign in / out

async function signIn(token) {
  const client = new AcpClient(acpUrl(window.location), token);
  client.onNotification = onNotification;
  client.onRequest = onRequest;
  client.onClose = onClosed;
  await client.connect();
  const init = await client.request("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: CLIENT_INFO,
  });
  state.client = client;
  state.canAttach = !!init?.agentCapabilities?.sessionCapabilities?.attach;
  sessionStorage.setItem(TOKEN_KEY, token);
  let admin = false;
  try {
    await client.request("_acpgate/host/ps", {});
    admin = true;
  } catch { /* not an admin token: no host page */ }
  $("nav-host").hidden = !admin;
  $("nav").hidden = false;
  document.body.dataset.signedIn = "true";
  await loadAgents();
  await showSessions();
}

function signOut(message) {
  stopHostPolling();
  sessionStorage.removeItem(TOKEN_KEY);
  forgetChoices(sessionStorage);
  $("new-cwd").value = "";
  showDirError($("new-cwd"), $("new-cwd-error"), "");
  const client = state.client;
  state.client = null;
  state.views.clear();
  state.openId = null;
  state.permissions.clear();
  renderPermission();
  if (client) client.close();
  $("nav").hidden = true;
  delete document.body.dataset.signedIn;
  $("signin-error").textContent = message ?? "";
  show("signin");
  $("token").focus();
}

function onClosed() {
  if (state.client) signOut("The gateway closed the connection (token revoked, or gateway stopped). Sign in again.");
}

// ------------------------------------------------------------------ sessions list

function cell(text, label) {
  const td = document.createElement("td");
  td.textContent = text;
  td.dataset.label = label; // shown beside the value on a phone (the header is hidden there)
  return td;
}

function button(text, label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  if (label) b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

async function showSessions() {
  show("sessions");
  await refreshSessions();
}

async function refreshSessions() {
  setStatus("sessions-status", "Loading…");
  let result;
  try {
    result = await state.client.request("session/list", {});
  } catch (err) {
    setStatus("sessions-status", `Could not list sessions: ${describe(err)}`, true);
    return;
  }
  state.sessions = Array.isArray(result?.sessions) ? result.sessions : [];
  state.sessions.sort((a, b) => String(b.updatedAt ?? "").localeCompare(String(a.updatedAt ?? "")));
  const body = $("session-table").querySelector("tbody");
  body.replaceChildren();
  for (const s of state.sessions) {
    const meta = s._meta?.acpgate ?? {};
    const title = s.title || "(untitled)";
    const live = meta.state && meta.state !== "closed";
    const tr = document.createElement("tr");
    tr.dataset.sessionId = s.sessionId;
    const dir = cell(s.cwd ?? "", "Directory");
    dir.className = "path";
    tr.append(cell(title, "Title"), cell(meta.agent ?? "", "Agent"), dir,
              cell(meta.state ?? "stored", "State"),
              cell(String(meta.usage?.totalTokens ?? 0), "Tokens"),
              cell(s.updatedAt ? new Date(s.updatedAt).toLocaleString() : "", "Updated"));
    const actions = document.createElement("td");
    actions.className = "actions";
    actions.append(button("Open", `Open ${title}`, () => openSession(s, "controller")));
    if (state.canAttach && live) {
      actions.append(button("Watch", `Watch ${title}`, () => openSession(s, "observer")));
    }
    tr.append(actions);
    body.append(tr);
  }
  fillDirs($("recent-dirs"), sessionStorage, state.sessions);
  setStatus("sessions-status", state.sessions.length ? `${state.sessions.length} session(s)` : "No sessions yet.");
}

// ------------------------------------------------------------------ one session

function viewOf(sessionId, title, role) {
  let view = state.views.get(sessionId);
  if (!view) {
    const box = document.createElement("div");
    box.className = "conversation";
    view = { box, role, title: title || "(untitled)", running: false, transcript: null };
    view.transcript = new Transcript(box, {
      title: (t) => { view.title = t; if (state.openId === sessionId) $("session-title").textContent = t; },
      turnStarted: () => setRunning(view, true),
      turnComplete: (reason) => { setRunning(view, false); view.transcript.note(`Turn ended: ${reason ?? "done"}`); },
      permissionResolved: () => renderPermission(),
    });
    state.views.set(sessionId, view);
  }
  return view;
}

function enter(sessionId) {
  const view = state.views.get(sessionId);
  state.openId = sessionId;
  $("session-title").textContent = view.title;
  $("session-mode").textContent = view.role === "observer" ? "watching" : "";
  $("transcript").replaceChildren(view.box);
  $("transcript").scrollTop = $("transcript").scrollHeight;
  $("prompt").disabled = view.role === "observer";
  $("send").disabled = view.role === "observer";
  setRunning(view, view.running);
  show("session");
  renderPermission();
}

function setRunning(view, running) {
  view.running = running;
  if (state.views.get(state.openId) !== view) return;
  $("cancel").disabled = !running || view.role === "observer";
  setStatus("turn-status", running ? "Agent is working…" : "");
}

function historyItem(view, item) {
  if (!item || typeof item !== "object") return;
  if (item.sessionUpdate) view.transcript.update(item);
  else if (item.type === "prompt") view.transcript.prompt(typeof item.content === "string" ? item.content : "");
  else if (item.update) view.transcript.update(item.update);
}

/** session/attach (the multi-client attach RFD); false when a controller should load instead. */
async function attach(view, sid, role) {
  let result;
  try {
    result = await state.client.request("session/attach", {
      sessionId: sid, role, historyPolicy: "full", clientInfo: CLIENT_INFO });
  } catch (err) {
    if (role === "observer") throw err;
    return false; // e.g. no longer live, or not attachable: a controller loads it
  }
  view.transcript.note(role === "observer" ? "Watching this session live." : "Attached to this session.");
  for (const item of Array.isArray(result?.history) ? result.history : []) historyItem(view, item);
  return true;
}

async function openSession(info, role) {
  const sid = info.sessionId;
  if (state.views.has(sid)) { enter(sid); return; }
  const view = viewOf(sid, info.title, role);
  enter(sid);
  const live = (info._meta?.acpgate?.state ?? "closed") !== "closed";
  try {
    if (state.canAttach && live && await attach(view, sid, role)) return;
    if (role === "observer") throw new Error("this session cannot be watched now");
    view.role = "controller";
    await state.client.request("session/load", { sessionId: sid, cwd: info.cwd ?? "", mcpServers: [] });
    view.transcript.note("History loaded.");
  } catch (err) {
    view.transcript.note(`Could not open the session: ${describe(err)}`, "error");
    state.views.delete(sid);
  }
}

/** The agents this token may start, into the New session form's select. */
async function loadAgents() {
  let agents = [];
  try {
    agents = (await state.client.request(M_AGENTS_LIST, {}))?.agents ?? [];
  } catch { /* a gateway without the list: its default agent only */ }
  fillAgents($("new-agent"), agents, sessionStorage.getItem(AGENT_KEY));
}

async function newSession(alias, dir) {
  const field = $("new-cwd");
  const problem = dirProblem(dir);
  showDirError(field, $("new-cwd-error"), problem);
  if (problem) { field.focus(); return; }
  setStatus("sessions-status", "Starting a session…");
  let result;
  try {
    const params = { cwd: dir, mcpServers: [] };
    if (alias) params.agentAlias = alias;
    result = await state.client.request("session/new", params);
  } catch (err) {
    if (isDirError(err?.message)) {
      setStatus("sessions-status", "");
      showDirError(field, $("new-cwd-error"), `The gateway refused this directory: ${err.message}`);
      field.focus();
    } else {
      setStatus("sessions-status", `Could not start a session: ${describe(err)}`, true);
    }
    return;
  }
  if (alias) sessionStorage.setItem(AGENT_KEY, alias);
  rememberDir(sessionStorage, dir);
  viewOf(result.sessionId, "New session", "controller");
  enter(result.sessionId);
  $("prompt").focus();
}

async function sendPrompt() {
  const sid = state.openId;
  const view = state.views.get(sid);
  const text = $("prompt").value;
  if (!view || !text.trim() || view.running) return;
  $("prompt").value = "";
  if (view.title === "New session") { // until the agent names it: its first line, as session/list does
    view.title = text.trim().split("\n")[0].slice(0, 80);
    $("session-title").textContent = view.title;
  }
  view.transcript.prompt(text);
  setRunning(view, true);
  try {
    const result = await state.client.request("session/prompt", {
      sessionId: sid, prompt: [{ type: "text", text }] });
    view.transcript.note(`Turn ended: ${result?.stopReason ?? "done"}`);
  } catch (err) {
    view.transcript.note(`The prompt failed: ${describe(err)}`, "error");
  } finally {
    setRunning(view, false);
  }
}

// ------------------------------------------------------------------ from the gateway

function onNotification(method, params) {
  if (method === "session/update") {
    const view = state.views.get(params?.sessionId);
    if (view) view.transcript.update(params.update);
  } else if (method === "$/cancel_request") {
    state.permissions.get(params?.requestId)?.resolve({ outcome: { outcome: "cancelled" } });
  }
}

function onRequest(method, params, id) {
  if (method !== "session/request_permission") {
    return Promise.reject(new RpcError({ code: -32601, message: `Method not found: ${method}` }));
  }
  // The request names the tool call it guards (a ToolCallUpdate, often with the diff): a
  // call already shown is updated; an agent's own approval id gets no card of its own.
  const call = params?.toolCall;
  const transcript = state.views.get(params?.sessionId)?.transcript;
  if (transcript?.hasTool(call?.toolCallId)) {
    transcript.update({ ...call, sessionUpdate: "tool_call_update" });
  }
  return new Promise((resolve) => {
    state.permissions.set(id, {
      params,
      resolve: (answer) => { state.permissions.delete(id); renderPermission(); resolve(answer); },
    });
    renderPermission();
  });
}

function renderPermission() {
  const box = $("permission");
  const first = [...state.permissions.entries()][0];
  if (!first) { box.hidden = true; box.replaceChildren(); return; }
  const [id, { params, resolve }] = first;
  const title = params?.toolCall?.title ?? "A tool";
  const heading = document.createElement("h3");
  heading.id = "permission-title";
  heading.textContent = "Permission requested";
  const what = document.createElement("p");
  what.textContent = params?.sessionId === state.openId
    ? `The agent asks to run: ${title}`
    : `Session ${params?.sessionId ?? "?"} asks to run: ${title}`;
  const buttons = document.createElement("div");
  buttons.className = "row";
  for (const option of Array.isArray(params?.options) ? params.options : []) {
    const b = button(String(option?.name ?? option?.optionId ?? "?"), null,
                     () => resolve({ outcome: { outcome: "selected", optionId: option.optionId } }));
    b.className = String(option?.kind ?? "").startsWith("reject") ? "reject" : "allow";
    b.dataset.optionId = String(option?.optionId ?? "");
    buttons.append(b);
  }
  // What it would do (a file change's diff, a command), shown before the choice.
  const content = Array.isArray(params?.toolCall?.content) ? params.toolCall.content : [];
  const details = content.map((c) => contentNode(document, c));
  box.setAttribute("aria-labelledby", "permission-title");
  box.dataset.requestId = String(id);
  box.replaceChildren(heading, what, ...details, buttons);
  const wasHidden = box.hidden;
  box.hidden = false;
  if (wasHidden) buttons.querySelector("button")?.focus();
}

// ------------------------------------------------------------------ host page

async function refreshHost() {
  if (!state.client) return;
  try {
    const report = await state.client.request("_acpgate/host/ps", {});
    renderHost($("host-list"), report, hostAction);
    setStatus("host-status", `Updated ${new Date().toLocaleTimeString()}`);
  } catch (err) {
    setStatus("host-status", `Could not read the host: ${describe(err)}`, true);
  }
}

async function hostAction(action, sessionId) {
  try {
    await state.client.request(`_acpgate/host/${action}`, { sessionId });
    setStatus("host-status", `${action === "close" ? "Closed" : "Cancelled"} ${sessionId}`);
  } catch (err) {
    setStatus("host-status", `${action} failed: ${describe(err)}`, true);
  }
  await refreshHost();
}

function startHostPolling() {
  stopHostPolling();
  refreshHost();
  state.hostTimer = setInterval(() => { if ($("host-live").checked) refreshHost(); }, HOST_POLL_MS);
}

function stopHostPolling() {
  if (state.hostTimer !== null) clearInterval(state.hostTimer);
  state.hostTimer = null;
}

// ------------------------------------------------------------------ wiring

function wire() {
  $("signin-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = $("token").value.trim();
    $("signin-error").textContent = "";
    try {
      await signIn(token);
      $("token").value = "";
    } catch (err) {
      sessionStorage.removeItem(TOKEN_KEY);
      $("signin-error").textContent = describe(err);
    }
  });
  $("sign-out").addEventListener("click", () => signOut());
  $("nav-sessions").addEventListener("click", () => showSessions());
  $("nav-host").addEventListener("click", () => show("host"));
  $("back").addEventListener("click", () => showSessions());
  $("refresh").addEventListener("click", () => refreshSessions());
  $("new-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    newSession($("new-agent").value, $("new-cwd").value.trim());
  });
  $("new-cwd").addEventListener("input", () => showDirError($("new-cwd"), $("new-cwd-error"), ""));
  $("prompt-form").addEventListener("submit", (ev) => { ev.preventDefault(); sendPrompt(); });
  $("prompt").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); sendPrompt(); }
  });
  $("cancel").addEventListener("click", () => {
    if (state.openId) state.client?.notify("session/cancel", { sessionId: state.openId });
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape" && !$("session").hidden && state.permissions.size === 0) showSessions();
  });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) {
    signIn(saved).catch((err) => signOut(describe(err)));
  } else {
    show("signin");
  }
}

wire();
