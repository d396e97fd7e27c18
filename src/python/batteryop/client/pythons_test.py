"""Every Python the wheel claims really works (CC-111): `Requires-Python: >=3.10`.

- The modules the built wheel ships type-check with mypy for 3.10 and pass ruff for 3.10 (the
  repository's own checks target 3.11), and none of them names the built-in `TimeoutError`,
  which on 3.10 is not what `asyncio` raises (they catch `batteryop.api._compat.TIMEOUT_ERRORS`).
- The client's unit tests that need no control plane run on CPython 3.10 and on the newest
  CPython pyenv has, in a venv holding only the wheel's requirements and pytest, with the
  sources of this tree first on the path (`timeouts_test` among them: it fails on 3.10 when a
  timeout is caught as the built-in `TimeoutError`).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from batteryop.client.wheel_test import make_venv, pip_install, pyenv_python, the_wheel

OLDEST = "3.10"

UNIT_TESTS = [
    f"src/python/batteryop/client/{name}_test.py"
    for name in ("cli", "core", "exports", "hold", "mock", "sync", "timeouts", "wire")
]
"""The client's unit tests that need no control plane or test harness."""

TEST_REQUIREMENTS = (
    "pytest>=8",
    "pytest-asyncio>=0.24",
    "hypothesis>=6.100",
    "aiohttp>=3.10",
    "protobuf>=7.36.2,<8",
)
"""What the unit tests need beside the wheel, as 3rdparty/python/requirements.txt has them:
aiohttp for `timeouts_test`'s stand-in API server only (the wheel itself reaches the API server
over `batteryop.kube.http`), protobuf for `wire_test`'s generated code (the wheel encodes and
decodes its exec messages itself, `_wire`)."""


def newest() -> str:
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    minors = {
        int(p.name.split(".")[1])
        for p in (root.glob("3.*.*") if root.is_dir() else [])
        if p.name.split(".")[1].isdigit()
    }
    return f"3.{max(minors)}" if minors else "3.13"


def wheel_sources(into: Path) -> list[Path]:
    """The wheel's Python modules, extracted under `into`."""
    with zipfile.ZipFile(the_wheel()) as wheel:
        names = [n for n in wheel.namelist() if n.endswith(".py")]
        wheel.extractall(into, names)
    return [into / n for n in names]


@pytest.mark.req("CC-111")
def test_the_wheels_modules_type_check_and_lint_for_3_10(tmp_path: Path) -> None:
    ours = [str(f) for f in wheel_sources(tmp_path / "wheel")]
    config = str(Path("pyproject.toml").resolve())
    mypy = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--python-version",
            OLDEST,
            "--config-file",
            config,
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            *ours,
        ],
        cwd=tmp_path / "wheel",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert mypy.returncode == 0, mypy.stdout[-4000:] + mypy.stderr[-2000:]
    ruff = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--target-version",
            "py310",
            # The `noqa`s the 3.11 checks need (UP017, UP036) are unused for 3.10: not an error.
            "--extend-ignore",
            "RUF100",
            "--config",
            config,
            *ours,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ruff.returncode == 0, ruff.stdout[-4000:] + ruff.stderr[-2000:]


@pytest.mark.req("CC-111")
def test_no_shipped_module_catches_the_built_in_timeout_error(tmp_path: Path) -> None:
    named: list[str] = []
    for file in wheel_sources(tmp_path / "wheel"):
        if file.name == "_compat.py":
            continue
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Name) and node.id == "TimeoutError":
                named.append(f"{file.relative_to(tmp_path / 'wheel')}:{node.lineno}")
    assert named == [], "catch batteryop.api._compat.TIMEOUT_ERRORS instead"


@pytest.mark.req("CC-111")
@pytest.mark.parametrize("version", sorted({OLDEST, newest()}))
def test_the_clients_unit_tests_pass_on(version: str, tmp_path: Path) -> None:
    python = pyenv_python(version)
    if python is None:
        pytest.skip(f"pyenv has no CPython {version} here")
    bin_dir = make_venv(python, tmp_path / "venv")
    installed = pip_install(bin_dir, the_wheel(), *TEST_REQUIREMENTS)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    # The tests of this tree, and the generated code `wire_test` holds `_wire` to.
    protos = next(Path(p) for p in sys.path if p and (Path(p) / "battery_protos").is_dir())
    tree = [str(Path("src/python").resolve()), str(protos.resolve())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(tree)}
    ran = subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--noconftest",
            "-c",
            "pyproject.toml",
            "-q",
            *UNIT_TESTS,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and " skipped" not in ran.stdout, ran.stdout[-2000:]
