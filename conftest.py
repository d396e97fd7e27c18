"""Root conftest: registers the project's pytest fixtures for every test."""

pytest_plugins = ["batteryop.testing.pytest_plugin"]
