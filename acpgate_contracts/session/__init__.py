"""The session service's gRPC contract.

Its generated code is in ``v1``, from ``protos/acpgate_contracts/session/v1``."""
