"""How one configuration key is declared: its default, its meaning, its bounds, and whether
a running process applies a new value on reload.

A section field is written ``name: type = setting(default, "meaning", min=…, reload=True)``;
the declaration lives in the field's metadata, so the schema is the one place that says
what a key is. :func:`declared` reads it back; :meth:`Setting.problem` checks a value
against it (``load`` runs it over every key of an assembled config) and
:meth:`Setting.bounds` says the same in words (the configuration reference).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field
from typing import Any

#: A check a bound cannot express: the problem with a value, None when it is fine. Its
#: docstring's first line says what it accepts (the configuration reference shows it).
Check = Callable[[Any], "str | None"]

_KEY = "acpgate.setting"


@dataclass(frozen=True)
class Setting:
    """What a key's field declares beyond its type and default."""

    doc: str = ""
    #: Inclusive bounds of an integer key (None: unbounded on that side).
    min: int | None = None
    max: int | None = None
    #: What 0 means where 0 is allowed and special ("unlimited", "a quarter of …").
    zero: str = ""
    #: The only values allowed, in the order they are shown.
    choices: tuple[str, ...] = ()
    check: Check | None = None
    #: True: a reload applies a new value at once; False: it waits for a restart.
    reload: bool = False

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this key (the text after ``[section] key: ``);
        None when it is within bounds. Types and choices are checked while reading."""
        if isinstance(value, int) and not isinstance(value, bool):
            low, high = self.min, self.max
            if (low is not None and value < low) or (high is not None and value > high):
                return self._range_text(value)
        if self.check is not None:
            return self.check(value)
        return None

    def _range_text(self, value: int) -> str:
        zero = f" (0 = {self.zero})" if self.zero else ""
        if self.min is not None and self.max is not None:
            if self.choices:  # an integer or one of these words
                words = " or ".join(f'"{c}"' for c in self.choices)
                return f"expected {self.min} to {self.max} or {words}, got {value}"
            return f"expected an integer in {self.min}..{self.max}{zero}"
        if self.min is not None:
            return f"expected an integer ≥ {self.min}{zero}"
        return f"expected an integer ≤ {self.max}{zero}"

    def bounds(self) -> str:
        """The bounds in words, for the reference ("" when the type says it all)."""
        parts = []
        if self.min is not None and self.max is not None:
            parts.append(f"{self.min}..{self.max}")
        elif self.min is not None:
            parts.append(f"≥ {self.min}")
        elif self.max is not None:
            parts.append(f"≤ {self.max}")
        if self.zero:
            parts.append(f"0 = {self.zero}")
        if self.choices:
            parts.append(" / ".join(f"`{c}`" if c else '`""`' for c in self.choices))
        if self.check is not None and self.check.__doc__:
            line = self.check.__doc__.strip().splitlines()[0].rstrip(".")
            parts.append(line[:1].lower() + line[1:])
        return "; ".join(parts)


def setting(default: Any = MISSING, doc: str = "", *,
            factory: Callable[[], Any] | None = None, min: int | None = None,
            max: int | None = None, zero: str = "", choices: tuple[str, ...] = (),
            check: Check | None = None, reload: bool = False) -> Any:
    """A section field declaring one key (``factory`` for a mutable default)."""
    meta = {_KEY: Setting(doc=doc, min=min, max=max, zero=zero, choices=choices,
                          check=check, reload=reload)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def declared(f: Field[Any]) -> Setting:
    """The declaration of a section field (an empty one for fields not made by
    :func:`setting`)."""
    found = f.metadata.get(_KEY)
    return found if isinstance(found, Setting) else Setting()
