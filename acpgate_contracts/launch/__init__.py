"""The launch contract (``protos/acpgate_contracts/launch/v1``): the sealed launch spec the session service
signs and the lifecycle service verifies; its generated code is in ``v1``."""
