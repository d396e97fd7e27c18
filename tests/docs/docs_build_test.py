"""The documentation site builds with --strict (broken links and nav entries fail)."""

import subprocess
import sys
from pathlib import Path


def test_docs_site_builds_strictly(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            "mkdocs.yml",
            "-d",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "index.html").is_file()
    assert (tmp_path / "dev" / "control-plane" / "index.html").is_file()
    # The hook rendered the coverage page from the tree, with every family's table.
    coverage = (tmp_path / "requirements" / "coverage" / "index.html").read_text()
    assert 'href="../02-claims/#CL-001"' in coverage
    assert "requirements: " in coverage and " active, " in coverage
    assert "batteryop/operator/claims/" in coverage
    # The other hook rendered the operator's reconcile steps, in the order the code runs them.
    operator = (tmp_path / "operator" / "index.html").read_text()
    assert "<!-- reconcile-steps" not in operator, "a step-table marker was left as it was"
    assert operator.index("release.release") < operator.index("bind.bind")
    assert operator.index("bind.bind") < operator.index("synced.synced")
    assert operator.index("delete.delete_pool") < operator.index("declare.declare")
