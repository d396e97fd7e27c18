"""The documentation site builds with --strict (broken links and nav entries fail)."""

from html import unescape
from pathlib import Path

import pytest

from batteryop.obs import exported


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
    # And the host registry's, on its own page.
    registry = (site / "host-registry" / "index.html").read_text()
    assert "<!-- reconcile-steps" not in registry, "a step-table marker was left as it was"
    assert registry.index("resume.resume") < registry.index("apply_with_api.apply_with_api")
    assert registry.index("apply_with_api.apply_with_api") < registry.index("publish.publish")


@pytest.mark.req("DP-109")
def test_the_metrics_reference_lists_every_exported_metric(built_site: Path) -> None:
    page = unescape((built_site / "metrics" / "index.html").read_text())
    for definition in exported.ALL:
        row = page[page.index(f"<code>{definition.family}</code>") :].split("</tr>")[0]
        assert f"<td>{definition.kind}</td>" in row, definition.family
        for label in definition.labels:
            assert f"<code>{label}</code>" in row, (definition.family, label)


# Every figure the pages ask for, by page: drawn as inline SVG by the figures hook.
FIGURES = {
    "architecture": ("architecture-api", "architecture-grpc", "install"),
    "operator": ("claim-life",),
    "exec-agent": ("exec-authorization", "host-certificates"),
    "performance": (
        "bind-latency",
        "burst",
        "peers-measured",
        "requests-per-claim",
        "scale",
        "exec-round-trip",
    ),
}


def test_every_diagram_and_plot_is_drawn_inline(built_site: Path) -> None:
    for page, names in FIGURES.items():
        html = (built_site / page / "index.html").read_text()
        for marker in ("```dot", "```sequence", "<!-- figure:", "<!-- plot:", "reconcile-diagram"):
            assert marker not in html, f"{page}: {marker} was left as it was"
        assert 'data-figure="' not in html, f"{page}: a figure placeholder was left"
        for name in names:
            start = html.index(f'<figure class="bo-figure" id="figure-{name}">')
            figure = html[start : html.index("</figure>", start)]
            assert "<svg" in figure and "</svg>" in figure, f"{page}: {name} has no SVG"
    # The claim's life names the steps the reconcile runs, and the phases they set.
    operator = (built_site / "operator" / "index.html").read_text()
    life = operator[operator.index('id="figure-claim-life"') :]
    for text in ("bind.bind", "ClaimVM", "phase Bound", "phase Expired", "always: synced.synced"):
        assert text in life, text
    # The install diagram names objects of the rendered install.yaml.
    architecture = unescape((built_site / "architecture" / "index.html").read_text())
    install = architecture[architecture.index('id="figure-install"') :]
    assert "DaemonSet" in install and "battery-operator-exec-agent" in install
    # Each plot says when, where and how it was measured.
    performance = (built_site / "performance" / "index.html").read_text()
    assert performance.count("<figcaption>Measured by tests/bench/") == len(FIGURES["performance"])
    assert "2-core development machine" in performance and "c25e2d8" in performance
