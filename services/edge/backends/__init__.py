"""The edge's typed clients of acpgate's two services: the only edge code that sees gRPC.

:mod:`.session` is the session service (store, aliases, visibility, policy), :mod:`.lifecycle`
the lifecycle service (leases, adapters, processes), and :mod:`.fds` its fd socket, where an
adapter's pipes are taken (not gRPC). Each turns domain arguments into
protobuf requests and protobuf answers into domain values, and every gRPC failure into a
:class:`~.errors.ServiceError`. The rest of the edge imports neither ``grpc`` nor the
generated contracts; a test may hand it a fake backend with the same methods.
"""
