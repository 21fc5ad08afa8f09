"""SPEC §14: visibility as a pure function over row metadata — the table-driven matrix
(all rows of one principal) — and the principal boundary around it."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.principals import LOCAL_PRINCIPAL, principal_of_owner
from services.session.decisions.visibility import (
    ACTIONS,
    READ_ACTIONS,
    A2aPolicy,
    Requester,
    VisibilityRow,
    agent_id_from_session_key,
    can_see,
    can_see_session_row,
    glob_match,
)

REQ = "agent:alpha:acp:req"

#: The six kinds of rows of the matrix, seen from REQ (an alpha session).
ROWS: dict[str, VisibilityRow] = {
    "own": VisibilityRow(key=REQ, agent_id="alpha", owner_session_key=REQ),
    "same-agent": VisibilityRow(
        key="agent:alpha:acp:s2", agent_id="alpha", owner_session_key="agent:alpha:acp:s2"
    ),
    "owned-same-agent": VisibilityRow(
        key="agent:alpha:acp:kid", agent_id="alpha", owner_session_key=REQ, spawned_by=REQ
    ),
    "owned-cross-agent-acp-child": VisibilityRow(
        key="agent:beta:acp:kid",
        agent_id="beta",
        owner_session_key=REQ,
        spawned_by=REQ,
        parent_session_key=REQ,
    ),
    "unowned-cross-agent": VisibilityRow(
        key="agent:beta:acp:other", agent_id="beta", owner_session_key="agent:beta:acp:other"
    ),
    "main-session": VisibilityRow(
        key="agent:main:main", agent_id="main", owner_session_key="agent:main:main"
    ),
}
ROW_ORDER = list(ROWS)

A2A: dict[str, A2aPolicy] = {
    "a2a-off": A2aPolicy(enabled=False),
    "a2a-on": A2aPolicy(enabled=True),
    # alpha and main may talk; beta may not.
    "a2a-allow-list": A2aPolicy(enabled=True, allow=("alpha", "ma*")),
}

#: Expected visibility, one letter per row in ROW_ORDER:
#: own, same-agent, owned-same-agent, owned-cross-agent-acp-child, unowned-cross-agent, main.
EXPECTED: dict[tuple[str, str], str] = {
    ("self", "a2a-off"): "YNNNNN",
    ("self", "a2a-on"): "YNNNNN",
    ("self", "a2a-allow-list"): "YNNNNN",
    ("tree", "a2a-off"): "YNYYNN",
    ("tree", "a2a-on"): "YNYYNN",
    ("tree", "a2a-allow-list"): "YNYYNN",
    ("agent", "a2a-off"): "YYYYNN",
    ("agent", "a2a-on"): "YYYYNN",
    ("agent", "a2a-allow-list"): "YYYYNN",
    ("all", "a2a-off"): "YYYYNN",
    ("all", "a2a-on"): "YYYYYY",
    ("all", "a2a-allow-list"): "YYYYNY",
}

MATRIX = [
    (vis, a2a, row, action, EXPECTED[(vis, a2a)][ROW_ORDER.index(row)] == "Y")
    for vis in ("self", "tree", "agent", "all")
    for a2a in A2A
    for row in ROW_ORDER
    for action in ACTIONS
]


def check(vis: str, a2a: str, row: str) -> bool:
    """The SPEC §14 check; every action goes through the same function."""
    return can_see_session_row(ROWS[row], REQ, vis, A2A[a2a])


@pytest.mark.parametrize(("vis", "a2a", "row", "action", "allowed"), MATRIX)
def test_spec14_visibility_matrix(vis: str, a2a: str, row: str, action: str,
                                  allowed: bool) -> None:
    """SPEC §14: 4 levels × a2a off/on/allow-list × 6 row kinds × 4 actions (list, history,
    send, status) — the same check guards every action."""
    assert action in ACTIONS
    assert check(vis, a2a, row) is allowed


def test_spec14_matrix_size() -> None:
    """The matrix really has every combination."""
    assert len(MATRIX) == 4 * 3 * 6 * 4


def test_spec14_requester_agent_from_key_or_explicit() -> None:
    """The requester's agent comes from its key, or from its stored row when given."""
    assert agent_id_from_session_key("agent:alpha:acp:x") == "alpha"
    assert agent_id_from_session_key("agent:alpha:main") == "alpha"
    assert agent_id_from_session_key("main") == ""
    assert agent_id_from_session_key("agent::x") == ""
    row = ROWS["same-agent"]
    assert not can_see_session_row(row, "opaque-key", "agent", A2aPolicy())
    assert can_see_session_row(row, "opaque-key", "agent", A2aPolicy(), requester_agent_id="alpha")


