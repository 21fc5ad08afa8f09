"""The operators' commands' tests: ps, sessions, doctor, agents add, the endpoints."""
