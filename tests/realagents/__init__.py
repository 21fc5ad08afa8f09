"""The real-adapter tier (marker realagents): real npm adapters behind acpgate acp."""
