"""The launch contract: the launch spec the session service seals and the lifecycle service opens.

Its generated code is in ``v1``, from ``protos/acpgate_contracts/launch/v1``."""
