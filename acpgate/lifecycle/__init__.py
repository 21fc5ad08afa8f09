"""The lifecycle service's gRPC contract (``protos/acpgate/lifecycle/v1``); its generated code is
in ``v1``."""
