"""ACP protocol constants: error codes and messages, option ids, names (SPEC §1–§7).

The constants that cross the wire live in ``services.common``, so the edge and the
built-in agent cannot drift apart (``str.format`` templates, placeholders named after the
SPEC's ``<…>`` slots). This module holds ACP v1's constants and acpgate's own extension
methods (the host view included), and every JSON-RPC error code and every ``_meta`` key
whatever its family; ACP's method names and update kinds are generated from the schemas
(:mod:`services.common.acp.names`) and kept here under acpgate's short names. Each other
family keeps its methods, names and messages in one module of its own:

- :mod:`services.common.attach_protocol`: live sessions shared by several clients
  (attach, detach, observers; their codes ``-32006``..``-32008`` are here);
- :mod:`services.common.remote_transport`: Streamable HTTP headers, content types and
  the replay-gap notice;
- :mod:`services.common.client_mcp`: the ``mcpServers`` a gateway client may pass, and
  the refusals it is told;
- :mod:`services.common.acp.v2.names`: what ACP v2 adds or renames.

acpgate's internal wire contracts (not ACP) sit beside their code:
:mod:`services.common.fd_channel`, :mod:`services.common.launch_seal`,
``services.edge.transport.handoff.wire`` and the gRPC protos.
"""

from __future__ import annotations

from typing import Final

from services.common.acp import names as acp_names

PROTOCOL_VERSION: Final = 1
JSONRPC_VERSION: Final = "2.0"

# ------------------------------------------------------------------ error codes (SPEC §1)
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
SESSION_NOT_FOUND: Final = -32000
SESSION_LIMIT: Final = -32001
SESSION_BUSY: Final = -32002
#: ACP's "authentication required" (an adapter's answer to session/new before authenticate).
AUTH_REQUIRED: Final = -32000
#: ACP's "resource not found" (a file an fs/read_text_file served by the edge cannot find).
ACP_RESOURCE_NOT_FOUND: Final = -32002
#: A client→agent method refused by the session policy (fs/*, terminal/* from an adapter).
POLICY_REFUSED: Final = -32003
#: ACP: the request was cancelled by ``$/cancel_request``.
REQUEST_CANCELLED: Final = -32800
#: acpgate: a turn was not stored because it would exceed a storage quota ([store]
#: max_session_bytes / max_token_bytes).
STORAGE_QUOTA_EXCEEDED: Final = -32004
#: acpgate: another host took the session over (its claim expired here); the turn was not
#: stored and the session ended on this host.
SESSION_TAKEN_OVER: Final = -32005
#: acpgate: an observer attachment named its session in a method an observer may not call
#: (observers watch only; the edge's method table says which methods they may call).
OBSERVER_READ_ONLY: Final = -32006
#: acpgate: the session is live on another host or edge worker; ``data.acpgate.liveAt``
#: says where to attach it (across hosts).
SESSION_LIVE_ELSEWHERE: Final = -32007
#: acpgate: the session is stored but runs nowhere (its connection's grace ended, or acpgate
#: restarted): ``session/load`` or ``session/resume`` brings it back.
SESSION_NOT_RUNNING: Final = -32008
#: ACP v2: the client asked for a protocol version acpgate does not speak.
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022

# ------------------------------------------------------------------ error messages
MSG_PARSE_ERROR: Final = "Parse error: {detail}"
MSG_INVALID_VERSION: Final = "Invalid JSON-RPC version"
MSG_INVALID_REQUEST: Final = "Invalid Request"
MSG_INVALID_ID: Final = "Invalid Request: id must be a string or a number"
MSG_INVALID_METHOD: Final = "Invalid Request: method must be a string"
#: A handler failed unexpectedly (the cause is logged, never sent: it may hold secrets).
MSG_INTERNAL_ERROR: Final = "Internal error"
#: A request whose handler was cancelled before it could answer (connection closing).
MSG_REQUEST_CANCELLED: Final = "Request cancelled"
#: The message of an error answer that came without a usable one.
MSG_ERROR_WITHOUT_MESSAGE: Final = "error without a message"
MSG_METHOD_NOT_FOUND: Final = "Method not found: {method}"
MSG_SESSION_NOT_FOUND: Final = "Session not found: {session_id}"
MSG_SESSION_LIMIT: Final = "Maximum session limit reached ({max})"
#: A turn whose events could not be kept (the store was unreachable past the edge's buffer).
MSG_LOG_LOST: Final = ("The session store was unreachable for too long: this turn's events "
                       "no longer fit in the edge's buffer and were not stored")
