"""The built wheel, installed from PyPI alone into clean venvs of each CPython pyenv has.

The wheel comes from `./pants package src/python/batteryop/client:dist` (a runtime package
dependency of this test). Each venv gets only the wheel and what its metadata asks for; the
test imports the library, runs `battery --help`, and checks that neither kopf nor the
`kubernetes` package came along, and that the shared vocabulary behaves the same on every
version (on 3.10 `batteryop.api._compat` stands in for 3.11's `StrEnum` and `UTC`). CPython 3.9
is refused by the wheel's `Requires-Python`, and the test checks that it is refused cleanly.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

SUPPORTED = ("3.10", "3.11", "3.12", "3.13")


def pyenv_python(version: str) -> Path | None:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(root.glob(f"{version}.*/bin/python{version}")) if root.is_dir() else []
    return found[-1] if found else None


def the_wheel() -> Path:
    wheels = sorted(Path.cwd().rglob("battery_operator_client-*.whl"))
    assert len(wheels) == 1, f"expected one built wheel, found {wheels}"
    return wheels[0]


def make_venv(python: Path, where: Path) -> Path:
    subprocess.run([str(python), "-m", "venv", str(where)], check=True, timeout=120)
    return where / "bin"


def pip_install(bin_dir: Path, wheel: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            str(wheel),
            *more,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PIP_NO_INPUT": "1"},
    )


def test_the_wheel_carries_its_typing_marker_and_console_script() -> None:
    with zipfile.ZipFile(the_wheel()) as wheel:
        files = set(wheel.namelist())
        meta_name = next(n for n in files if n.endswith(".dist-info/METADATA"))
        metadata = wheel.read(meta_name).decode()
        entry_points = wheel.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert "batteryop/client/py.typed" in files
    assert "batteryop/client/cli.py" in files
    # The exec messages are encoded by `batteryop.client._wire`: no generated code, no protobuf.
    assert not any(n.startswith(("battery_protos/", "google/")) for n in files)
    assert not any(n.startswith(("batteryop/operator/", "batteryop/testing/")) for n in files)
    assert "battery = batteryop.client.cli:main" in entry_points
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    # The client reaches the API server over batteryop.kube.http, not aiohttp (its import alone
    # was 100-130 ms of `battery run`).
    assert not any(
        p in r for r in requires for p in ("kopf", "kubernetes", "aiohttp", "protobuf")
    ), requires
    assert all(any(op in r for op in (">=", "<", "~=")) for r in requires), requires
    assert "Requires-Python: >=3.10" in metadata


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_wheel_installs_from_pypi_and_runs(version: str, tmp_path: Path) -> None:
    python = pyenv_python(version)
    if python is None:
        pytest.skip(f"pyenv has no CPython {version} here")
    bin_dir = make_venv(python, tmp_path / "venv")
    installed = pip_install(bin_dir, the_wheel())
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    probe = subprocess.run(
        [
            str(bin_dir / "python"),
            "-c",
            "import batteryop.client as c, importlib.util as u; "
            "from batteryop.api.conditions import ClaimPhase as P; "
            "from batteryop.api.times import format_time, parse_time; "
            "print(c.Client.__module__, c.AsyncClient.__name__); "
            "print(u.find_spec('kopf') is None, u.find_spec('kubernetes') is None); "
            "print(str(P.BOUND), f'{P.BOUND}', P('Bound') is P.BOUND, P.BOUND == 'Bound'); "
            "print(format_time(parse_time('2026-12-01T03:04:05.123Z')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == [
        "batteryop.client",
        "AsyncClient",
        "True",
        "True",
        "Bound",
        "Bound",
        "True",
        "True",
        "2026-12-01T03:04:05Z",
    ]
    helped = subprocess.run(
        [str(bin_dir / "battery"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert helped.returncode == 0, helped.stderr
    assert "battery [OPTIONS] COMMAND" in helped.stdout
    assert "run" in helped.stdout


def test_cpython_3_9_is_refused_by_requires_python(tmp_path: Path) -> None:
    python = pyenv_python("3.9")
    if python is None:
        pytest.skip("pyenv has no CPython 3.9 here")
    bin_dir = make_venv(python, tmp_path / "venv")
    installed = pip_install(bin_dir, the_wheel())
    # pip refuses the wheel itself (Requires-Python) or, older pips, its dependencies' pins
    # (protobuf 7 needs 3.10); either way nothing is installed.
    assert installed.returncode != 0
    said = (installed.stderr + installed.stdout).lower()
    assert "requires a different python" in said or "require a different python" in said
    assert not (bin_dir / "battery").exists()
