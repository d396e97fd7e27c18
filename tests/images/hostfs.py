"""Helpers for the image definitions' tests: the Host Image's scripts run for real, against a
tree of their own (BATTERY_ROOT) and, for the network, in network namespaces made by the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import batteryop  # pants: no-infer-dep (the namespace root has no target of its own)

HOST = Path("src/images/host")
ROOTFS = HOST / "rootfs"
LIBEXEC = ROOTFS / "usr/libexec/battery"
IMAGE_ENV = ROOTFS / "usr/share/battery/image.env"


def read_env(path: Path) -> dict[str, str]:
    """KEY=value lines of an env file, as the scripts read them."""
    found = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            found[key] = value
    return found


def python_root() -> Path:
    """The folder holding the `batteryop` package this test runs (the image's python/)."""
    return Path(batteryop.__file__).resolve().parent.parent


class FakeHost:
    """A Host's filesystem under a temporary root, where the scripts run with BATTERY_ROOT."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names = read_env(IMAGE_ENV)
        (root / "usr/share/battery").mkdir(parents=True)
        shutil.copy(IMAGE_ENV, root / "usr/share/battery/image.env")
        shutil.copy(HOST / "versions.env", root / "usr/share/battery/versions.env")
        (root / "usr/lib/battery").mkdir(parents=True)
        (root / "usr/lib/battery/python").symlink_to(python_root())
        (root / "etc/battery").mkdir(parents=True)

    def path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def not_ready_dir(self) -> Path:
        return self.path(self.names["BATTERY_NOT_READY_DIR"])

    def not_ready(self) -> dict[str, str]:
        """The not-ready files: unit -> content."""
        if not self.not_ready_dir.is_dir():
            return {}
        return {p.name: p.read_text() for p in self.not_ready_dir.iterdir()}

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            BATTERY_ROOT=str(self.root),
            BATTERY_LIB=str((LIBEXEC / "lib.sh").resolve()),
            PYTHONDONTWRITEBYTECODE="1",
            # The Host's python3; here the test's own interpreter (not a version-manager shim).
            PYTHON=sys.executable,
        )
        env.update(extra)
        return env

    def run(self, script: str, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """Run /usr/libexec/battery/<script> of the image as its unit does."""
        return subprocess.run(
            ["bash", str(LIBEXEC / script), *args],
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def write_host_conf(self, text: str) -> None:
        self.path(self.names["BATTERY_HOST_CONF"]).write_text(text)

    def host_env(self) -> dict[str, str]:
        return read_env(self.path(self.names["BATTERY_HOST_ENV"]))


def require_root(what: str) -> None:
    """Skip, saying why, where the test cannot have what it needs."""
    if os.geteuid() != 0:
        pytest.skip(f"{what} needs root (namespaces, devices); running as uid {os.geteuid()}")


def have(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: .ci/run installs it (apt-get)")
    return path
