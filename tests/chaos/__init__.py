"""Killing acpgate's own processes under streaming sessions: nothing a client was sent is lost."""
