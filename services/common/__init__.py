"""Code shared by every service: config, logging, gRPC plumbing, protocol constants."""
