"""The built-in agent's tests: its turn loop, tools, approval gate and policy, over real stdio."""
