"""The figures' sources: sequence blocks, the install diagram's references, the plots' data."""

import pytest

from batteryop.figures import install, plots
from batteryop.figures.graphviz import GraphvizError, render_svg
from batteryop.figures.sequence import SequenceError, parse, sequence_dot


def test_a_sequence_reads_its_participants_and_messages_in_order() -> None:
    people, messages = parse("participants: a=Alice | b\na -> b: hello\nb -> a: hi\na -> a: thinks")
    assert people == [("a", "Alice"), ("b", "b")]
    assert [(m.sender, m.receiver, m.text) for m in messages] == [
        ("a", "b", "hello"),
        ("b", "a", "hi"),
        ("a", "a", "thinks"),
    ]
    dot = sequence_dot("participants: a | b\na -> b: hello\nb -> a: hi\na -> a: thinks")
    assert 'a_1 -> b_1 [label="hello"' in dot
    assert 'a_2 -> b_2 [dir=back, label="hi"' in dot  # an answer points right to left
    assert "a_3 [shape=note" in dot


@pytest.mark.parametrize(
    "text",
    ["a -> b: no participants line", "participants: a\na -> c: unknown", "participants: a\na b"],
)
def test_a_sequence_that_cannot_be_read_names_the_line(text: str) -> None:
    with pytest.raises(SequenceError):
        parse(text)


def test_dot_draws_svg_with_ids_of_its_own_and_refuses_bad_source() -> None:
    svg = render_svg("digraph g { a -> b }", "g1")
    assert svg.startswith("<svg") and 'id="g1-graph0"' in svg and "<?xml" not in svg
    with pytest.raises(GraphvizError, match="g2"):
        render_svg("digraph g { a -> ", "g2")


def test_the_install_diagram_draws_the_references_of_the_rendered_manifests() -> None:
    objects = install.snapshot_objects()
    edges = install.references(objects)
    sa = install.key("ServiceAccount", "battery-operator-exec-agent")
    assert (install.key("DaemonSet", "battery-operator-exec-agent"), sa, "runs as") in edges
    operator = install.key("Deployment", "battery-operator-controller-manager")
    client = install.key("Certificate", "battery-flintlockd-client")
    assert (client, operator, "Secret battery-flintlockd-client") in edges
    assert (operator, install.key("PersistentVolumeClaim", "battery-data"), "mounts") in edges
    dot = install.install_dot(objects)
    assert all(install.key(o["kind"], o["metadata"]["name"]) in dot for o in objects)


def test_every_plot_is_drawn_from_the_recorded_figures_with_its_provenance() -> None:
    recorded = plots.results("claim-bind")["runs"]
    for name in plots.PLOTS:
        drawn = plots.draw(name)
        assert drawn.svg.startswith("<svg") and drawn.svg.rstrip().endswith("</svg>")
        assert drawn.caption.startswith("Measured by tests/bench/")
    latency = plots.draw("bind-latency")
    assert f"{recorded[-1]['sequential']['p50_ms']:g}" in latency.svg  # the bar's own label
    assert recorded[-1]["commit"] in latency.caption and "agent-sandbox" in latency.caption
    with pytest.raises(plots.PlotError):
        plots.draw("no-such-plot")
