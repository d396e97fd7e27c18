"""The documentation site, built once per test module with `mkdocs build --strict`."""

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `mkdocs build --strict` writes it (broken links and nav entries fail)."""
    site = tmp_path_factory.mktemp("site")
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return site
