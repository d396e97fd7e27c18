"""Fixtures shared by the security suite (the control plane comes from the project's plugin)."""
