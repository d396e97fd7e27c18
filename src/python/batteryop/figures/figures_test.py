"""The figures' sources: sequence blocks, the install diagram's references, the plots' data."""

import re

import pytest

from batteryop.figures import install, plots, sequence
from batteryop.figures.graphviz import GraphvizError, render_svg
from batteryop.figures.sequence import SequenceError, parse, sequence_svg


def test_a_sequence_reads_its_participants_and_messages_in_order() -> None:
    people, messages = parse("participants: a=Alice | b\na -> b: hello\nb -> a: hi\na -> a: thinks")
    assert people == [("a", "Alice"), ("b", "b")]
    assert [(m.sender, m.receiver, m.text) for m in messages] == [
        ("a", "b", "hello"),
        ("b", "a", "hi"),
        ("a", "a", "thinks"),
    ]


def test_a_sequence_is_drawn_at_the_pages_width_its_texts_broken_to_fit() -> None:
    long = "a message much longer than the gap between two neighbouring columns " * 2
    svg = sequence_svg(f"participants: a=Alice | b | c\na -> b: {long}\nc -> a: hi\nb -> b: n", "s")
    assert svg.startswith("<svg") and f'width="{sequence.WIDTH}"' in svg
    texts = re.findall(r'<text x="([\d.]+)"[^>]*font-size="(\d+)">([^<]*)</text>', svg)
    assert {size for _, size, _ in texts} == {str(sequence.FONT_PX)}
    # The long message is several lines, each within the gap between a and b.
    gap = (sequence.WIDTH - 8) / 3
    lines = [t for _, _, t in texts if t and t in long]
    assert len(lines) > 2 and all(len(t) * sequence.CHAR_PX < gap for t in lines), lines
    # Arrows go from the sender to the receiver (c, on the right, answers a).
    arrows = re.findall(r'<line x1="([\d.]+)" y1="[\d.]+" x2="([\d.]+)"[^>]*marker-end', svg)
    assert [float(x1) < float(x2) for x1, x2 in arrows] == [True, False]
    assert 'id="s-arrow"' in svg and "url(#s-arrow)" in svg  # ids of its own
    assert svg.count('fill="#fffbe6"') == 1  # b's note to itself


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


def test_the_measured_peer_is_drawn_beside_us_with_its_settings_and_published_peers_marked() -> (
    None
):
    measured = plots.results("peers-measured")
    peer = next(r for r in measured["runs"] if r["side"] != "ours")
    drawn = plots.draw("peers-measured")
    assert plots.MEASURED + peer["setting"] in drawn.svg
    assert f"{peer['figures']['one_at_a_time_p50_ms']:g}" in drawn.svg
    assert measured["commit"] in drawn.caption and "--disable-claim-events" in drawn.caption
    assert peer["label"] in measured["ratios"] and "Ratios (ours / peer" in drawn.caption
    published = plots.draw("bind-latency").svg
    assert plots.PUBLISHED + plots.results("peers")["claim_latency"][0]["label"] in published
