"""Attacks on acpgate run as real processes: a real gateway, real tokens, a real shell tool."""
