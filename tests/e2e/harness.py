"""Test harness: temporary acpgate configs and a raw JSON-lines client of `acpgate acp`.

The client is synchronous (a reader thread feeds a queue) so one subprocess can
be shared by many test rows without event-loop scoping concerns.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from acp import schema as acp_schema
from pydantic import TypeAdapter

from tests.golden import validate
from tests.launches import DATA_PATH_ENV

#: Official ACP SDK models every server message of these methods must satisfy.
RESULT_MODELS: dict[str, Any] = {
    "initialize": acp_schema.InitializeResponse,
    "session/new": acp_schema.NewSessionResponse,
    "session/prompt": acp_schema.PromptResponse,
    "session/list": acp_schema.ListSessionsResponse,
    "session/load": acp_schema.LoadSessionResponse,
    "session/resume": acp_schema.ResumeSessionResponse,
}
OUTBOUND_MODELS: dict[str, Any] = {
    "session/update": acp_schema.SessionNotification,
    "session/request_permission": acp_schema.RequestPermissionRequest,
    "elicitation/create": acp_schema.CreateElicitationRequest,
}
#: session/update kinds the schema knows; others (future kinds, relayed unchanged) are not
#: validated.
KNOWN_UPDATES = {
    "user_message_chunk", "agent_message_chunk", "agent_thought_chunk", "tool_call",
    "tool_call_update", "plan", "available_commands_update", "current_mode_update",
    "config_option_update", "session_info_update", "usage_update",
}
#: The same methods' definitions in the official JSON schema (validated with jsonschema too).
RESULT_DEFINITIONS = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/prompt": "PromptResponse",
    "session/list": "ListSessionsResponse",
    "session/load": "LoadSessionResponse",
    "session/resume": "ResumeSessionResponse",
}
OUTBOUND_DEFINITIONS = {
    "session/update": "SessionNotification",
    "session/request_permission": "RequestPermissionRequest",
    "elicitation/create": "CreateElicitationRequest",
}

REPO = Path(__file__).resolve().parents[2]
SDK_AGENT = Path(__file__).resolve().parent / "sdk_agent.py"
ACPGATE = [sys.executable, "-m", "acpgate"]

#: A configured secret of the ``sdkdie`` agent, which prints it to stderr before it dies.
SDK_SECRET = "sdk-secret-0123456789"

#: Generous ceiling for one wait; tests never assert on timing.
WAIT = 60.0


def write_config(config_dir: Path, *, default_agent: str = "demo", max_sessions: int = 3,
                 session_timeout: int = 3600, autonomy: str = "supervised",
                 sdk_restore: str = "resume", extra: str = "") -> Path:
    """A config with a demo built-in agent, a disabled one, and three SDK adapters.

    ``sdk`` advertises ``session/resume`` (or what ``sdk_restore`` says),
    ``sdkload`` only ``session/load``, ``sdknone`` neither.
    """
    config_dir.mkdir(parents=True, exist_ok=True)
    state = config_dir / "sdk-state.json"
    default_line = f'default_agent = "{default_agent}"\n' if default_agent else ""
    text = f"""
[acp]
{default_line}max_sessions = {max_sessions}
session_timeout_secs = {session_timeout}

[autonomy]
level = "{autonomy}"

[agents.demo]
kind = "builtin"
provider = "demo"
model = "demo"

[agents.off]
kind = "builtin"
provider = "demo"
model = "demo"
enabled = false

{_sdk_entry("sdk", state, sdk_restore)}
{_sdk_entry("sdkload", state, "load")}
{_sdk_entry("sdknone", state, "none")}
{_sdk_entry("sdkcaps", state, "none", SDK_AGENT_PROMPT="image,embeddedContext")}
{_sdk_entry("sdkfail", state, "none", SDK_AGENT_NEW="fail")}
{_sdk_entry("sdkdie", state, "none", SDK_AGENT_NEW="die", SDK_AGENT_SECRET=SDK_SECRET)}
{_sdk_entry("sdkauth", state, "none", SDK_AGENT_NEW="auth", SDK_AGENT_KEY="sdk-key-value")}
{extra}
"""
    (config_dir / "config.toml").write_text(text)
    return config_dir


def _sdk_entry(alias: str, state: Path, restore: str, **env: str) -> str:
    extra = "".join(f", {k} = {json.dumps(v)}" for k, v in env.items())
    return f"""
