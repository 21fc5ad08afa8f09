// The "New session" form: which agent (the gateway's `_acpgate/agents/list`: the agents this
// token may start, the default marked) and which project directory (session/new's `cwd`;
// empty = the agent's own workspace). The directories used in this tab are remembered in its
// sessionStorage, like the token, and offered with those of the token's existing sessions.

export const M_AGENTS_LIST = "_acpgate/agents/list";
export const RECENT_KEY = "acpgate.console.recentDirs";
export const AGENT_KEY = "acpgate.console.agent";
const MAX_RECENT = 8;
const MAX_OFFERED = 20;

/** The directories this tab started sessions in, newest first. */
export function recentDirs(storage) {
  try {
    const saved = JSON.parse(storage.getItem(RECENT_KEY) ?? "[]");
    return Array.isArray(saved) ? saved.filter((d) => typeof d === "string" && d) : [];
  } catch {
    return []; // unreadable: start afresh
  }
}

/** Puts `dir` first in this tab's recent directories (none for the agent workspace). */
export function rememberDir(storage, dir) {
  if (!dir) return;
  const dirs = [dir, ...recentDirs(storage).filter((d) => d !== dir)].slice(0, MAX_RECENT);
  storage.setItem(RECENT_KEY, JSON.stringify(dirs));
}

/** Forgets what the form remembered (sign-out). */
export function forgetChoices(storage) {
  storage.removeItem(RECENT_KEY);
  storage.removeItem(AGENT_KEY);
}

/**
 * Why `dir` cannot be sent as a cwd ("" = it can). The gateway resolves a relative path
 * against its own working directory and never expands `~`, neither of which a browser
 * user can see: the console asks for the absolute path instead.
 */
export function dirProblem(dir) {
  if (!dir) return "";
  if (dir.startsWith("~")) {
    return `“${dir}” starts with ~, which the gateway does not expand: give the full path ` +
      "(e.g. /home/you/project).";
  }
  if (!dir.startsWith("/")) {
    return `“${dir}” is a relative path: give the directory's absolute path on the ` +
      "gateway's host (starting with /), or leave the field empty for the agent's workspace.";
  }
  return "";
}

/** Whether a session/new refusal is about the directory (shown by its field). */
export function isDirError(message) {
  return /^cwd\b/.test(String(message ?? ""));
}

/** An agent's option text: alias, the default marked, what it is. */
export function agentLabel(agent) {
  const about = agent.description || agent.model || "";
  return `${agent.alias}${agent.default ? " (default)" : ""}${about ? ` — ${about}` : ""}`;
}

/**
 * Fills the agent select from the list (`_acpgate/agents/list`'s `agents`); `chosen` (this
 * tab's last choice) is selected when listed, else the default. Without a list (a gateway
 * that does not serve it) one option stands for the gateway's default agent.
 */
export function fillAgents(select, agents, chosen) {
  const doc = select.ownerDocument;
  const options = (Array.isArray(agents) ? agents : [])
    .filter((a) => a && typeof a.alias === "string" && a.alias)
    .map((a) => Object.assign(doc.createElement("option"), {
      value: a.alias, textContent: agentLabel(a), selected: !!a.default }));
  if (!options.length) {
    options.push(Object.assign(doc.createElement("option"), {
      value: "", textContent: "The gateway's default agent" }));
  }
  select.replaceChildren(...options);
  if (chosen && options.some((o) => o.value === chosen)) select.value = chosen;
}

/** Offers this tab's recent directories, then those of the listed sessions. */
export function fillDirs(datalist, storage, sessions) {
  const seen = new Set(recentDirs(storage));
  for (const s of Array.isArray(sessions) ? sessions : []) {
    if (typeof s?.cwd === "string" && s.cwd) seen.add(s.cwd);
  }
  const doc = datalist.ownerDocument;
  datalist.replaceChildren(...[...seen].slice(0, MAX_OFFERED).map(
    (d) => Object.assign(doc.createElement("option"), { value: d })));
}

/** Shows `message` by the directory field ("" clears it), marking the field invalid. */
export function showDirError(input, box, message) {
  box.textContent = message;
  if (message) input.setAttribute("aria-invalid", "true");
  else input.removeAttribute("aria-invalid");
}
