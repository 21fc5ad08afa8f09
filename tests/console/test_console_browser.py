"""The web console in a real browser against a real ``acpgate serve``.

Headless Chromium from the system packages, driven by Playwright, loads
``http://127.0.0.1:<port>/`` of a gateway whose built-in agent talks to the local
fake model server (``tests.security.fake_model``: ``shell <cmd>`` runs the shell
tool, which a ``supervised`` autonomy asks the client about; anything else is
echoed). Steps: sign in with a token; start a session; see its streamed reply
rendered as markdown, an agent's ``<img onerror>`` / ``<script>`` as text; answer
a permission prompt with its button and see the tool's result; sign out and in
again and load the stored session's history; watch a session another client
started (needs ``session/attach``: skipped, saying so, until the gateway advertises
it); the host page of an admin token (its sessions, processes, close) and none for
a plain token; the New session form (the header's buttons only once signed in, the
agents the token may start in a select, a project directory sent as ``cwd``, a relative
or refused one shown by its field). Skipped with the reason where no browser or Playwright is found.
A failure saves the pages' screenshots to a temporary folder it names;
``ACPGATE_CONSOLE_SCREENSHOTS=docs/console`` saves each step's (docs/console.md's).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.console.browser import failure_shots, open_browser, skip_reason
from tests.gateway.stack import RawClient
from tests.security.fake_model import call_message
from tests.security.gateway_stack import Gateway, Token, running_gateway

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

_SKIP = skip_reason()
if _SKIP:
    print(f"\ntests/console: SKIPPED — {_SKIP}")
    pytestmark.append(pytest.mark.skip(reason=_SKIP))

#: The longest any one step waits for the page (generous: shared CI machines).
STEP_MS = 60_000
#: What an agent might send to inject markup: it must show as text.
HOSTILE = "<img src=x onerror=window.__xss=1> <script>window.__xss=2</script>"
DESKTOP = {"width": 1100, "height": 820}
PHONE = {"width": 390, "height": 844}


async def page_of(browser: Any, shots: Any, gw: Gateway, viewport: dict[str, int],
                  scheme: str = "light") -> Any:
    """A fresh browser context's page on the console (its own sessionStorage)."""
    from playwright.async_api import expect

    expect.set_options(timeout=STEP_MS)
    context = await browser.new_context(viewport=viewport, color_scheme=scheme)
    page = await context.new_page()
    shots.pages.append(page)
    response = await page.goto(f"http://127.0.0.1:{gw.port}/")
    assert response is not None and response.status == 200
    assert "connect-src 'self'" in response.headers["content-security-policy"]
    return page


async def sign_in(page: Any, token: Token) -> None:
    """Type the token into the sign-in form and wait for the sessions list."""
    from playwright.async_api import expect

    await page.fill("#token", token.secret)
    await page.click("#signin-form button[type=submit]")
    await expect(page.locator("#sessions")).to_be_visible()
    await expect(page.locator("#sessions-status")).not_to_have_text("Loading…")
    assert token.secret not in page.url


async def send(page: Any, text: str) -> None:
    """Type a prompt and send it."""
    await page.fill("#prompt", text)
    await page.click("#send")


async def allowed(page: Any, text: str) -> None:
    """Send ``text``, allow the permission request it raises, wait for the turn's end."""
    from playwright.async_api import expect

    await send(page, text)
    await page.locator("#permission button.allow").first.click()
    await expect(page.locator("#permission")).to_be_hidden()
    await expect(page.locator("#transcript .tool").last).to_have_attribute(
        "data-status", "completed")
    await expect(page.locator("#cancel")).to_be_disabled()


