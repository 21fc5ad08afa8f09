// The host page: what `acpgate ps` shows (from `_acpgate/host/ps`), with cancel and close.

function text(name, value, className) {
  const node = document.createElement(name);
  node.textContent = value;
  if (className) node.className = className;
  return node;
}

/** `1.5M`-style bytes. */
export function bytes(n) {
  const units = ["B", "K", "M", "G", "T"];
  let v = Number(n) || 0;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)}${units[i]}`;
}

function age(ms) {
  const s = Math.max(0, Math.round((Date.now() - Number(ms || 0)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m`;
}

function processTable(lease) {
  const table = document.createElement("table");
  table.className = "procs";
  const head = document.createElement("tr");
  for (const h of ["PID", "Role", "RSS", "CPU s", "Command"]) {
    const th = text("th", h);
    th.scope = "col";
    head.append(th);
  }
  table.append(head);
  for (const p of lease?.processes ?? []) {
    const tr = document.createElement("tr");
    tr.append(text("td", String(p.pid)), text("td", p.role), text("td", bytes(p.rssBytes)),
              text("td", String(p.cpuSeconds)), text("td", p.command, "cmd"));
    table.append(tr);
  }
  return table;
}

/** Render `report` into `root`; `act(action, sessionId)` runs cancel / close. */
export function renderHost(root, report, act) {
  const sessions = Array.isArray(report?.sessions) ? report.sessions : [];
  const cards = sessions.map((s) => {
    const card = document.createElement("article");
    card.className = "host-session";
    card.dataset.sessionId = s.sessionId;
    card.dataset.state = s.state;
    const title = s.title || "(untitled)";
    card.append(text("h3", title));
    const rss = (s.lease?.processes ?? []).reduce((n, p) => n + (p.rssBytes || 0), 0);
    const cpu = (s.lease?.processes ?? []).reduce((n, p) => n + (p.cpuSeconds || 0), 0);
    const facts = document.createElement("dl");
    facts.className = "facts";
    for (const [k, v] of [["Session", s.sessionId], ["Agent", s.agent], ["Owner", s.owner],
                          ["State", s.state + (s.waitingRequests ? ` (${s.waitingRequests} waiting)` : "")],
                          ["Clients", String(s.attachedClients)], ["Age", age(s.createdAt)],
                          ["Idle", age(s.lastActivity)], ["RSS", bytes(rss)], ["CPU", `${cpu.toFixed(2)}s`]]) {
      facts.append(text("dt", k), text("dd", v ?? ""));
    }
    card.append(facts);
    if (s.lease) {
      const details = document.createElement("details");
      details.append(text("summary", `Processes (${s.lease.processes?.length ?? 0})`),
                     processTable(s.lease));
      card.append(details);
    }
    const row = document.createElement("div");
    row.className = "row";
    if (s.servedHere) {
      for (const [action, label] of [["cancel", "Cancel turn"], ["close", "Close"]]) {
        const b = text("button", label);
        b.type = "button";
        b.setAttribute("aria-label", `${label}: ${title}`);
        b.dataset.action = action;
        b.addEventListener("click", () => act(action, s.sessionId));
        row.append(b);
      }
    } else {
      row.append(text("span", "Served by another acpgate process", "note"));
    }
    card.append(row);
    return card;
  });
  if (!cards.length) cards.push(text("p", "No live sessions.", "note"));
  const warm = (report?.leases ?? []).filter((l) => l.warm).length;
  cards.push(text("p", `${(report?.leases ?? []).length} live lease(s), ${warm} warm.`, "note"));
  root.replaceChildren(...cards);
}
