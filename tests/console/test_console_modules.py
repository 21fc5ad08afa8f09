"""The console's modules in a real browser, fed what a gateway or an agent might send.

The page's own ES modules are imported into the console page served by a real
``acpgate serve`` (the CSP admits scripts of its origin only) and driven directly:
the multi-client attach RFD's updates (``prompt_received``, ``permission_resolved``,
``turn_complete``, read under ``type`` as the RFD writes them or ``sessionUpdate``)
render as the watch view needs them, before any gateway sends them; the markdown
renderer keeps an agent's markup and ``javascript:`` links as text and ends on
every malformed input; the New session form's helpers take any agent list or stored
state a gateway or another page might leave (markup as text, junk skipped). Skipped with the reason where no browser is found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import failure_shots, open_browser, skip_reason
from tests.security.gateway_stack import running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

_SKIP = skip_reason()
if _SKIP:
    pytestmark.append(pytest.mark.skip(reason=_SKIP))

_RFD_UPDATES = """async () => {
  const { Transcript } = await import("./console/js/transcript.js");
  const box = document.createElement("div");
  document.body.append(box);
  const seen = {};
  const t = new Transcript(box, {
    turnStarted: () => { seen.started = true; },
    turnComplete: (reason) => { seen.turn = reason; },
    permissionResolved: (u) => { seen.resolved = u.chosenOptionId; },
    title: (title) => { seen.title = title; },
  });
  t.update({ type: "prompt_received", messageId: "m1", sentBy: { name: "Zed", version: "1" },
             prompt: [{ type: "text", text: "Add **auth** to the API" }] });
  t.update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "On " } });
  t.update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "it." } });
  t.update({ type: "permission_resolved", toolCallId: "call_xyz", chosenOptionId: "allow_once",
             resolvedBy: { name: "notification-dashboard", version: "1.0.0" } });
  t.update({ sessionUpdate: "turn_complete", stopReason: "end_turn", messageId: "m2" });
  t.update({ sessionUpdate: "session_info_update", title: "Auth work" });
  t.update({ sessionUpdate: "no_such_update" });
  t.update(null);
  return {
    seen,
    user: [...box.querySelectorAll(".msg.user")].map((m) => m.textContent),
    strong: [...box.querySelectorAll(".msg.user strong")].map((m) => m.textContent),
    agent: [...box.querySelectorAll(".msg.agent .body")].map((m) => m.textContent),
    notes: [...box.querySelectorAll(".note")].map((m) => m.textContent),
  };
}"""

_HOSTILE_MARKDOWN = """async () => {
  const { render } = await import("./console/js/markdown.js");
  const div = document.createElement("div");
  div.append(render(document, [
    "[click](javascript:alert(1)) [data](data:text/html,x) [fine](https://a.example/x)",
    "<b>bold?</b> <a href='https://evil.example'>a</a> <iframe src=x></iframe>",
    "**[nested](javascript:void(0))** `<script>x()</script>`",
    "```html", "<img src=x onerror=alert(1)>", "```",
  ].join("\\n")));
  const weird = ["```foo bar", "#", "> ", "- ", "1)", "**", "`", "_", "[", "](", "~~~",
                 "```\\n", "> > >", "#".repeat(7) + " x", "*".repeat(5000),
                 "[a](".repeat(2000), "`".repeat(3001), "- a\\n  b\\n- c\\n1. d"];
  let rendered = 0;
  for (const text of weird) { render(document, text); rendered++; }
  return {
    rendered,
    links: [...div.querySelectorAll("a")].map((a) => [a.getAttribute("href"), a.rel]),
    elements: [...new Set([...div.querySelectorAll("*")].map((e) => e.tagName.toLowerCase()))],
    text: div.textContent,
  };
}"""

_NEW_SESSION_FORM = """async () => {
  const m = await import("./console/js/newsession.js");
  const select = document.createElement("select");
  m.fillAgents(select, [
    { alias: "<img src=x onerror=window.__xss=1>", description: "<b>x</b>" },
    { alias: "demo", default: true, model: "demo/demo" }, null, { alias: 7 }, { alias: "" },
  ], "nosuch");
  const agents = [...select.options].map((o) => [o.value, o.textContent]);
  const chosen = select.value;
  m.fillAgents(select, "not a list", "");
  const fallback = [...select.options].map((o) => [o.value, o.textContent]);
  sessionStorage.setItem(m.RECENT_KEY, "{not json");
  const afterJunk = m.recentDirs(sessionStorage);
  m.rememberDir(sessionStorage, "/a"); m.rememberDir(sessionStorage, "/b");
  m.rememberDir(sessionStorage, "/a"); m.rememberDir(sessionStorage, "");
  const recent = m.recentDirs(sessionStorage);
  const list = document.createElement("datalist");
  m.fillDirs(list, sessionStorage, [{ cwd: "/b" }, { cwd: "/srv/x" }, { cwd: 3 }, null]);
  const offered = [...list.options].map((o) => o.value);
  m.forgetChoices(sessionStorage);
  return {
    agents, chosen, fallback, afterJunk, recent, offered,
    left: Object.keys(sessionStorage).length,
    problems: ["", "/srv/p", "p", "./p", "~/p", "..", "C:\\p"].map((d) => !!m.dirProblem(d)),
    dirErrors: ["cwd is not a usable directory (/x): No such file or directory",
                "cwd refused as a session workspace: it is a credential store",
                "Unknown agent `x`", undefined].map(m.isDirError),
    xss: window.__xss ?? null,
    images: document.querySelectorAll("img").length,
  };
}"""


async def test_attach_updates_and_hostile_markdown(tmp_path: Path) -> None:
    async with running_gateway(tmp_path / "gw") as gw, open_browser() as browser, \
            failure_shots("modules") as shots:
        page = await browser.new_page()
        shots.pages.append(page)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(f"http://127.0.0.1:{gw.port}/")

        out: dict[str, Any] = await page.evaluate(_RFD_UPDATES)
        assert out["seen"] == {"started": True, "turn": "end_turn", "resolved": "allow_once",
                               "title": "Auth work"}
        assert out["user"] == ["Prompt (from Zed)Add auth to the API"]
        assert out["strong"] == ["auth"]
        assert out["agent"] == ["On it."]  # chunks of one message stream into one block
        assert out["notes"] == [
            "Permission answered by notification-dashboard: allow_once"]

        md: dict[str, Any] = await page.evaluate(_HOSTILE_MARKDOWN)
        assert md["rendered"] == 18  # every malformed input ends
        assert md["links"] == [["https://a.example/x", "noopener noreferrer"]]
        assert set(md["elements"]) <= {"p", "a", "strong", "em", "code", "pre", "br"}
        for shown in ("[click](javascript:alert(1))", "<b>bold?</b>",
                      "<iframe src=x></iframe>", "<img src=x onerror=alert(1)>",
                      "<script>x()</script>", "[nested](javascript:void(0))"):
            assert shown in md["text"], shown

        form: dict[str, Any] = await page.evaluate(_NEW_SESSION_FORM)
        assert form["agents"] == [
            ["<img src=x onerror=window.__xss=1>",
             "<img src=x onerror=window.__xss=1> — <b>x</b>"],
            ["demo", "demo (default) — demo/demo"]]
        assert form["chosen"] == "demo"  # an unlisted stored choice falls back to the default
        assert form["fallback"] == [["", "The gateway's default agent"]]
        assert form["afterJunk"] == [] and form["recent"] == ["/a", "/b"]
        assert form["offered"] == ["/a", "/b", "/srv/x"] and form["left"] == 0
        assert form["problems"] == [False, False, True, True, True, True, True]
        assert form["dirErrors"] == [True, True, False, False]
        assert form["xss"] is None and form["images"] == 0
        assert errors == []
