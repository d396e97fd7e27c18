"""The documentation site builds with --strict (broken links and nav entries fail)."""

from pathlib import Path


def test_docs_site_builds_strictly(built_site: Path) -> None:
    site = built_site  # conftest.built_site builds it with --strict
    assert (site / "index.html").is_file()
    assert (site / "dev" / "control-plane" / "index.html").is_file()
    # The hook rendered the coverage page from the tree, with every family's table.
    coverage = (site / "requirements" / "coverage" / "index.html").read_text()
    assert 'href="../02-claims/#CL-001"' in coverage
    assert "requirements: " in coverage and " active, " in coverage
    assert "batteryop/operator/claims/" in coverage
    # The other hook rendered the operator's reconcile steps, in the order the code runs them.
    operator = (site / "operator" / "index.html").read_text()
    assert "<!-- reconcile-steps" not in operator, "a step-table marker was left as it was"
    assert operator.index("release.release") < operator.index("bind.bind")
    assert operator.index("bind.bind") < operator.index("synced.synced")
    assert operator.index("delete.delete_pool") < operator.index("declare.declare")
