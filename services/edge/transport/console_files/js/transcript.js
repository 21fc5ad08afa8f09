// One session's conversation as DOM: messages (markdown), thoughts (collapsed), tool calls
// with status and diffs, plans, and the multi-client updates of the attach RFD.
//
// Everything the agent (or another client) sent is text: it reaches the page only through
// textContent / Text nodes and the markdown renderer, which parses no HTML.

import { render } from "./markdown.js";

/** The text of an ACP content block (text; a resource link's name; placeholders). */
export function blockText(block) {
  if (!block || typeof block !== "object") return "";
  switch (block.type) {
    case "text": return String(block.text ?? "");
    case "resource_link": return `[${block.name ?? block.uri ?? "resource"}]`;
    case "resource": return String(block.resource?.text ?? `[${block.resource?.uri ?? "resource"}]`);
    case "image": return "[image]";
    case "audio": return "[audio]";
    default: return "";
  }
}

function promptText(prompt) {
  if (typeof prompt === "string") return prompt;
  return Array.isArray(prompt) ? prompt.map(blockText).join("") : "";
}

function make(doc, name, className, text) {
  const node = doc.createElement(name);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Lines of `oldText` → `newText` as [sign, line] (a small LCS; big files: all -, all +). */
export function lineDiff(oldText, newText) {
  const lines = (t) => { const l = String(t ?? "").split("\n"); if (l.at(-1) === "") l.pop(); return l; };
  const a = lines(oldText);
  const b = lines(newText);
  if (oldText == null || oldText === "") return b.map((l) => ["+", l]);
  if (a.length * b.length > 250000) return [...a.map((l) => ["-", l]), ...b.map((l) => ["+", l])];
  const dp = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      dp[i][j] = a[i] === b[j] ? dp[i + 1][j + 1] + 1 : Math.max(dp[i + 1][j], dp[i][j + 1]);
    }
  }
  const out = [];
  let i = 0, j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (dp[i + 1][j] >= dp[i][j + 1]) out.push(["-", a[i++]]);
    else out.push(["+", b[j++]]);
  }
  while (i < a.length) out.push(["-", a[i++]]);
  while (j < b.length) out.push(["+", b[j++]]);
  return out;
}

/** One piece of a tool call's content as DOM: a diff, text (markdown), a terminal. */
export function contentNode(doc, c) {
  if (c?.type === "diff") {
    const box = make(doc, "figure", "diff");
    box.append(make(doc, "figcaption", "", String(c.path ?? "")));
    const pre = make(doc, "pre");
    for (const [sign, line] of lineDiff(c.oldText, c.newText)) {
      const cls = sign === "+" ? "add" : sign === "-" ? "del" : "ctx";
      pre.append(make(doc, "span", cls, `${sign} ${line}\n`));
    }
    box.append(pre);
    return box;
  }
  if (c?.type === "content") {
    const div = make(doc, "div", "tool-text");
    div.append(render(doc, blockText(c.content)));
    return div;
  }
  if (c?.type === "terminal") return make(doc, "p", "note", `[terminal ${c.terminalId ?? ""}]`);
  return make(doc, "span");
}

export class Transcript {
  constructor(container, hooks) {
    this.root = container;
    this.doc = container.ownerDocument;
    this.hooks = hooks ?? {};
    this.clear();
  }

  clear() {
    this.root.replaceChildren();
    this.current = null; // { kind, text, body }
    this.tools = new Map();
    this.plan = null;
  }

  /** The client's own prompt (or one another client sent: `by`). */
  prompt(text, by) {
    this.current = null;
    const item = make(this.doc, "article", "msg user");
    item.append(make(this.doc, "h3", "who", by ? `Prompt (from ${by})` : "You"));
    const body = make(this.doc, "div", "body");
    body.append(render(this.doc, text));
    item.append(body);
    this._add(item);
  }

  note(text, className) {
    this.current = null;
    this._add(make(this.doc, "p", "note " + (className ?? ""), text));
  }

  _add(node) {
    this.root.append(node);
    this._follow();
  }

  /** Keep the newest part in view (the scrolling box is the page's, around this one). */
  _follow() {
    const scroller = this.root.closest(".transcript") ?? this.root;
    scroller.scrollTop = scroller.scrollHeight;
  }

