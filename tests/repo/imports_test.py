"""Layering rules between packages, checked by import-linter (kopf's `.importlinter` idea).

The contracts live in `pyproject.toml` (`[tool.importlinter]`):

- `batteryop.api` imports nothing of ours and no API client: it is the shared vocabulary.
- Only tests (and the harnesses in `batteryop.testing` themselves) import `batteryop.testing`.
- Libraries (api, battery, capi, docsite, hostconf, kube, manifests, obs, tls, traceability)
  never import a deployable, and no deployable imports another; the client imports no kopf.
- Inside the operator, layers: `main` > `app` > runtime and inputs > the claims and Pool
  controllers (independent of each other) > what they share (`chain`, `keys`, `outcome`,
  `workqueue`).
- Inside the host registry, layers: `main` > `controller` > `loops` > `inputs` > its
  reconcile (`inventory`) > what they share (`admission`, `config`, `plan`, ...).
- Inside each controller (claims, Pools, the host registry's `inventory`), layers: the chain
  (`reconcile`) > its steps (independent of each other, over a few shared step modules) >
  the scope > the deps.

They are about production code, so import-linter runs over a copy of `src/python/batteryop`
without the test modules (`*_test.py`, `conftest.py`), in a subprocess whose import path
starts at that copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path("src/python/batteryop")
CONFIG = Path("pyproject.toml")


def production_copy(into: Path) -> Path:
    """`src/python/batteryop` without test modules, under `into`; the path to put first."""
    target = into / "batteryop"
    shutil.copytree(
        ROOT, target, ignore=shutil.ignore_patterns("*_test.py", "conftest.py", "__pycache__")
    )
    return into


def lint_imports(tmp_path: Path, config: Path = CONFIG) -> subprocess.CompletedProcess[str]:
    path = production_copy(tmp_path / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), *sys.path])}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))",
            str(config.resolve()),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_copy_holds_the_code_and_no_tests(tmp_path: Path) -> None:
    copy = production_copy(tmp_path) / "batteryop"
    assert (copy / "tls" / "pki.py").is_file()
    assert (copy / "testing" / "controlplane" / "server.py").is_file()
    assert not list(copy.rglob("*_test.py"))


def test_packages_respect_the_layering_rules(tmp_path: Path) -> None:
    result = lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # Every contract was checked (import-linter fails on a package that does not exist).
    contracts = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in result.stdout, result.stdout


def test_a_broken_rule_fails(tmp_path: Path) -> None:
    # The check can fail: a contract the code breaks (the operator imports batteryop.api).
    config = tmp_path / "broken.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "batteryop"\n\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "the operator never imports the API vocabulary"\n'
        'type = "forbidden"\n'
        'source_modules = ["batteryop.operator"]\n'
        'forbidden_modules = ["batteryop.api"]\n'
    )
    result = lint_imports(tmp_path, config)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout.upper(), result.stdout
