"""What a session and its adapter talk back to the client through.

The back-channel of server → client requests and the permission answers.
May import the edge-wide modules only.
"""
