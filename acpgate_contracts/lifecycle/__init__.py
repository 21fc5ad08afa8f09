"""The lifecycle service's gRPC contract (``protos/acpgate_contracts/lifecycle/v1``); its generated code is
in ``v1``."""
