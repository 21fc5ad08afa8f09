"""The long default lists of the configuration schema: what reads without asking, what no
agent touches (kept apart from :mod:`.schema` so each file stays one screenful of a job)."""

from __future__ import annotations

#: Tools that only read; they never ask in supervised mode unless listed in always_ask.
DEFAULT_AUTO_APPROVE = ("file_read", "glob", "content_search", "todo", "deliver_file",
                        "skill_load",  # reads the agent's own skills/
                        # what SPEC §14 visibility already lets a session see
                        "sessions_list", "sessions_history", "session_status")
#: Paths no agent touches unless they lie inside an allowed root: credentials
#: and kernel interfaces (``/proc/<pid>/environ`` holds API keys). Not all of
#: ``/etc``: a shell needs its resolver, certificates and libraries to work.
#: acpgate's own data dir and config file are always added (session policy).
DEFAULT_FORBIDDEN_PATHS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/root",
    "/proc",
    "/sys",
    "/boot",
    "/dev",
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.kube",
    "~/.docker",
    "~/.config/gcloud",
    "~/.netrc",
    "~/.git-credentials",
    "~/.pypirc",
    "~/.npmrc",
)