[agents.{alias}]
kind = "acp"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SDK_AGENT))}]
env = {{ SDK_AGENT_STATE = {json.dumps(str(state))}, SDK_AGENT_RESTORE = "{restore}"{extra} }}
"""


def workspace_beside_config(tmp_path: Path) -> Path:
    """A fresh session workspace next to the test's config dir, not its parent: a ``cwd``
    containing acpgate's own state is refused on the gateway (SPEC §12, cwd confinement;
    ``acpgate acp`` accepts it), so tests use one that neither rule refuses."""
    work = tmp_path / "work"
    work.mkdir()
    return work


def child_env() -> dict[str, str]:
    """The environment for acpgate subprocesses (repo importable, quiet logs, no config
    overrides but the data path the test run picked, :func:`tests.launches.config_environ`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("ACPGATE_LOG_LEVEL", "warning")
    for key in list(env):
        if key.startswith("ACPGATE_") and "__" in key and key != DATA_PATH_ENV:
            del env[key]
    return env


class AcpProcess:
    """`acpgate acp` as a subprocess, spoken to in raw JSON lines."""

    def __init__(self, config_dir: Path, *args: str, cwd: Path | None = None,
                 argv: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        """``acpgate acp`` on ``config_dir``; or, with ``argv`` (and ``env``), any ACP agent
        on stdio spoken to the same way (the real-adapter tier's direct runs)."""
        self.config_dir = config_dir
        self.proc = subprocess.Popen(
            argv or [*ACPGATE, "acp", "--config-dir", str(config_dir), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=child_env() if env is None else env, cwd=str(cwd or REPO),
        )
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.raw_lines: list[str] = []
        self.stderr: list[str] = []
        self._next_id = 1000
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()
        #: Answers to outbound requests: method -> fn(params) -> result (or None: no answer).
        self.handlers: dict[str, Callable[[dict[str, Any]], Any]] = {}
        #: Outbound (server → client) requests seen.
        self.outbound: list[dict[str, Any]] = []
        #: Checks every message in place of the v1 schema when set (a v2 connection: the
        #: message, and the method a response answers, if known).
        self.check: Callable[[Any, str | None], None] | None = None
        self._sent_methods: dict[Any, str] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.raw_lines.append(line)
            try:
                self.messages.put(json.loads(line))
            except ValueError:
                self.messages.put({"__unparseable__": line})
        self.messages.put(None)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self.stderr.append(raw.decode("utf-8", errors="replace"))

    # ------------------------------------------------------------------ sending

    def send_raw(self, line: str | bytes) -> None:
        """Write one raw line (a newline is appended)."""
        assert self.proc.stdin is not None
        data = line.encode() if isinstance(line, str) else line
        with self._lock:
            self.proc.stdin.write(data + b"\n")
            self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        """Write one JSON message."""
        self.send_raw(json.dumps(message))

    def new_id(self) -> int:
        """A fresh request id."""
        self._next_id += 1
        return self._next_id

    def request_async(self, method: str, params: dict[str, Any] | None = None,
                      req_id: Any = None) -> Any:
        """Send a request without waiting; returns its id."""
        rid = self.new_id() if req_id is None else req_id
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self._sent_methods[rid] = method
        self.send(msg)
        return rid

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification."""
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    # ------------------------------------------------------------------ receiving

    def next_message(self, wait: float = WAIT) -> dict[str, Any]:
        """The next message from the server (outbound requests are answered by handlers)."""
        msg = self.messages.get(timeout=wait)
        if msg is None:
            raise EOFError("acpgate acp closed stdout; stderr:\n" + "".join(self.stderr[-30:]))
        if isinstance(msg, list):  # a v2 batch's answers
            if self.check is not None:
                for item in msg:
                    self.check(item, self._sent_methods.get(item.get("id")))
            return msg  # type: ignore[unreachable]
        if self.check is not None:
            self.check(msg, None if "method" in msg else self._sent_methods.get(msg.get("id")))
            model = None
        else:
            model = OUTBOUND_MODELS.get(msg.get("method", ""))
        if model is not None and msg.get("method") == "session/update" and \
                msg["params"].get("update", {}).get("sessionUpdate") not in KNOWN_UPDATES:
            model = None
        if model is not None:
            TypeAdapter(model).validate_python(msg["params"])  # official ACP v1 shape (extensions allowed)
            validate(OUTBOUND_DEFINITIONS[msg["method"]], msg["params"])
        if "method" in msg and "id" in msg:
            self.outbound.append(msg)
            handler = self.handlers.get(msg["method"])
            if handler is not None:
                result = handler(msg["params"])
                if result is not None:
                    self.send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
        return msg

    def read_until(self, pred: Callable[[dict[str, Any]], bool],
                   wait: float = WAIT) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Messages up to (excluding) the first matching one, and that one."""
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + wait
        while True:
            msg = self.next_message(max(0.1, deadline - time.monotonic()))
            if pred(msg):
                return seen, msg
            seen.append(msg)

    def response(self, rid: Any, wait: float = WAIT) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Everything before the response to ``rid``, and that response."""
        return self.read_until(lambda m: m.get("id") == rid and "method" not in m, wait)

    def call(self, method: str, params: dict[str, Any] | None = None,
             wait: float = WAIT) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Request and wait for its response; returns (messages before, response)."""
        before, resp = self.response(self.request_async(method, params), wait)
        model = RESULT_MODELS.get(method) if self.check is None else None
        if model is not None and "result" in resp:
            TypeAdapter(model).validate_python(resp["result"])
            validate(RESULT_DEFINITIONS[method], resp["result"])
        return before, resp

    def call_with_id(self, method: str, params: dict[str, Any] | None,
                     req_id: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Request with a chosen id and wait for its response."""
        return self.response(self.request_async(method, params, req_id))

    def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Request and return its result (asserting success)."""
        _, resp = self.call(method, params)
        assert "result" in resp, resp
        return resp["result"]

    def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Request and return its error (asserting failure)."""
        _, resp = self.call(method, params)
        assert "error" in resp, resp
        return resp["error"]

    def quiet(self, wait: float = 0.3) -> list[dict[str, Any]]:
        """Messages arriving within ``wait`` seconds (to check that nothing was answered)."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return out
            try:
                msg = self.messages.get(timeout=remaining)
            except queue.Empty:
                return out
            if msg is None:
                return out
            out.append(msg)

    def say(self, sid: str, prompt: Any) -> str:
        """session/prompt (asserting success); the assistant text streamed by the turn (an
        external agent's result carries no ``content``: it is passed whole)."""
        before, resp = self.call("session/prompt", {"sessionId": sid, "prompt": prompt})
        assert "result" in resp, resp
        return streamed_text(before, sid)

    def new_session(self, **params: Any) -> str:
        """session/new; returns the session id."""
        return str(self.result("session/new", params)["sessionId"])

    # ------------------------------------------------------------------ shutdown

    def descendants(self) -> list[psutil.Process]:
        """Live descendants of the acpgate process."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def close(self, wait: float = WAIT) -> int:
        """EOF on stdin and wait for the exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        """Hard stop (test cleanup only)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def updates(messages: list[dict[str, Any]], sid: str | None = None) -> list[dict[str, Any]]:
    """The ``update`` objects of session/update notifications (optionally of one session),
    as the agent sent them: the event id acpgate numbers each with
    (``_meta.acpgate.eventId``, increasing per session where present) taken off again."""
    out: list[dict[str, Any]] = []
    last: dict[str, int] = {}
    for m in messages:
        if m.get("method") != "session/update" or "id" in m \
                or (sid is not None and m["params"]["sessionId"] != sid):
            continue
        update = dict(m["params"]["update"])
        meta = dict(update.get("_meta") or {})
        ours = dict(meta.get("acpgate") or {})
        event_id = ours.pop("eventId", None)
        if event_id is not None:
            of = m["params"]["sessionId"]
            assert isinstance(event_id, int) and event_id > last.get(of, 0), (event_id, last)
            last[of] = event_id
            if ours:
                meta["acpgate"] = ours
            else:
                meta.pop("acpgate", None)
            if meta:
                update["_meta"] = meta
            else:
                update.pop("_meta", None)
        out.append(update)
    return out


def message_texts(ups: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(sessionUpdate, text)`` per message of ``ups`` (:func:`updates`' output): the text
    chunks of one message — consecutive updates of the same kind and ``messageId`` — joined,
    as a client shows them however the agent cut its stream (a chunk without a
    ``messageId``, such as a replayed prompt, is a message of its own); other updates are
    left out."""
    out: list[tuple[str, str]] = []
    last: tuple[str, Any] | None = None
    for u in ups:
        content = u.get("content")
        if not str(u.get("sessionUpdate", "")).endswith("_chunk") or not isinstance(content, dict) \
                or "text" not in content:
            last = None
            continue
        key = (u["sessionUpdate"], u.get("messageId"))
        if key == last and key[1] is not None:
            out[-1] = (out[-1][0], out[-1][1] + content["text"])
        else:
            out.append((u["sessionUpdate"], content["text"]))
        last = key
    return out


def listed_lineage(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """session/list rows' ``_meta.acpgate`` by session id, less the token ``usage`` and the
    running ``state`` that share the object (asserted present): what is left is the agent
    and the lineage."""
    metas = {r["sessionId"]: dict(r["_meta"]["acpgate"]) for r in rows}
    assert all("totalTokens" in m.pop("usage") for m in metas.values()), rows
    assert all(m.pop("state") in ("active", "idle", "closed") for m in metas.values()), rows
    return metas


def gone(pids: list[int], wait: float = 15.0) -> bool:
    """True when none of ``pids`` is alive (zombies count as gone)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


def streamed_text(messages: list[dict[str, Any]], sid: str | None = None) -> str:
    """The assistant text streamed in ``messages`` (``agent_message_chunk`` text blocks): what
    a client reads of an external agent's answer, whose prompt result carries no ``content``
    (the agent's result is passed whole)."""
    return "".join(u["content"].get("text", "") for u in updates(messages, sid)
                   if u.get("sessionUpdate") == "agent_message_chunk"
                   and isinstance(u.get("content"), dict))


def workspace_of(result: dict[str, Any]) -> str:
    """A session/new result's workspace: SPEC §3's ``workspaceDir`` (the built-in agent), or
    ``_meta.acpgate.workspaceDir`` beside an external agent's own result."""
    if "workspaceDir" in result:
        return str(result["workspaceDir"])
    return str(result["_meta"]["acpgate"]["workspaceDir"])