  _stream(kind, text) {
    if (!this.current || this.current.kind !== kind) {
      const doc = this.doc;
      let item, body;
      if (kind === "thought") {
        item = make(doc, "details", "msg thought");
        item.append(make(doc, "summary", "", "Thinking"));
        body = make(doc, "div", "body");
        item.append(body);
      } else {
        item = make(doc, "article", "msg " + (kind === "user" ? "user" : "agent"));
        item.append(make(doc, "h3", "who", kind === "user" ? "You" : "Agent"));
        body = make(doc, "div", "body");
        item.append(body);
      }
      this.current = { kind, text: "", body };
      this._add(item);
    }
    this.current.text += text;
    this.current.body.replaceChildren(render(this.doc, this.current.text));
    this._follow();
  }

  /** Whether the tool call `id` is shown. */
  hasTool(id) {
    return id !== undefined && this.tools.has(String(id));
  }

  _toolCard(id) {
    let card = this.tools.get(id);
    if (!card) {
      const doc = this.doc;
      const node = make(doc, "section", "tool");
      const head = make(doc, "div", "tool-head");
      const title = make(doc, "h3", "tool-title", "Tool call");
      const status = make(doc, "span", "badge status-pending", "pending");
      head.append(title, status);
      const diffs = make(doc, "div", "tool-diffs");
      const body = make(doc, "div", "tool-body");
      node.append(head, diffs, body);
      card = { node, title, status, diffs, body };
      this.tools.set(id, card);
      this.current = null;
      this._add(node);
    }
    return card;
  }

  _tool(u) {
    const card = this._toolCard(String(u.toolCallId ?? ""));
    if (u.title) card.title.textContent = (u.kind ? `${u.kind}: ` : "") + u.title;
    if (u.status) {
      card.status.textContent = u.status.replace("_", " ");
      card.status.className = "badge status-" + String(u.status).replace(/[^a-z_]/g, "");
      card.node.dataset.status = u.status;
    }
    if (Array.isArray(u.content)) {
      // A change's diff stays shown when a later update reports only its outcome in text.
      const diffs = u.content.filter((c) => c?.type === "diff");
      if (diffs.length) card.diffs.replaceChildren(...diffs.map((c) => contentNode(this.doc, c)));
      card.body.replaceChildren(...u.content.filter((c) => c?.type !== "diff")
        .map((c) => contentNode(this.doc, c)));
    }
  }

  _plan(entries) {
    const doc = this.doc;
    const node = make(doc, "section", "plan");
    node.append(make(doc, "h3", "", "Plan"));
    const list = make(doc, "ol");
    for (const e of Array.isArray(entries) ? entries : []) {
      const li = make(doc, "li", "plan-" + String(e?.status ?? "pending").replace(/[^a-z_]/g, ""));
      li.append(make(doc, "span", "badge", String(e?.status ?? "pending").replace("_", " ")),
                doc.createTextNode(" " + String(e?.content ?? "")));
      list.append(li);
    }
    node.append(list);
    if (this.plan && this.plan.isConnected && this.root.lastChild === this.plan) this.plan.replaceWith(node);
    else { this.current = null; this._add(node); }
    this.plan = node;
  }

  /** One `session/update` notification's `update`. */
  update(u) {
    if (!u || typeof u !== "object") return;
    const kind = u.sessionUpdate ?? u.type;
    switch (kind) {
      case "user_message_chunk": this._stream("user", blockText(u.content)); break;
      case "agent_message_chunk": this._stream("agent", blockText(u.content)); break;
      case "agent_thought_chunk": this._stream("thought", blockText(u.content)); break;
      case "tool_call":
      case "tool_call_update": this._tool(u); break;
      case "plan": this._plan(u.entries); break;
      case "session_info_update": if (u.title) this.hooks.title?.(String(u.title)); break;
      // The multi-client attach RFD's updates.
      case "prompt_received":
        this.prompt(promptText(u.prompt), u.sentBy?.name ?? "another client");
        this.hooks.turnStarted?.();
        break;
      case "permission_resolved":
        this.hooks.permissionResolved?.(u);
        this.note(`Permission answered by ${u.resolvedBy?.name ?? "another client"}: ` +
                  String(u.chosenOptionId ?? u.outcome ?? "resolved"));
        break;
      case "turn_complete":
        this.hooks.turnComplete?.(u.stopReason);
        break;
      default: break;
    }
  }
}
