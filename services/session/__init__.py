"""The session service: store, aliases, policy, visibility — the one place that decides."""
