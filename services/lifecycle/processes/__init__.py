"""The live processes: reading them, and proving a tree is a lease's before anyone signals it.

- :mod:`.table` — :class:`~.table.ProcessTable`, the one way to list, read and signal a
  process (tests substitute a simulated one);
- :mod:`.proc_files` — raw reads of ``/proc/<pid>/`` files;
- :mod:`.snapshot` — one listing, indexed, and the trees read from it;
- :mod:`.verify` — ``VerifyOwnedTree``: the evidence that a live tree belongs to a lease;
- :mod:`.usage` — the memory and CPU of a verified tree (``acpgate ps``).
"""
