"""The shared code's tests: ACP models and names, config, JSON-RPC, gRPC plumbing, logging."""
