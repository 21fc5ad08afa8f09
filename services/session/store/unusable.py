"""The refusal to start on a store that exists but cannot be used.

An existing SQLite file that is damaged, not a database, of a newer schema or
not readable — or a PostgreSQL database whose schema this acpgate cannot use —
holds the sessions people expect back: running on memory instead would answer
"not found" for each of them and lose every new one at the next restart. So the
session service does not start; :class:`StoreUnusable` says which store, why,
and which command deals with it (it is a :class:`ConfigError`, so the command
line prints that sentence on stderr and exits non-zero, and ``acpgate serve``
reports it as its refusal).
"""

from __future__ import annotations

from services.common.config import ConfigError
from services.session.store.records import StoreError

__all__ = ["StoreUnusable", "with_config_dir"]


def with_config_dir(command: str, config_dir: str) -> str:
    """``command`` as a person types it for this install (``--config-dir`` when not the
    default one)."""
    return f"{command} --config-dir {config_dir}" if config_dir else command


class StoreUnusable(StoreError, ConfigError):
    """The store at ``where`` exists and cannot be used: ``reason``."""

    def __init__(self, where: str, reason: str, *, backend: str = "sqlite",
                 newer: bool = False, config_dir: str = "") -> None:
        self.where, self.reason, self.backend, self.newer = where, reason, backend, newer
        self.config_dir = config_dir
        super().__init__(self._sentence())

    def for_install(self, config_dir: str) -> StoreUnusable:
        """The same refusal, its commands naming ``config_dir`` ("" for the default one)."""
        return StoreUnusable(self.where, self.reason, backend=self.backend, newer=self.newer,
                             config_dir=config_dir)

    def _sentence(self) -> str:
        check = with_config_dir("acpgate store check", self.config_dir)
        head = (f"the session store {self.where} cannot be used: {self.reason}. Nothing was "
                "started and the store was left as it is")
        if self.backend != "sqlite":
            return (f"{head}: fix the database, or point [store] url at another one; "
                    f"`{check}` shows what is wrong")
        if self.newer:
            return (f"{head}: it was written by a newer acpgate — run that one, or move the "
                    f"file aside to start with an empty store; `{check}` shows its version")
        repair = with_config_dir("acpgate store repair", self.config_dir)
        return (f"{head}. `{check}` shows what is wrong; `{repair}` moves it aside and "
                "recovers the sessions it can still read")
