"""acpgate's tests: one folder per service or tier, real processes and sockets, fakes only at the model."""