#: One token's share of max_sessions is used up (others may still start).
MSG_SESSION_LIMIT_TOKEN: Final = "Maximum session limit reached for this token ({max})"
MSG_SESSION_BUSY: Final = "Session already has an active prompt turn: {session_id}"
MSG_MISSING_SESSION_ID: Final = "Missing required parameter: sessionId"
MSG_ALIAS_REQUIRED: Final = (
    "session/new requires `agentAlias` (alias of a configured [agents.<alias>] entry)"
)
MSG_UNKNOWN_AGENT: Final = "Unknown agent `{alias}` — no [agents.{alias}] entry configured"
MSG_AGENT_DISABLED: Final = "Agent `{alias}` is not enabled for dispatch"
MSG_BAD_CWD: Final = "cwd is not a usable directory ({cwd}): {reason}"
#: A gateway client's relative cwd: the server's working directory means nothing to it.
MSG_CWD_NOT_ABSOLUTE: Final = "cwd must be an absolute path, got {cwd!r}"
#: The placeholder cwd (SPEC §3): a gateway client sending it gets the agent workspace.
CWD_PLACEHOLDER: Final = "."
#: A workspace that is, lies inside or contains acpgate's state or a credential store
#: (session/new, load, resume alike). It names the reason, never the guarded path.
CWD_REFUSED_PREFIX: Final = "cwd refused as a session workspace: "
MSG_CWD_REFUSED: Final = (
    CWD_REFUSED_PREFIX + "it {relation} {what}; an operator may allow the directory with "
    "[autonomy] allow_cwd"
)
#: The same to the local user of `acpgate acp`, who owns every file: the
#: guarded path and the exact line that allows the directory (a remote principal is never
#: told acpgate's paths: MSG_CWD_REFUSED).
MSG_CWD_REFUSED_LOCAL: Final = (
    CWD_REFUSED_PREFIX + "it {relation} {what} ({path}); to allow it, put "
    "[autonomy] allow_cwd = [{cwd}] in {config_file}"
)
MSG_BAD_ADDITIONAL_DIR: Final = "additionalDirectories entry is not usable ({path}): {reason}"
MSG_INVALID_BASE64: Final = "Invalid base64: {detail}"
MSG_BLOB_TOO_LARGE: Final = "Embedded resource exceeds 10 MB limit ({n} bytes)"
MSG_PROMPT_EMPTY: Final = "Parameter 'prompt' array must contain at least one text part"
MSG_PROMPT_MISSING: Final = "Missing required parameter: prompt (must be string or array of parts)"
MSG_SESSION_ALREADY_ACTIVE: Final = "Session already active: {session_id}. Call session/close first."
#: Appended to it when a sibling edge worker of this host serves the session:
#: a WebSocket cannot move mid-stream, the client reconnects to that worker instead.
MSG_SESSION_ON_SIBLING_WORKER: Final = (
    " It is served by edge worker {worker} of this host: reconnect with its affinity cookie, "
    "or to /acp?worker={worker}, to take it up there.")
MSG_POLICY_REFUSED: Final = "Refused by acpgate policy: {reason}"
MSG_RESOURCE_NOT_FOUND: Final = "Resource not found: {path}"
MSG_UNKNOWN_TERMINAL: Final = "Unknown terminal: {terminal_id}"
MSG_CLIENT_NO_ANSWER: Final = "The client did not answer {method}: {why}"
#: acpgate's own failures around an adapter (it exited, its stream broke, a setup step of the
#: edge failed). An adapter's own error answer is passed on exactly instead (its code,
#: message and data), with what acpgate was doing in ``data.acpgate``.
MSG_AGENT_START_FAILED: Final = "Failed to start agent `{alias}`: {cause}"
MSG_PROMPT_FAILED: Final = "Prompt failed: {cause}"
MSG_RESTORE_FAILED: Final = "Failed to restore session: {cause}"
#: session/load or resume of a child session an agent runs (a v2 agent's subagent): it has
#: no agent session of its own; its updates come back with its parent's.
MSG_SUBAGENT_RESTORE: Final = (
    "Session {session_id} is a subagent session its agent runs under session {parent}: it "
    "cannot be restored on its own; restore {parent} instead")