async def test_sign_in_stream_markdown_permission_and_history(tmp_path: Path) -> None:
    from playwright.async_api import expect

    async with running_gateway(tmp_path / "gw", autonomy="supervised") as gw, \
            open_browser() as browser, failure_shots("main") as shots:
        token = await gw.token("browser")
        page = await page_of(browser, shots, gw, DESKTOP)
        await shots.step(page, "01-sign-in")
        await sign_in(page, token)
        await expect(page.locator("#nav-host")).to_be_hidden()  # not an admin token

        # A new session on the default agent; its reply streams in as markdown.
        await page.click("#new-session")
        await expect(page.locator("#session")).to_be_visible()
        await send(page, "hello, summarise **the failing tests** in `tests/console`")
        reply = page.locator("#transcript .msg.agent").last
        await expect(reply).to_contain_text("echo: hello")
        await expect(reply.locator("strong")).to_have_text("the failing tests")
        await expect(reply.locator("code")).to_have_text("tests/console")
        await expect(page.locator("#cancel")).to_be_disabled()  # the turn ended
        await send(page, f"an agent's markup: {HOSTILE}")
        reply = page.locator("#transcript .msg.agent").last
        await expect(reply).to_contain_text(HOSTILE)  # the markup as text...
        assert await page.locator("#transcript img, #transcript script").count() == 0
        assert await page.evaluate("window.__xss") is None  # ...and never run
        await expect(page.locator("#cancel")).to_be_disabled()  # the turn ended

        # A tool call that needs the user's permission: the prompt as buttons.
        await send(page, "shell echo from-console")
        prompt = page.locator("#permission")
        await expect(prompt).to_be_visible()
        await expect(page.locator("#permission button.allow").first).to_be_focused()
        await shots.step(page, "03-permission")
        await page.keyboard.press("Enter")  # the focused "Allow once", from the keyboard
        await expect(prompt).to_be_hidden()
        await expect(page.locator("#transcript .tool").last).to_have_attribute(
            "data-status", "completed")
        await expect(page.locator("#transcript .msg.agent").last).to_contain_text(
            "from-console")
        await expect(page.locator("#cancel")).to_be_disabled()

        # File changes: the tool call shows its diff (added and removed lines).
        await allowed(page, call_message("file_write", {"path": "notes.md",
                                                        "content": "alpha\nbeta\n"}))
        await expect(page.locator("#transcript .tool").last.locator(".diff .add").first
                     ).to_have_text("+ alpha\n")
        # The change is shown (the pending tool call's diff) before it is allowed.
        await send(page, call_message("file_edit", {"path": "notes.md", "old_string": "beta",
                                                    "new_string": "gamma"}))
        await expect(page.locator("#permission")).to_be_visible()
        await expect(page.locator("#transcript .tool").last.locator(".diff .add")
                     ).to_have_text("+ gamma\n")
        await page.locator("#permission button.allow").first.click()
        await expect(page.locator("#transcript .tool").last).to_have_attribute(
            "data-status", "completed")
        await expect(page.locator("#cancel")).to_be_disabled()
        diff = page.locator("#transcript .tool").last.locator(".diff")
        await expect(diff.locator("figcaption")).to_contain_text("notes.md")
        await expect(diff.locator(".del")).to_have_text("- beta\n")
        await expect(diff.locator(".add")).to_have_text("+ gamma\n")
        await expect(diff.locator(".ctx").first).to_have_text("  alpha\n")
        await shots.step(page, "02-session")

        # The list shows it (title = the first prompt, its agent, usage).
        await page.click("#back")
        row = page.locator("#session-table tbody tr").first
        await expect(row).to_contain_text("hello, summarise **the failing tests**")
        await expect(row).to_contain_text("attacker")
        await shots.step(page, "04-sessions")

        # A reload keeps the tab signed in (sessionStorage); signing out forgets the token.
        await page.reload()
        await expect(page.locator("#sessions")).to_be_visible()
        await page.click("#sign-out")
        await expect(page.locator("#signin")).to_be_visible()
        assert await page.evaluate("Object.keys(sessionStorage).length") == 0

        # Signed in again: the session the reload left detached is attached as its
        # controller, its whole history replayed (session/attach, historyPolicy "full").
        await sign_in(page, token)
        await page.locator("#session-table tbody tr").first.get_by_role(
            "button", name="Open").click()
        await expect(page.locator("#transcript .msg.user").first).to_contain_text("hello")
        await expect(page.locator("#transcript")).to_contain_text("from-console")
        await expect(page.locator("#transcript")).to_contain_text("Attached to this session.")
        assert await page.locator("#transcript img, #transcript script").count() == 0

        # A phone-sized screen: the list, and a session with a list and a code block.
        phone = await page_of(browser, shots, gw, PHONE)
        await sign_in(phone, token)
        await shots.step(phone, "06-phone-sessions")
        await phone.click("#new-session")
        await send(phone, "a list:\n- one\n- two\n\n```\nx = 1\n```")
        reply = phone.locator("#transcript .msg.agent").last
        await expect(reply.locator("ul li")).to_have_count(2)
        await expect(reply.locator("pre code")).to_have_text("x = 1")
        # The demo agent (another alias): its thoughts collapsed, its plan's entries.
        await phone.click("#back")
        await phone.select_option("#new-agent", "demo")
        await phone.click("#new-session")
        await send(phone, "plan")
        await expect(phone.locator("#transcript .plan li").first).to_be_visible()
        thought = phone.locator("#transcript details.thought").first
        await expect(thought).to_be_attached()
        assert await thought.get_attribute("open") is None  # collapsed
        await expect(phone.locator("#cancel")).to_be_disabled()
        await shots.step(phone, "06-phone-session")
        assert token.secret not in gw.log.read_text(errors="replace")


