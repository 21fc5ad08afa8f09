"""The acpgate services: session, lifecycle, edge and the built-in agent.

Each sub-package is one service of ARCHITECTURE.md; ``common`` holds the little
that is really shared (config, logging, gRPC plumbing, protocol constants).
"""
