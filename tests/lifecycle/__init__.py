"""The lifecycle service's tests: spawning, leases, attach, fd passing and reaping real processes."""
