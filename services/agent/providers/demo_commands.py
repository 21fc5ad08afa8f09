"""The demo model's slash commands: what it advertises (ACP ``available_commands_update``),
how a ``/name args`` prompt maps to its older plain forms, and the ``/help`` answer.

A client sends a chosen command as the prompt text (``/shell ls``, as Zed does), so the
demo model reads the slash form itself; the plain forms (``!ls``, ``read a.txt``) still work.
"""

from __future__ import annotations

from services.agent.providers.base import SlashCommand

#: The slash prefix of a command typed as the prompt.
SLASH = "/"
CMD_HELP = "help"
CMD_SHELL = "shell"

#: Every command the demo model understands, with one example prompt each.
DEMO_COMMANDS: tuple[tuple[SlashCommand, str], ...] = (
    (SlashCommand(CMD_SHELL, "Run a shell command (a tool call; in supervised mode you are "
                  "asked for permission first)", "command to run, e.g. ls"), "/shell ls"),
    (SlashCommand("read", "Read a file of the workspace", "path"), "/read README.md"),
    (SlashCommand("write", "Write a file (asks for permission in supervised mode)",
                  "path, then the text"), "/write notes.txt hello"),
    (SlashCommand("ask", "Ask you a question, with choices after `|`",
                  "question | choice | choice"), "/ask Deploy now? | yes | no"),
    (SlashCommand("plan", "Show a plan (the todo tool)"), "/plan"),
    (SlashCommand("escalate", "Escalate a decision to you (urgency high)",
                  "summary | context"), "/escalate Drop the table? | prod data"),
    (SlashCommand("deliver", "Deliver a file to you as a download", "path"),
     "/deliver notes.txt"),
    (SlashCommand(CMD_HELP, "List these commands with an example of each"), "/help"),
)
COMMANDS: tuple[SlashCommand, ...] = tuple(command for command, _ in DEMO_COMMANDS)

#: What a slash command becomes in the demo model's plain rules (``{}`` = its argument).
_PLAIN = {"shell": "!{}", "read": "read {}", "write": "write {}", "ask": "ask {}",
          "plan": "plan", "escalate": "escalate {}", "deliver": "deliver {}"}

#: The reply to a prompt it has no rule for: what a newcomer can try.
NEWCOMER_TIP = ("Try `/shell ls`: it makes a tool call, and in supervised mode acpgate first "
                "asks for your permission. `/help` lists every command.")


def help_text() -> str:
    """The ``/help`` answer: each command, its description and an example."""
    lines = ["Commands of the demo model (send one as the prompt):", ""]
    for command, example in DEMO_COMMANDS:
        lines.append(f"- `{SLASH}{command.name}` — {command.description}. Example: `{example}`")
    return "\n".join(lines)


def parse_slash(text: str) -> tuple[str, str] | None:
    """``/name args`` → (name lower-cased, args stripped); None when ``text`` is not one."""
    if not text.startswith(SLASH):
        return None
    name, _, args = text[1:].partition(" ")
    if not name.isalpha():  # a path such as /etc/hosts is no command
        return None
    return name.lower(), args.strip()


def plain_form(name: str, args: str) -> str | None:
    """The plain prompt a slash command stands for; None for ``help`` and unknown names.
    A command that needs an argument and got none stays None (it gets the usage)."""
    template = _PLAIN.get(name)
    if template is None or ("{}" in template and not args):
        return None
    return template.format(args)


def usage(name: str) -> str:
    """How to use command ``name`` (its example), or that it is unknown."""
    for command, example in DEMO_COMMANDS:
        if command.name == name:
            return f"`{SLASH}{name}` needs {command.hint or 'no input'}: e.g. `{example}`."
    return f"`{SLASH}{name}` is not a command of the demo model; `/help` lists them."
