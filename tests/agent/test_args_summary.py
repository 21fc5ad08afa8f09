"""The approval summary hides nothing: control characters visible, explicit truncation."""

from __future__ import annotations

from services.agent.tools.args import SUMMARY_LIMIT, one_line


def test_newlines_and_control_characters_are_visible() -> None:
    assert one_line({"command": "ls\nrm -rf /"}) == "ls⏎rm -rf /"
    assert one_line({"command": "a\r\nb\tc"}) == "a␍⏎b⇥c"
    assert one_line({"command": "echo \x1b[2Jhi"}) == "echo <U+001B>[2Jhi"
    # A bidi override or a zero-width space would hide or reorder what is shown.
    assert one_line({"command": "echo \u202eabc\u200b"}) == "echo <U+202E>abc<U+200B>"
    assert one_line({"command": "ls\u2028rm x"}) == "ls<U+2028>rm x"


def test_spaces_and_ordinary_text_are_kept_verbatim() -> None:
    assert one_line({"command": "echo  'a   b'"}) == "echo  'a   b'"
    assert one_line({"path": "dir/ü 文件.txt"}) == "dir/ü 文件.txt"
    # Without a known key the JSON of all arguments is shown (newlines already escaped).
    assert one_line({"x": "a\nb"}) == '{"x":"a\\nb"}'


def test_long_summary_says_how_much_was_cut() -> None:
    command = "echo " + "a" * 5000 + "; rm -rf ~"
    summary = one_line({"command": command})
    assert SUMMARY_LIMIT >= 4000
    assert summary.startswith(command[:SUMMARY_LIMIT])
    cut = len(command) - SUMMARY_LIMIT
    assert summary.endswith(f"… [{cut} more characters not shown; see the full arguments]")
    exact = "x" * SUMMARY_LIMIT
    assert one_line({"command": exact}) == exact  # at the limit: nothing cut, no marker
    assert one_line({"command": "abcdef"}, limit=4) == (
        "abcd… [2 more characters not shown; see the full arguments]")
