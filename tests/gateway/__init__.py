"""The gateway's tests: acpgate serve on a real port, its workers, hosts, tokens and transports."""
