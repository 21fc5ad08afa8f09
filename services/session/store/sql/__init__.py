"""What the two SQL backends share: column lists, row builders and the statements both run.

- :mod:`.rows` — column lists, row → record, the update and turn builders;
- :mod:`.claims` — take, release, and the fence of a write;
- :mod:`.history` — history in pages bounded by count and bytes;
- :mod:`.fork` — what a fork reads and writes.

Nothing here touches a connection: :mod:`..sqlite` and :mod:`..postgres` run what it builds.
"""
