"""The built-in ACP agent: model providers, tools, approval gate, policy enforcement."""