def test_spec14_empty_requester_and_bad_level() -> None:
    """An empty requester key sees nothing in the pure check; unknown levels are refused."""
    assert not can_see_session_row(ROWS["own"], "", "all", A2aPolicy(enabled=True))
    with pytest.raises(ValueError):
        can_see_session_row(ROWS["own"], REQ, "everything", A2aPolicy())


# ------------------------------------------------------------------ a2a patterns


@pytest.mark.parametrize(
    ("pattern", "name", "expected"),
    [
        ("alpha", "alpha", True),
        ("alpha", "Alpha", False),  # exact: case-sensitive
        ("alp*", "ALPHA", True),  # glob: case-insensitive
        ("*", "anything", True),
        ("*", "", True),
        ("", "alpha", False),  # blank denies
        ("   ", "alpha", False),
        ("a*a", "a", False),
        ("a*a", "aa", True),
        ("*ba*", "abab", True),
        ("a**b", "ab", True),
        ("*x", "abc", False),
        ("x*", "abc", False),
        ("a*b*c", "aXbYc", True),
        ("a*b*c", "aXcYb", False),
    ],
)
def test_spec14_a2a_glob(pattern: str, name: str, expected: bool) -> None:
    """a2a allow patterns: `*` globs, exact case-sensitive, globs case-insensitive, blank denies."""
    assert glob_match(pattern, name) is expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab*", max_size=8), st.text(alphabet="abAB", max_size=10))
def test_glob_agrees_with_reference(pattern: str, name: str) -> None:
    """The linear matcher agrees with fnmatch on `*`-only globs (case-folded)."""
    if not pattern.strip():
        assert not glob_match(pattern, name)
    elif "*" not in pattern:
        assert glob_match(pattern, name) is (pattern == name)
    else:
        assert glob_match(pattern, name) is fnmatch.fnmatchcase(name.lower(), pattern.lower())


@pytest.mark.timeout(5)
def test_spec14_glob_is_linear_no_backtracking() -> None:
    """100 wildcards against a long name: no exponential backtracking (a regex would hang)."""
    name = "a" * 200_000
    assert not glob_match("*a" * 100 + "b", name)
    assert not glob_match("a*" * 100 + "b", name)
    assert glob_match("*a" * 100 + "*", name)
    assert not glob_match("*" + "a*" * 100 + "ab*c", name + "c")


def test_spec14_a2a_policy_allows() -> None:
    """Both agents must match the allow list; an empty list with a2a on allows all."""
    on = A2aPolicy(enabled=True)
    assert on.allows("alpha", "beta")
    listed = A2aPolicy(enabled=True, allow=("alpha", "beta"))
    assert listed.allows("alpha", "beta")
    assert not listed.allows("alpha", "gamma")
    assert not listed.allows("gamma", "alpha")
    assert not A2aPolicy(enabled=False, allow=("*",)).allows("alpha", "beta")
    assert A2aPolicy().allows("alpha", "alpha")
    assert not A2aPolicy(enabled=True, allow=("",)).allows("alpha", "beta")


# ------------------------------------------------------------------ property: tree ⇒ all

_keys = st.sampled_from(
    ["", REQ, "agent:alpha:acp:x", "agent:beta:acp:y", "agent:main:main", "agent:gamma:acp:z"]
)
_agents = st.sampled_from(["alpha", "beta", "main", "gamma", ""])
_rows = st.builds(
    VisibilityRow,
    key=_keys,
    agent_id=_agents,
    owner_session_key=_keys,
    spawned_by=_keys,
    parent_session_key=_keys,
)
_policies = st.builds(
    A2aPolicy,
    enabled=st.booleans(),
    allow=st.lists(st.sampled_from(["", "*", "alpha", "BETA", "b*", "ma*n", "*a*"]),
                   max_size=3).map(tuple),
)


@settings(max_examples=500, deadline=None)
@given(row=_rows, requester=_keys, policy=_policies)
def test_spec14_property_tree_implies_all(row: VisibilityRow, requester: str,
                                          policy: A2aPolicy) -> None:
    """SPEC §14 invariant: whenever `tree` shows a row, `all` shows it too (and self ⇒ tree,
    agent ⊆ all)."""
    sees = {v: can_see_session_row(row, requester, v, policy)
            for v in ("self", "tree", "agent", "all")}
    if sees["tree"]:
        assert sees["all"]
    if sees["self"]:
        assert sees["tree"]
    if sees["agent"]:
        assert sees["all"]


# ------------------------------------------------------------------ principals

ALICE = "client:alice"
BOB = "client:bob"
#: Rows of three principals: alice's root and child, bob's root, a local (stdio) root.
P_ROWS: dict[str, VisibilityRow] = {
    "alice-root": VisibilityRow(key="agent:alpha:acp:a1", agent_id="alpha",
                                owner_session_key=ALICE),
    "alice-kid": VisibilityRow(key="agent:beta:acp:a2", agent_id="beta", owner_session_key=ALICE,
                               spawned_by="agent:alpha:acp:a1",
                               parent_session_key="agent:alpha:acp:a1"),
    "bob-root": VisibilityRow(key="agent:alpha:acp:b1", agent_id="alpha", owner_session_key=BOB),
    "local-root": VisibilityRow(key="agent:alpha:acp:l1", agent_id="alpha",
                                owner_session_key="agent:alpha:acp:l1"),
    "local-legacy": VisibilityRow(key="agent:alpha:acp:l2", agent_id="alpha"),
}


