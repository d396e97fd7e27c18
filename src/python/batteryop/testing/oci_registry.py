"""A real OCI registry on loopback for tests: Debian's `docker-registry` (the CNCF distribution
registry), plain HTTP on `127.0.0.1:<free port>`, its data in a folder of the test's.

`loopback_registry` starts it and yields its address once its own log says "listening on" (no
guessed delay); on exit it is stopped. The release tests push the release's images to it, the
fake flintlockd's image store tests pull kernels and root filesystems from it. The Nodes of
`testing.kubenode` run the same registry with the same config (`registry_config`)
inside their own network namespace.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import yaml

from batteryop.testing.controlplane.server import free_port
from batteryop.testing.processes import die_with_parent, terminate

MISSING_REGISTRY: Final = (
    "Debian's docker-registry is not installed (apt-get install docker-registry)"
)
READY_TIMEOUT_SECONDS: Final = 30.0


def registry_config(folder: Path, address: str) -> Path:
    """A config file for Debian's docker-registry: plain HTTP on `address`, data in `folder`."""
    config = folder / "config.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "info"},  # its "listening on" line says it is ready
                "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
                "http": {"addr": address},
            }
        )
    )
    return config


class RegistryError(RuntimeError):
    """The registry did not start, or did not say it listens in time."""


def have_registry() -> bool:
    return shutil.which("docker-registry") is not None


@contextlib.contextmanager
def loopback_registry(folder: Path, timeout: float = READY_TIMEOUT_SECONDS) -> Iterator[str]:
    """Run docker-registry on `127.0.0.1:<free port>` with its config and data in `folder`;
    yields the address (`127.0.0.1:PORT`), which skopeo reaches with `--tls-verify=false`."""
    binary = shutil.which("docker-registry")
    if binary is None:
        raise RegistryError(MISSING_REGISTRY)
    folder.mkdir(parents=True, exist_ok=True)
    address = f"127.0.0.1:{free_port()}"
    config = registry_config(folder, address)
    proc = subprocess.Popen(
        die_with_parent([binary, "serve", str(config)]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        # One thread reads its log for as long as it runs: select() on the pipe would miss
        # lines already in the reader's buffer, and a full pipe would stop it mid-push.
        listening = threading.Event()
        seen: list[bytes] = []

        def read_log() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                seen.append(line)
                if b"listening on" in line:
                    listening.set()
            listening.set()  # it exited: stop waiting, the check below says so

        threading.Thread(target=read_log, daemon=True, name="registry-log").start()
        listening.wait(timeout)
        if proc.poll() is not None or not any(b"listening on" in line for line in seen):
            tail = b"".join(seen)[-800:].decode(errors="replace")
            raise RegistryError(f"docker-registry on {address} is not ready: {tail}")
        yield address
    finally:
        terminate(proc, grace=10)
