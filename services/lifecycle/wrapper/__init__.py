"""The adapter wrapper: what runs in the wrapper's own process, standard library only.

- :mod:`.supervisor` — the wrapper itself: runs the adapter, forwards signals, reaps;
- :mod:`.control` — its end of the control channel a restarted service re-adopts it by;
- :mod:`.bookkeeping` — the adapter's bounded stderr log and the scan of what is left.

:mod:`services.lifecycle.adapters.spawn` installs these files beside each other under the
wrapper root and runs the supervisor as a file; nothing here may import outside the
standard library or this package (this ``__init__`` imports nothing).
"""
