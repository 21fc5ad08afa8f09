"""The lifecycle service: instance id, leases, wrapper, verification, reaping — the only code that touches processes."""