#: session/fork of such a session.
MSG_SUBAGENT_FORK: Final = (
    "Session {session_id} is a subagent session its agent runs under session {parent}: it "
    "cannot be forked on its own; fork {parent} instead")
#: session/fork: the fork's adapter could not be brought up with its history.
MSG_FORK_FAILED: Final = "Failed to fork session: {cause}"
#: session/fork: a fork keeps its session's workspace (the ACP RFD lets an agent refuse a
#: fork into another working directory; acpgate does, so a fork never moves a session —
#: nor a spawned one out of the workspace its spawner confined it to).
MSG_FORK_CWD: Final = (
    "session/fork: cwd must be the workspace of the session it forks ({workspace}), not {cwd}"
)
#: ForkSession acts for a principal (a client connection) or the operator, never a session.
MSG_FORK_REQUESTER: Final = (
    "ForkSession requires a principal requester_session_key or operator = true"
)
#: The cause (in MSG_PROMPT_FAILED etc.) when an adapter broke ACP's framing with a line over
#: the lifecycle service's limit: the edge gives the adapter up, the session ends.
MSG_AGENT_LINE_TOO_LONG: Final = (
    "the agent wrote a message over the {limit}-byte line limit; its session was ended"
)
MSG_MISSING_PARAM: Final = "Missing required parameter: {name}"
MSG_BAD_ADDITIONAL_DIRS: Final = "Invalid additionalDirectories: must be an array of paths"
MSG_SESSION_BEING_SET_UP: Final = "Session is being set up: {session_id}"
#: A request read on a connection whose token was revoked meanwhile (AUTH_REQUIRED).
MSG_TOKEN_REVOKED: Final = "Token revoked"
#: A request read while the gateway stops (INTERNAL_ERROR): its running turns are being
#: cancelled and its connection closed.
MSG_SHUTTING_DOWN: Final = "acpgate is shutting down"
#: A line over the reader's limit (stdin of `acpgate acp` and of the built-in agent): it is
#: skipped up to its newline, never buffered whole, and answered -32700 with id null.
MSG_LINE_TOO_LONG: Final = "line too long ({n} bytes, limit {limit})"
#: Storage quotas (STORAGE_QUOTA_EXCEEDED): ``used`` is what would be stored with the turn.
MSG_SESSION_QUOTA: Final = (
    "Session storage quota exceeded ({used}/{limit} bytes): delete old sessions or raise "
    "[store] max_session_bytes"
)
MSG_TOKEN_QUOTA: Final = (
    "Token storage quota exceeded ({used}/{limit} bytes): delete old sessions or raise "
    "[store] max_token_bytes"
)
#: AppendEvents: a session's part refused because its events would pass a quota — this
#: prefix, then the quota's sentence (the session service's answer, read by the edge).
REFUSED_QUOTA: Final = "quota: "
#: SESSION_TAKEN_OVER: a turn refused (or cut off) because another host holds the claim.
MSG_SESSION_TAKEN_OVER: Final = (
    "Session {session_id} was taken over by another host; this turn was not stored"
)
#: sessions_spawn refusals: a cwd that leaves the spawning session's
#: workspace, no agent named, a requester that is no stored session.
MSG_SPAWN_CWD_OUTSIDE: Final = "cwd must lie inside the spawning session's workspace: {cwd}"
MSG_SPAWN_AGENT_REQUIRED: Final = (
    "sessions_spawn requires `agent` (alias of a configured [agents.<alias>] entry)"
)
MSG_SPAWN_UNKNOWN_REQUESTER: Final = "the spawning session is not a stored session"
#: A session's turn started by another session runs at most at the sender's
#: autonomy; an external agent's turn cannot be capped, so one above it is refused
#: (sessions_send to it, sessions_spawn of it).
MSG_SEND_ABOVE_AUTONOMY: Final = (
    "Refused: session {session_id} runs the external agent `{agent}` at autonomy "
    "{target}, above this session's {sender}; acpgate cannot cap an external agent's turn"
)
MSG_SPAWN_ABOVE_AUTONOMY: Final = (
    "Refused: the external agent `{agent}` runs at autonomy {target}, above this "
    "session's {sender}; acpgate cannot cap an external agent's turn"
)
#: Every visibility-filtered read names its requester; none is never the operator.
MSG_REQUESTER_REQUIRED: Final = (
    "requester_session_key is required (or operator = true for the machine's operator)"
)
MSG_REQUESTER_AND_OPERATOR: Final = "an operator request names no requester_session_key"
MSG_SEND_REQUESTER: Final = "the sending session is not a stored session"

