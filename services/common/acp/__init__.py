"""Typed ACP at acpgate's boundary: the generated models and names, their reading rules.

:mod:`.schema` holds the models acpgate builds or reads — initialize, the
capabilities, session results, the prompt result, the permission outcome —
generated from the official JSON schema (``tools/gen_acp_schema.py``);
:mod:`.names` ACP's method names and update kinds, v1 and v2, generated from the
schemas (``tools/gen_acp_names.py``);
:mod:`.wire` their reading rules; :mod:`.capabilities` the one builder of what
an acpgate agent side advertises (the edge toward clients, the built-in agent
toward the edge). The ``session/update`` relay stays on raw dicts and orjson
(bench/PROFILE.md): only what acpgate itself builds or reads is typed.
"""
