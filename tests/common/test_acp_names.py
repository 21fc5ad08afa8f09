"""ACP's method names and update kinds are generated from the vendored schemas, and the
hand-written modules use them instead of spelling the names again."""

from __future__ import annotations

import ast
from pathlib import Path

from services.common.acp import names
from tools import gen_acp_names

REPO = Path(__file__).resolve().parents[2]


def test_generated_names_are_up_to_date() -> None:
    """`make acp-names` was run after the last change to a schema or the generator."""
    assert gen_acp_names.OUTPUT.read_text(encoding="utf-8") == gen_acp_names.render(), \
        "services/common/acp/names.py is stale: run `make acp-names`"
    assert gen_acp_names.main(["--check"]) == 0


def test_names_follow_the_schemas() -> None:
    """The constants are the schemas' names: v2 renamed authenticate to auth/login and
    dropped session/load and session/set_mode; unstable v1 methods come from unstable.json."""
    assert names.M_SESSION_NEW == names.M2_SESSION_NEW == "session/new"
    assert names.M_FS_READ_TEXT_FILE in names.CLIENT_METHODS_V1
    assert names.M_SESSION_FORK in names.AGENT_METHODS_V1
    assert names.M2_AUTH_LOGIN in names.AGENT_METHODS_V2
    assert not {"authenticate", "session/load", "session/set_mode"} & names.AGENT_METHODS_V2
    assert names.U_AGENT_MESSAGE_CHUNK in names.SESSION_UPDATES_V1
    assert names.U2_STATE_UPDATE in names.SESSION_UPDATES_V2
    assert gen_acp_names.constant("M_", "$/cancel_request") == "M_CANCEL_REQUEST"


#: Modules that name ACP methods and update kinds: each takes them from the generated
#: module instead of writing the string again.
USERS = (
    "services/common/protocol.py",
    "services/common/attach_protocol.py",
    "services/common/acp/v2/names.py",
    "services/edge/dialect/dispatch.py",
    "services/edge/dialect/method_table.py",
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "services/edge/dialect/handlers").glob("*.py")),
    *sorted(str(p.relative_to(REPO)) for p in (REPO / "services/edge/dialect/v2").glob("*.py")),
)


#: Literals that spell an ACP name but mean something else: (module, literal) → what.
NOT_ACP_NAMES = {
    ("services/common/protocol.py", "tool_call"): "a history role",
    ("services/common/acp/v2/names.py", "plan"): "the plan id of a v1 agent's plan",
    ("services/common/protocol.py", "notice"): "a _meta.acpgate key keeping a v2 notice",
    ("services/common/protocol.py", "plan"): "a _meta.acpgate key keeping a v2 plan",
}


def _ignored(tree: ast.Module) -> set[int]:
    """The literals no code reads as a wire name: docstrings and ``__all__`` entries."""
    ids = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            ids |= {id(c) for c in ast.walk(node.value)}
    return ids


def test_no_module_spells_an_acp_name_again() -> None:
    """A string literal equal to a schema's method name or update kind is the generated
    constant's job (a docstring may name one; a literal in code may not)."""
    spelled = {v for k, v in vars(names).items() if k.startswith(("M_", "M2_", "U_", "U2_"))}
    found = []
    for name in USERS:
        tree = ast.parse((REPO / name).read_text(encoding="utf-8"))
        ignored = _ignored(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in spelled \
                    and id(node) not in ignored and (name, node.value) not in NOT_ACP_NAMES:
                found.append(f"{name}:{node.lineno}: {node.value!r}")
    assert not found, "ACP names spelled by hand (use services.common.acp.names):\n" \
        + "\n".join(found)