# ------------------------------------------------------------------ limits (SPEC §4, §9, §10)
MAX_BLOB_BYTES: Final = 10 * 1024 * 1024
#: Longest line an adapter may write to stdout (a 10 MiB blob in base64 plus framing fits):
#: whoever reads the pipe (the lifecycle service, or the edge it was handed to) drops a
#: longer one, and the edge ends the session (MSG_AGENT_LINE_TOO_LONG).
MAX_ADAPTER_LINE_BYTES: Final = 32 * 1024 * 1024
DEFAULT_MAX_SESSIONS: Final = 10
DEFAULT_SESSION_TIMEOUT_SECS: Final = 3600
#: ``[acp] max_subagents_per_session``'s default: the child sessions a v2 agent may announce
#: under one session (its children's children included).
DEFAULT_MAX_SUBAGENTS: Final = 64
#: The most warm adapters one alias may keep ([agents.<alias>] warm, lifecycle KeepWarm).
MAX_WARM_ADAPTERS: Final = 256

# ------------------------------------------------------------------ agent kinds (ResolveAgent.kind)
#: ``[agents.<alias>] kind`` of the built-in agent (the other kind is "acp").
AGENT_KIND_BUILTIN: Final = "builtin"

# ------------------------------------------------------------------ back-channel (SPEC §6)
OUTBOUND_ID_PREFIX: Final = "zc-out-"
OPTION_ALLOW_ONCE: Final = "allow-once"
OPTION_ALLOW_ALWAYS: Final = "allow-always"
OPTION_REJECT_ONCE: Final = "reject-once"
CHOICE_OPTION_PREFIX: Final = "choice-"
APPROVAL_TOOL_CALL_PREFIX: Final = "approval-"
#: `toolCall.kind` of every permission request: SPEC §6 fixes it, whatever the tool's own kind.
APPROVAL_TOOL_KIND: Final = "execute"
PERMISSION_OPTIONS: Final = (
    {"optionId": OPTION_ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
    {"optionId": OPTION_ALLOW_ALWAYS, "name": "Always allow", "kind": "allow_always"},
    {"optionId": OPTION_REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
)
OUTCOME_SELECTED: Final = "selected"
OUTCOME_CANCELLED: Final = "cancelled"

# ------------------------------------------------------------------ cancel (SPEC §7)
CANCEL_MARKER: Final = "[turn cancelled via client]"
CANCEL_TOOL_CALL_PREFIX: Final = "turn-cancelled-"
CANCEL_TOOL_NAME: Final = "turn-cancelled"

# ------------------------------------------------------------------ stop reasons
STOP_END_TURN: Final = "end_turn"
STOP_CANCELLED: Final = "cancelled"
STOP_MAX_TURN_REQUESTS: Final = "max_turn_requests"
STOP_MAX_TOKENS: Final = "max_tokens"
STOP_REFUSAL: Final = "refusal"

# ------------------------------------------------------------------ methods
# ACP's names come from the schemas (services.common.acp.names, generated); the short
# names acpgate has always used are kept for them here.
M_INITIALIZE: Final = acp_names.M_INITIALIZE
M_AUTHENTICATE: Final = acp_names.M_AUTHENTICATE
M_SESSION_NEW: Final = acp_names.M_SESSION_NEW
M_SESSION_PROMPT: Final = acp_names.M_SESSION_PROMPT
M_SESSION_CANCEL: Final = acp_names.M_SESSION_CANCEL
M_SESSION_CLOSE: Final = acp_names.M_SESSION_CLOSE
M_SESSION_LOAD: Final = acp_names.M_SESSION_LOAD
M_SESSION_RESUME: Final = acp_names.M_SESSION_RESUME
M_SESSION_LIST: Final = acp_names.M_SESSION_LIST
M_SESSION_UPDATE: Final = acp_names.M_SESSION_UPDATE
M_SESSION_SET_MODE: Final = acp_names.M_SESSION_SET_MODE
M_SESSION_SET_CONFIG_OPTION: Final = acp_names.M_SESSION_SET_CONFIG_OPTION
M_SESSION_DELETE: Final = acp_names.M_SESSION_DELETE
#: ACP (unstable): choose the session's model; relayed, and the choice stored.
M_SESSION_SET_MODEL: Final = acp_names.M_SESSION_SET_MODEL
#: ACP (unstable) session/fork: a new session with the history of a stored one.
#: It creates a session, so the edge serves it itself: never passed through by the
#: generic relay.
M_SESSION_FORK: Final = acp_names.M_SESSION_FORK
#: ACP connection-level methods of the agent (no session): relayed to the connection's
#: agent, and replayed to every adapter of it the connection starts.
M_LOGOUT: Final = acp_names.M_LOGOUT
M_PROVIDERS_LIST: Final = acp_names.M_PROVIDERS_LIST
M_PROVIDERS_SET: Final = acp_names.M_PROVIDERS_SET
M_PROVIDERS_DISABLE: Final = acp_names.M_PROVIDERS_DISABLE
M_CANCEL_REQUEST: Final = acp_names.M_CANCEL_REQUEST
M_ELICITATION_COMPLETE: Final = acp_names.M_ELICITATION_COMPLETE
M_REQUEST_PERMISSION: Final = acp_names.M_SESSION_REQUEST_PERMISSION
M_ELICITATION_CREATE: Final = acp_names.M_ELICITATION_CREATE
M_FS_READ: Final = acp_names.M_FS_READ_TEXT_FILE
M_FS_WRITE: Final = acp_names.M_FS_WRITE_TEXT_FILE
M_TERMINAL_CREATE: Final = acp_names.M_TERMINAL_CREATE
M_TERMINAL_OUTPUT: Final = acp_names.M_TERMINAL_OUTPUT
M_TERMINAL_WAIT: Final = acp_names.M_TERMINAL_WAIT_FOR_EXIT
M_TERMINAL_KILL: Final = acp_names.M_TERMINAL_KILL
M_TERMINAL_RELEASE: Final = acp_names.M_TERMINAL_RELEASE
#: acpgate's own (SPEC §7, no ACP method): leave the active set, let the turn finish, release.
M_SESSION_STOP: Final = "session/stop"
#: acpgate's own (SPEC §8): a client's event that touches its session, as an inbound
#: session/update does.
M_SESSION_EVENT: Final = "session/event"
#: The terminal methods that name an existing terminal (all but create).
M_TERMINAL_FOLLOWUPS: Final = (M_TERMINAL_OUTPUT, M_TERMINAL_WAIT, M_TERMINAL_KILL,
                               M_TERMINAL_RELEASE)

# ------------------------------------------------------------------ agent-to-agent
#: ACP extension methods (underscore-prefixed, ACP "Extensibility") an adapter sends to the
#: edge for the built-in agent's session tools; each names the calling session.
M_A2A_SPAWN: Final = "_acpgate/sessions_spawn"
M_A2A_LIST: Final = "_acpgate/sessions_list"
M_A2A_HISTORY: Final = "_acpgate/sessions_history"
M_A2A_SEND: Final = "_acpgate/sessions_send"
M_A2A_STATUS: Final = "_acpgate/session_status"
#: A spawn/send whose requesting turn was cancelled before the target's turn started.
MSG_REQUESTER_CANCELLED: Final = "the requesting turn was cancelled"
#: `clientCapabilities._meta.acpgate.sessionTools`: the edge serves the methods above.
META_SESSION_TOOLS: Final = "sessionTools"
#: `_meta.acpgate` keys of a permission request relayed for a spawned session, and of
#: session/list rows (the child's id and agent; its parent and spawner).
META_CHILD_SESSION_ID: Final = "childSessionId"
META_AGENT: Final = "agent"
META_PARENT_SESSION_ID: Final = "parentSessionId"
META_SPAWNED_BY: Final = "spawnedBy"
#: `_meta.acpgate.forkedFrom` of a session/fork result and of a fork's session/list row: the
#: id of the session it was forked from.
META_FORKED_FROM: Final = "forkedFrom"
#: The prefix of a relayed permission request's title: "[<agent> · session <id>] ".
A2A_LABEL: Final = "[{agent} · session {session_id}] "

# ------------------------------------------------------------------ session/update kinds (SPEC §5)
U_AGENT_MESSAGE: Final = acp_names.U_AGENT_MESSAGE_CHUNK
U_AGENT_THOUGHT: Final = acp_names.U_AGENT_THOUGHT_CHUNK
U_USER_MESSAGE: Final = acp_names.U_USER_MESSAGE_CHUNK
U_TOOL_CALL: Final = acp_names.U_TOOL_CALL
U_TOOL_CALL_UPDATE: Final = acp_names.U_TOOL_CALL_UPDATE
U_PLAN: Final = acp_names.U_PLAN
U_AVAILABLE_COMMANDS: Final = acp_names.U_AVAILABLE_COMMANDS_UPDATE
U_CURRENT_MODE: Final = acp_names.U_CURRENT_MODE_UPDATE
U_CONFIG_OPTION: Final = acp_names.U_CONFIG_OPTION_UPDATE
U_SESSION_INFO: Final = acp_names.U_SESSION_INFO_UPDATE
U_USAGE: Final = acp_names.U_USAGE_UPDATE
#: acpgate's own kind, to a client that did not prompt.
U_TURN_COMPLETE: Final = "turn_complete"

#: ACP ToolKind values.
TOOL_KINDS: Final = (
    "read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other",
)

# ------------------------------------------------------------------ history roles (SPEC §8)
#: The role of one stored conversation item: the session store's ``role`` column, the
#: session contract's ``HistoryItem.Role`` (mapped in ``services.common.history_roles``)
#: and ``_meta.acpgate.history[].role`` toward the built-in agent.
HISTORY_ROLE_USER: Final = "user"
HISTORY_ROLE_ASSISTANT: Final = "assistant"
HISTORY_ROLE_THOUGHT: Final = "thought"
HISTORY_ROLE_TOOL_CALL: Final = "tool_call"
HISTORY_ROLE_TOOL_RESULT: Final = "tool_result"
HISTORY_ROLES: Final = (
    HISTORY_ROLE_USER, HISTORY_ROLE_ASSISTANT, HISTORY_ROLE_THOUGHT,
    HISTORY_ROLE_TOOL_CALL, HISTORY_ROLE_TOOL_RESULT,
)

# ------------------------------------------------------------------ _meta namespaces
META_ZEROCLAW: Final = "zeroclaw"
META_ACPGATE: Final = "acpgate"
#: ``_meta.acpgate.eventId`` on every relayed update: the session's event number.
META_EVENT_ID: Final = "eventId"
#: ``_meta.acpgate.afterEventId`` of a session/resume of a live session: replay after it.
META_AFTER_EVENT_ID: Final = "afterEventId"
#: ``data.acpgate.liveAt`` of a -32007: the host (or edge worker) where the session is live.
META_LIVE_AT: Final = "liveAt"
#: ``_meta.acpgate.subagent`` marks a v2 agent's child update carried on its parent's stream
#: (services.common.acp.v2.subagents); ``true`` on a session/list row of such a child.
META_SUBAGENT: Final = "subagent"
#: ``_meta.acpgate.subagent.card: true``: the update is a child's card for v1 clients
#: (services.common.acp.v2.child_cards), never sent to a v2 client.
META_CHILD_CARD: Final = "card"
#: ``_meta.acpgate`` keys keeping a v2 agent's own form of an update v1 cannot carry, given
#: back to a v2 client (services.common.acp.v2.agent_forms): a notice, a plan with its id, a
#: tool call content chunk, a v2 diff.
META_NOTICE: Final = "notice"
META_PLAN: Final = "plan"
META_CONTENT_CHUNK: Final = "contentChunk"
META_DIFF: Final = "diff"
#: ``_meta.acpgate.permission``: a v2 agent's permission request's own title and description,
#: kept through v1 for a v2 client (services.common.acp.v2.agent_forms).
META_PERMISSION: Final = "permission"
#: `_meta.acpgate.policy` in session/new toward the built-in agent (SPEC §12).
META_POLICY: Final = "policy"
#: The built-in agent behind the edge got a session/new (or restoring resume) without one.
MSG_MISSING_POLICY: Final = (
    "Missing _meta.acpgate.policy: behind the acpgate edge every session's policy comes "
    "from the edge (run `acpgate agent` to use the built-in agent on its own)"
)
MSG_BAD_POLICY: Final = "Invalid _meta.acpgate.policy: {reason}"
#: `_meta.acpgate.history` in session/resume toward the built-in agent (restore seeding, the
#: whole history in one message: what older edges sent; still read).
META_HISTORY: Final = "history"
#: `_meta.acpgate.clientMcp` in session/new|resume toward the built-in agent: how the
#: client's ``mcpServers`` run (``{"remote": bool, "servers": "none"|"http"|"all",
#: "allowHosts": [...]}``; services/common/mcp_policy.py).
META_CLIENT_MCP: Final = "clientMcp"
#: `_meta.acpgate.autonomyCap` in session/prompt toward the built-in agent: a
#: turn another session started (sessions_send) runs at most at this autonomy level.
META_AUTONOMY_CAP: Final = "autonomyCap"
MSG_BAD_AUTONOMY_CAP: Final = "Invalid _meta.acpgate.autonomyCap: must be one of {levels}"
#: `_meta.acpgate.historyFollows: true` in session/resume toward the built-in agent: the
#: session is created (or reseeded) and its history follows in `_acpgate/history_append`
#: requests `{sessionId, items, done?}`, one bounded chunk each, the last with `done: true`.
META_HISTORY_FOLLOWS: Final = "historyFollows"
M_HISTORY_APPEND: Final = "_acpgate/history_append"
MSG_NO_HISTORY_EXPECTED: Final = "No history is being seeded for session {session_id}"
#: `_meta.acpgate.reason` on a `cancelled` permission outcome the edge relays to an adapter:
#: why the edge answered for the client (no reason = the user dismissed the request).
META_REASON: Final = "reason"
CANCEL_REASON_TIMEOUT: Final = "timeout"
CANCEL_REASON_CLIENT_ERROR: Final = "client_error"
CANCEL_REASON_CLIENT_GONE: Final = "client_gone"
#: An agent's question past :data:`MAX_OPEN_QUESTIONS` open at once: answered at once,
#: never relayed.
CANCEL_REASON_TOO_MANY: Final = "too_many_open"
#: The most questions (permission requests, elicitations) one adapter may have open at once.
MAX_OPEN_QUESTIONS: Final = 4096
#: The most requests of one adapter the edge serves at once: past it the edge reads no
#: further line from that adapter until one is answered (backpressure on its stdout).
#: Above MAX_OPEN_QUESTIONS, so a question past that bound still gets its own answer.
MAX_RUNNING_AGENT_REQUESTS: Final = 2 * MAX_OPEN_QUESTIONS
#: The session tools that run a turn and wait for its end, which may come over any agent's
#: pipe (this very agent's, for a send to its own session): run beside the bound above,
#: so that a stopped reader never holds back the end they wait for; capped on their own.
TURN_RUNNING_METHODS: Final = frozenset({M_A2A_SPAWN, M_A2A_SEND})
#: The most of those one adapter may have running at once; past it one is refused at once.
MAX_RUNNING_TURN_CALLS: Final = 256
MSG_TOO_MANY_TURN_CALLS: Final = "Too many session tool calls running ({max})"
#: `_meta.acpgate.timeoutSecs` next to reason "timeout": the seconds the edge waited. The
#: agent runs with its own config, which need not carry the edge's `--session-timeout`.
META_TIMEOUT_SECS: Final = "timeoutSecs"
#: `_meta.acpgate.modelOutput` on the built-in agent's `tool_call_update`: the tool result the
#: model saw, when it is not the human summary in `rawOutput` (deliver_file's JSON with `uri`,
#: SPEC §10). The edge stores it as the result item's `text`, so a restore seeds it again.
META_MODEL_OUTPUT: Final = "modelOutput"
#: `_meta.acpgate.warnings` in the built-in agent's initialize result: what it found wrong
#: with its own configuration (sentences, never a secret), logged by the edge at session start.
META_WARNINGS: Final = "warnings"
#: The built-in agent's provider names an API key variable that is unset (or empty): the
#: first prompt fails with this, before anything goes to the provider.
MSG_API_KEY_MISSING: Final = "{variable} (agents.{alias}.api_key_env) is not set"
#: `error.data.acpgate` of an adapter failure relayed to the client: how it exited, its stderr.
META_EXIT: Final = "exit"
META_STDERR: Final = "stderrTail"
#: `error.data.acpgate` of an adapter's own error passed on: the request acpgate
#: was making (`during`: a method name) and the agent's alias.
META_DURING: Final = "during"
#: `_meta.acpgate.workspaceDir` of an external agent's session/new result (the
#: agent's result is passed whole; acpgate's additions go under `_meta.acpgate`).
META_WORKSPACE_DIR: Final = "workspaceDir"
#: `_meta.acpgate.stopReason` on the replayed `user_message_chunk` of a stored turn that did
#: not end with end_turn (a cancelled turn is stored with what was streamed).
META_STOP_REASON: Final = "stopReason"
#: `agentCapabilities._meta` path by which claude-agent-acp says it queues a prompt sent
#: while a turn runs (acpgate then queues it too instead of answering -32002).
META_PROMPT_QUEUEING: Final = ("claudeCode", "promptQueueing")
#: The `config_json` key under which the model chosen with `session/set_model` is stored
#: (with the config option values; set again on restore).
CONFIG_MODEL_KEY: Final = "_acpgate/model"
#: The extension-method namespace of acpgate itself (toward the built-in agent, and the
#: session tools' methods from agents): never relayed between a client and an agent.
ACPGATE_METHOD_PREFIX: Final = "_acpgate/"
#: ACP extension method a client calls on ``/acp``: the agents it may start a session of,
#: and the default one (``services.edge.dialect.agents_list``; the web console's picker).
M_AGENTS_LIST: Final = "_acpgate/agents/list"
WS_SUBPROTOCOL: Final = "zeroclaw.acp.v1"

# ------------------------------------------------------------------ the host view
#: ACP extension methods a client (the web console's host page) calls on ``/acp``: what
#: ``acpgate ps`` shows, and a live session cancelled or closed. Answered only for a token
#: holding the ``host`` grant (``acpgate token create --admin``) or the local operator
#: (``services.edge.dialect.host_view``).
M_HOST_PS: Final = "_acpgate/host/ps"
M_HOST_CANCEL: Final = "_acpgate/host/cancel"
M_HOST_CLOSE: Final = "_acpgate/host/close"
#: The refusal of a host method to any other caller (the same whatever the params).
MSG_HOST_REFUSED: Final = ("Not authorised: host methods need an admin token "
                           "(`acpgate token create --admin`)")
#: A host close or cancel of a session another acpgate process serves.
MSG_HOST_ELSEWHERE: Final = ("Session {session_id} is served by another acpgate process; "
                             "close or cancel it there")


def session_key_for(alias: str, session_id: str) -> str:
    """The SPEC §13 key of ``alias``'s session ``session_id``: ``agent:<alias>:acp:<sessionId>``
    (what the store names a new row; the edge knows it before the row exists)."""
    return f"agent:{alias}:acp:{session_id}"
