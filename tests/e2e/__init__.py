"""End-to-end tests: acpgate acp with its services as real processes, ACP clients and agents."""