def _alice_session(see_all: bool = False) -> Requester:
    return Requester(key="agent:alpha:acp:a1", principal=ALICE, agent_id="alpha",
                     see_all=see_all)


def test_row_principal_is_its_client_owner_else_local() -> None:
    """A client-owned row is that client's; own key, a local root's key or none: local."""
    assert P_ROWS["alice-kid"].principal == ALICE
    assert P_ROWS["local-root"].principal == LOCAL_PRINCIPAL
    assert P_ROWS["local-legacy"].principal == LOCAL_PRINCIPAL
    assert principal_of_owner("client:") == LOCAL_PRINCIPAL  # no token id: no client


@pytest.mark.parametrize("vis", ["self", "tree", "agent", "all"])
@pytest.mark.parametrize("action", ACTIONS)
def test_visibility_never_crosses_principals(vis: str, action: str) -> None:
    """agent/all widen only among the requester's principal's rows: bob's same-agent row and
    the local one stay hidden from alice's session for every action, even with a2a on."""
    on = A2aPolicy(enabled=True)
    for name in ("bob-root", "local-root", "local-legacy"):
        assert not can_see(P_ROWS[name], _alice_session(), vis, on, action), name


@pytest.mark.parametrize("action", ACTIONS)
def test_see_all_grant_reads_across_principals_never_sends(action: str) -> None:
    """The operator grant extends list/history/status to other principals' rows; send never."""
    for name in ("bob-root", "local-root"):
        seen = can_see(P_ROWS[name], _alice_session(see_all=True), "self", A2aPolicy(), action)
        assert seen is (action in READ_ACTIONS), (name, action)


def test_principal_requester_sees_its_principals_rows() -> None:
    """A client connection (key = its principal) sees every row of its principal, nothing
    else; the local principal likewise; an unknown principal nothing."""
    client = Requester(key=ALICE, principal=ALICE)
    local = Requester(key=LOCAL_PRINCIPAL, principal=LOCAL_PRINCIPAL)
    nobody = Requester(key="agent:alpha:acp:gone", principal="")
    for name, row in P_ROWS.items():
        for vis in ("self", "tree", "agent", "all"):
            assert can_see(row, client, vis, A2aPolicy()) is name.startswith("alice"), name
            assert can_see(row, local, vis, A2aPolicy()) is name.startswith("local"), name
            assert not can_see(row, nobody, vis, A2aPolicy(enabled=True))


def test_operator_sees_every_row_and_bad_input_raises() -> None:
    """Only the explicit operator flag sees everything; unknown actions/levels raise."""
    op = Requester(key="", principal="", operator=True)
    assert all(can_see(row, op, "self", A2aPolicy(), "send") for row in P_ROWS.values())
    empty = Requester(key="", principal="")
    assert not any(can_see(row, empty, "all", A2aPolicy(enabled=True)) for row in P_ROWS.values())
    with pytest.raises(ValueError):
        can_see(P_ROWS["alice-root"], op, "all", A2aPolicy(), "delete")
    with pytest.raises(ValueError):
        can_see(P_ROWS["alice-root"], op, "everything", A2aPolicy())


_principals = st.sampled_from([ALICE, BOB, LOCAL_PRINCIPAL])
_owners = st.sampled_from(["", REQ, "agent:alpha:acp:x", ALICE, BOB])


@settings(max_examples=500, deadline=None)
@given(row=st.builds(VisibilityRow, key=_keys, agent_id=_agents, owner_session_key=_owners,
                     spawned_by=_keys, parent_session_key=_keys),
       key=_keys, principal=_principals, see_all=st.booleans(), policy=_policies,
       action=st.sampled_from(ACTIONS))
def test_property_principal_boundary_and_tree_implies_all(
        row: VisibilityRow, key: str, principal: str, see_all: bool, policy: A2aPolicy,
        action: str) -> None:
    """Over random rows: within a principal SPEC §14's invariants hold (tree ⇒
    all, self ⇒ tree); another principal's row is seen only with the grant, only to read."""
    who = Requester(key=key, principal=principal, see_all=see_all)
    sees = {v: can_see(row, who, v, policy, action) for v in ("self", "tree", "agent", "all")}
    if sees["tree"]:
        assert sees["all"]
    if sees["self"]:
        assert sees["tree"]
    if row.principal != principal:
        assert all(s is (see_all and action in READ_ACTIONS) for s in sees.values())
