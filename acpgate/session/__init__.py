"""The session service's gRPC contract (``protos/acpgate/session/v1``); its generated code is in
``v1``."""