async def test_watch_a_session_another_client_started(tmp_path: Path) -> None:
    from playwright.async_api import expect

    async with running_gateway(tmp_path / "gw", autonomy="supervised") as gw, \
            open_browser() as browser, failure_shots("watch") as shots:
        token = await gw.token("desk")
        ws = await gw.connect(token)
        other = RawClient(ws)
        init = await other.result("initialize", {"protocolVersion": 1})
        attach = (init.get("agentCapabilities", {}).get("sessionCapabilities", {})
                  .get("attach"))
        if not attach:
            await ws.close()
            pytest.skip("the gateway does not advertise sessionCapabilities.attach "
                        "(session/attach): watching another client's session "
                        "waits for it")
        sid = (await other.result("session/new", {"cwd": ""}))["sessionId"]
        await other.say(sid, "first from the editor")
        page = await page_of(browser, shots, gw, DESKTOP)
        await sign_in(page, token)
        await page.locator(f"#session-table tbody tr[data-session-id='{sid}']").get_by_role(
            "button", name="Watch").click()
        transcript = page.locator("#transcript")
        await expect(transcript).to_contain_text("first from the editor")
        # The editor prompts again: the console sees the prompt echoed and the reply.
        await other.say(sid, "second from the editor")
        await expect(transcript).to_contain_text("echo: second from the editor")
        await expect(page.locator("#transcript .msg.user").last).to_contain_text(
            "second from the editor")
        await shots.step(page, "05-watch")
        await ws.close()


async def ps_via_acp(client: RawClient) -> dict[str, Any]:
    """``_acpgate/host/ps`` as the console calls it."""
    result: dict[str, Any] = await client.result("_acpgate/host/ps", {})
    return result


async def test_host_page_for_an_admin_token(tmp_path: Path) -> None:
    from playwright.async_api import expect

    async with running_gateway(tmp_path / "gw", autonomy="supervised") as gw, \
            open_browser() as browser, failure_shots("host") as shots:
        code, out, err = await gw.cli("token", "create", "--name", "ops", "--admin")
        assert code == 0, err
        admin = Token(err.split("token id:", 1)[1].split()[0], out.strip())
        laptop = await gw.token("laptop")
        ws = await gw.connect(laptop)
        client = RawClient(ws)
        await client.result("initialize", {"protocolVersion": 1})
        sid = (await client.result("session/new", {"cwd": ""}))["sessionId"]
        await client.say(sid, "summarise the failing tests")

        page = await page_of(browser, shots, gw, DESKTOP)
        # Keyboard only: every control is labelled; sign in and reach the host page by keys.
        unlabelled = await page.evaluate("""() => [...document.querySelectorAll(
            'input, textarea, button')].filter(e => !(e.labels?.length || e.textContent.trim()
            || e.getAttribute('aria-label'))).map(e => e.id)""")
        assert unlabelled == []
        await page.keyboard.press("Tab")  # from the sign-in heading to the token field
        await expect(page.locator("#token")).to_be_focused()
        await page.keyboard.type(admin.secret)
        await page.keyboard.press("Enter")
        await expect(page.locator("#nav-host")).to_be_visible()
        await page.focus("#nav-host")
        await page.keyboard.press("Enter")
        card = page.locator(f".host-session[data-session-id='{sid}']")
        await expect(card).to_contain_text("laptop")  # the owner, by its token's name
        await expect(card).to_contain_text("summarise the failing tests")
        await expect(card).to_have_attribute("data-state", "idle")
        await card.locator("summary").click()
        await expect(card.locator(".procs")).to_contain_text("adapter")
        await shots.step(page, "07-host", full=True)
        assert laptop.secret not in json.dumps(await page.content())

        await card.get_by_role("button", name="Close: summarise the failing tests").click()
        await expect(card).to_have_count(0)
        await ws.close()

        # Closed, the session is stored, not live: its owner's console loads its history
        # (session/load) instead of attaching.
        owner = await page_of(browser, shots, gw, DESKTOP)
        await sign_in(owner, laptop)
        await owner.locator(f"#session-table tbody tr[data-session-id='{sid}']").get_by_role(
            "button", name="Open").click()
        await expect(owner.locator("#transcript .msg.user").first).to_contain_text(
            "summarise the failing tests")
        await expect(owner.locator("#transcript")).to_contain_text("History loaded.")


