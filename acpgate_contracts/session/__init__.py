"""The session service's gRPC contract (``protos/acpgate_contracts/session/v1``); its generated code is in
``v1``."""