#: A third agent, with the description the agent select shows (not kept warm: a small machine).
HELPER = """
[agents.helper]
kind = "builtin"
provider = "demo"
model = "demo"
warm = 0
description = "Plans and thinks aloud"
"""


async def test_new_session_form_agents_and_project_directory(tmp_path: Path) -> None:
    from playwright.async_api import expect

    project = tmp_path / "project"
    project.mkdir()
    async with running_gateway(tmp_path / "gw", autonomy="supervised", extra=HELPER) as gw, \
            open_browser() as browser, failure_shots("new") as shots:
        token = await gw.token("browser")
        page = await page_of(browser, shots, gw, DESKTOP)
        # Before sign-in the header offers nothing to press.
        await expect(page.locator("#signin")).to_be_visible()
        assert await page.locator("header button:visible, header a:visible").count() == 0
        await sign_in(page, token)
        await expect(page.locator("#sign-out")).to_be_visible()

        # The agents the token may start, the default selected (_acpgate/agents/list).
        agent = page.locator("#new-agent")
        options = agent.locator("option")
        await expect(options).to_have_count(3)
        assert await options.evaluate_all("os => os.map(o => o.value)") == [
            "attacker", "demo", "helper"]
        await expect(agent).to_have_value("attacker")
        await expect(options.nth(0)).to_have_text("attacker (default) — openai/attacker")
        await expect(options.nth(2)).to_have_text("helper — Plans and thinks aloud")

        # A relative path is refused by the console, by its field, before anything is sent.
        field = page.locator("#new-cwd")
        await field.fill("projects/app")
        await page.click("#new-session")
        error = page.locator("#new-cwd-error")
        await expect(error).to_contain_text("is a relative path")
        await expect(field).to_have_attribute("aria-invalid", "true")
        await expect(field).to_be_focused()
        await expect(page.locator("#sessions")).to_be_visible()
        await shots.step(page, "08-new-session-error")
        # A directory the gateway refuses (its own state): its message, by the field.
        await field.fill(str(gw.data_dir))
        await page.click("#new-session")
        await expect(error).to_contain_text("The gateway refused this directory: cwd refused")
        assert str(gw.data_dir) not in (await error.text_content() or "").split(":", 1)[1]
        # Typing again clears the error.
        await field.fill("")
        await expect(error).to_be_empty()
        await expect(field).not_to_have_attribute("aria-invalid", "true")

        # Keyboard only: pick an agent, Tab to the directory, type it, Enter starts it.
        await agent.focus()
        await agent.select_option("helper")
        await page.keyboard.press("Tab")
        await expect(field).to_be_focused()
        await page.keyboard.type(str(project))
        await page.keyboard.press("Enter")
        await expect(page.locator("#session")).to_be_visible()
        await send(page, "hello from the project")
        await expect(page.locator("#transcript .msg.agent").last).to_contain_text("hello")

        # The session runs in that directory, on that agent (session/list's cwd filter).
        ws = await gw.connect(token)
        client = RawClient(ws)
        await client.result("initialize", {"protocolVersion": 1})
        real = await asyncio.to_thread(os.path.realpath, project)
        listed = (await client.result("session/list", {"cwd": real}))["sessions"]
        assert [(s["cwd"], s["_meta"]["acpgate"]["agent"]) for s in listed] == [
            (real, "helper")]
        await ws.close()

        # The list shows where each session is; the directory is offered again, and the
        # agent chosen stays chosen (this tab's sessionStorage), until sign-out.
        await page.click("#back")
        row = page.locator(f"#session-table tbody tr[data-session-id='{listed[0]['sessionId']}']")
        await expect(row.locator("td.path")).to_have_text(real)
        await expect(page.locator(f"#recent-dirs option[value='{project}']")).to_have_count(1)
        await page.reload()
        await expect(page.locator("#sessions")).to_be_visible()
        await expect(agent).to_have_value("helper")
        await shots.step(page, "09-new-session")
        dark = await page_of(browser, shots, gw, DESKTOP, scheme="dark")
        await sign_in(dark, token)
        await dark.fill("#new-cwd", "~/code")
        await dark.click("#new-session")
        await expect(dark.locator("#new-cwd-error")).to_contain_text("starts with ~")
        await shots.step(dark, "10-new-session-dark")
        await page.click("#sign-out")
        assert await page.evaluate("Object.keys(sessionStorage).length") == 0
