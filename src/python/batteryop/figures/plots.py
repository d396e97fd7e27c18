"""The benchmark plots, drawn with matplotlib from the figures recorded in `docs/dev/results/`.

Each JSON file there holds one benchmark's runs as its pages record them (when, the commit, the
machine's load, the figures), with the benchmark's file, command and what it measures;
`peers.json` holds the peers' published figures with their sources, and `peers-measured.json`
what `tests/bench/peers` measured of agent-sandbox and us in turn (the file that benchmark
writes, with its settings and ratios). No number is made here:
every bar and point is a figure of those files. Each plot carries its provenance as a caption
(when, where, how), built from the same files.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("svg")

import matplotlib.pyplot as plt  # (after the backend is chosen)
from matplotlib.axes import Axes
from matplotlib.figure import Figure

RESULTS = Path(__file__).resolve().parents[4] / "docs" / "dev" / "results"
"""docs/dev/results, from src/python/batteryop/figures."""

OURS, PEER, TARGET = "#3f51b5", "#9e9e9e", "#c62828"
TEXT_PT, TITLE_PT = 9, 10
"""Every plot's text and titles, in points. A plot is 8 in (576 pt) wide and scaled to the
page's text width (about 690 px, 1.2 px a point), so its smallest text is drawn about 11 px
high (`tests/docs/site_browser_test.py` fails under 10 px)."""


class PlotError(RuntimeError):
    """A plot that is not known, or whose figures cannot be read."""


@dataclass(frozen=True)
class Drawn:
    svg: str
    caption: str


def results(name: str) -> Mapping[str, Any]:
    """`docs/dev/results/<name>.json`."""
    path = RESULTS / f"{name}.json"
    try:
        data: Mapping[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise PlotError(f"cannot read {path}: {e}") from e
    return data


def caption(data: Mapping[str, Any]) -> str:
    """When, where and how a benchmark's runs were measured."""
    runs = "; ".join(
        f"{r['label']}: {r['when']}, at {r['commit']}, load {r['load']}" for r in data["runs"]
    )
    return (
        f"Measured by {data['benchmark']} ({data['command']}) on {data['machine']}: "
        f"{data['how']}. Runs: {runs}. Figures from {data['source']}."
    )


PUBLISHED, MEASURED = "peer, published: ", "peer, measured: "
"""How a peer's bar is labelled: a figure it published, or one `tests/bench/peers` measured."""


def _peer_caption(peers: Mapping[str, Any], key: str) -> str:
    cited = "; ".join(f"{p['label']}: {p['source']}" for p in peers[key])
    return f" Peers (published, not measured here; {peers['note']}): {cited}."


def _measured_caption(data: Mapping[str, Any]) -> str:
    """The measured peer's settings and the ratios of its results file."""
    settings = data["settings"]
    flags = "; ".join(f"{s}: {' '.join(f)}" for s, f in settings["peer_flags"].items())
    ratios = "; ".join(
        f"{label}: " + ", ".join(f"{name} {value:g}" for name, value in figures.items())
        for label, figures in data["ratios"].items()
    )
    return (
        f" The peer: {settings['peer']}, flags {flags}; its Nodes: {settings['kwok']}."
        f" Ratios ({data['ratios_are']}): {ratios}."
    )


def _bars(ax: Axes, labels: list[str], series: list[tuple[str, list[float | None]]]) -> None:
    """Horizontal grouped bars, one group per label, each series a shade; None leaves a gap."""
    height = 0.8 / len(series)
    for n, (name, values) in enumerate(series):
        ys = [i + n * height for i in range(len(labels))]
        xs = [v if v is not None else 0.0 for v in values]
        bars = ax.barh(ys, xs, height=height, label=name, alpha=1.0 - 0.45 * n)
        for bar, value, label in zip(bars, values, labels, strict=False):
            bar.set_color(PEER if label.startswith("peer") else OURS)
            if value is not None:
                ax.annotate(
                    f"{value:g}",
                    (bar.get_width(), bar.get_y() + bar.get_height() / 2),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=TEXT_PT,
                )
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(labels))], labels, fontsize=TEXT_PT)
    ax.invert_yaxis()
    ax.margins(x=0.08)  # room for the longest bar's figure
    ax.legend(fontsize=TEXT_PT, loc="lower right")


def _run_label(run: Mapping[str, Any]) -> str:
    return f"{run['label']} ({run['when'].split(' ')[0]}, load {run['load'].split(' (')[0]})"


def bind_latency(fig: Figure) -> str:
    data, peers = results("claim-bind"), results("peers")
    ax = fig.subplots()
    labels = [_run_label(r) for r in data["runs"]] + [
        PUBLISHED + p["label"] for p in peers["claim_latency"]
    ]
    p50 = [r["sequential"]["p50_ms"] for r in data["runs"]] + [
        p.get("p50_ms") for p in peers["claim_latency"]
    ]
    p99 = [r["sequential"]["p99_ms"] for r in data["runs"]] + [
        p.get("p99_ms") for p in peers["claim_latency"]
    ]
    _bars(ax, labels, [("p50", p50), ("p99", p99)])
    ax.set_xscale("log")
    ax.set_xlabel("one claim at a time, created to Bound (ms, log scale)")
    ax.axvline(data["targets"]["sequential_p50_ms"], color=TARGET, ls=":", lw=1)
    ax.set_title("A warm claim, one at a time: ours (blue), peers (grey)", fontsize=TITLE_PT)
    return caption(data) + _peer_caption(peers, "claim_latency") + " Dotted: the p50 target."


def burst(fig: Figure) -> str:
    data, peers = results("claim-bind"), results("peers")
    ax = fig.subplots()
    labels = [_run_label(r) for r in data["runs"]] + [
        PUBLISHED + p["label"] for p in peers["burst"]
    ]
    rates = [r["burst"]["claims_per_s"] for r in data["runs"]] + [
        p["claims_per_s"] for p in peers["burst"]
    ]
    _bars(ax, labels, [("claims per second", rates)])
    ax.set_xscale("log")
    ax.set_xlabel("claims Bound per second, bursts of 100 (median, log scale)")
    ax.axvline(data["targets"]["burst_claims_per_s"], color=TARGET, ls=":", lw=1)
    loaded = [r for r in data["runs"] if "p50_ms" in r["burst"]]
    spread = "; ".join(
        f"{r['label']}: p50 {r['burst']['p50_ms'] / 1000:g} s, p99 {r['burst']['p99_ms'] / 1000:g} s"
        for r in loaded
    )
    ax.set_title("Bursts: ours (blue), peers (grey)", fontsize=TITLE_PT)
    return (
        caption(data)
        + _peer_caption(peers, "burst")
        + f" Dotted: the target. Each claim's latency within a burst, where recorded: {spread}."
    )


def requests_per_claim(fig: Figure) -> str:
    data = results("claim-bind")
    ax = fig.subplots()
    labels = [_run_label(r) for r in data["runs"]]
    _bars(
        ax,
        labels,
        [("API requests per claim", [r["requests_per_claim_until_bound"] for r in data["runs"]])],
    )
    ax.axvline(data["targets"]["requests_per_claim"], color=TARGET, ls=":", lw=1)
    ax.set_xlabel("kube-apiserver requests per claim until Bound, the create included")
    ax.set_title("What one bind costs the API server", fontsize=TITLE_PT)
    return caption(data) + " Dotted: the target of 3.5."


def peers_measured(fig: Figure) -> str:
    data = results("peers-measured")
    runs = data["runs"]
    labels = [
        f"{r['label'] if r['side'] == 'ours' else MEASURED + r['setting']} (load {r['load']})"
        for r in runs
    ]
    f = [r["figures"] for r in runs]
    n = data["settings"]["n"]
    panels = [
        (
            "one at a time, to Bound / Ready (ms)",
            [("p50", "one_at_a_time_p50_ms"), ("p99", "one_at_a_time_p99_ms")],
        ),
        (
            f"claims per second, bursts of {n}",
            [
                ("bursts", "burst_claims_per_s"),
                ("API server floor", "api_server_floor_claims_per_s"),
            ],
        ),
        ("kube-apiserver requests per claim, bursts", [("requests", "requests_per_claim")]),
        (
            f"CPU seconds per burst of {n}",
            [("every process", "cpu_s_per_burst"), ("kube-apiserver", "cpu_s_per_burst_apiserver")],
        ),
    ]
    for n_ax, (ax, (xlabel, series)) in enumerate(
        zip(fig.subplots(2, 2).flat, panels, strict=True)
    ):
        _bars(ax, labels, [(name, [x[key] for x in f]) for name, key in series])
        ax.legend(fontsize=TEXT_PT, loc="lower left", bbox_to_anchor=(0, 1), ncol=2, frameon=False)
        ax.set_xlabel(xlabel)
        if n_ax % 2:
            ax.set_yticks(ax.get_yticks(), [])  # the same runs as on the left, in the same order
    fig.suptitle(
        f"Ours (blue) and agent-sandbox (grey) in turn on one API server, {data['when']}, "
        f"at {data['commit']}",
        fontsize=TITLE_PT,
    )
    return caption(data) + _measured_caption(data)


def scale(fig: Figure) -> str:
    data = results("operator-scale")
    memory, latency = fig.subplots(1, 2)
    for run in data["runs"]:
        xs = sorted(int(n) for n in run["rss_mb"])
        memory.plot(xs, [run["rss_mb"][str(n)] for n in xs], marker="o", label=_run_label(run))
        present = sorted(int(n) for n in run["sequential"])
        line = latency.plot(
            present, [run["sequential"][str(n)]["p50_ms"] for n in present], marker="o"
        )
        latency.plot(
            present,
            [run["sequential"][str(n)]["p99_ms"] for n in present],
            marker="x",
            ls="--",
            color=line[0].get_color(),
        )
    memory.axhline(data["targets"]["rss_mb_at_10000"], color=TARGET, ls=":", lw=1)
    for ax in (memory, latency):
        ax.set_xlim(-600, 11_000)  # the last tick's figure inside the plot
    memory.set_xlabel("claims Bound")
    memory.set_ylabel("operator RSS (MB)")
    memory.legend(fontsize=TEXT_PT)
    latency.set_xlabel("claims present")
    latency.set_ylabel("created to Bound (ms)")
    latency.set_title("one claim at a time: p50 solid, p99 dashed", fontsize=TEXT_PT)
    memory.set_title("memory", fontsize=TEXT_PT)
    fig.suptitle("The operator with up to 10,000 claims over 100 Hosts", fontsize=TITLE_PT)
    target = data["targets"]["rss_mb_at_10000"]
    return caption(data) + f" Dotted: the memory target of {target} MB (issue 50; 300 before)."


def exec_round_trip(fig: Figure) -> str:
    data = results("exec-agent")
    ax = fig.subplots()
    labels = [f"{path}, {_run_label(r)}" for r in data["runs"] for path in r["paths"]]
    figures = [f for r in data["runs"] for f in r["paths"].values()]
    _bars(
        ax,
        labels,
        [("p50", [f["p50_ms"] for f in figures]), ("p99", [f["p99_ms"] for f in figures])],
    )
    ax.axvline(data["targets"]["p50_ms"], color=TARGET, ls=":", lw=1)
    ax.axvline(data["targets"]["p99_ms"], color=TARGET, ls="--", lw=1)
    ax.set_xlabel("`true` run in the MicroVM, request to exit code (ms)")
    ax.set_title("An exec's round trip, every authorization check made", fontsize=TITLE_PT)
    return caption(data) + " Dotted and dashed: the p50 and p99 targets."


PLOTS: Mapping[str, tuple[Callable[[Figure], str], tuple[float, float]]] = {
    "bind-latency": (bind_latency, (8.0, 4.2)),
    "burst": (burst, (8.0, 3.6)),
    "requests-per-claim": (requests_per_claim, (8.0, 3.2)),
    "peers-measured": (peers_measured, (8.0, 6.0)),
    "scale": (scale, (8.0, 4.2)),
    "exec-round-trip": (exec_round_trip, (8.0, 4.2)),
}
"""Every plot by the name a page gives in `<!-- plot: NAME -->`, with its size in inches."""


def draw(name: str) -> Drawn:
    """The plot `name` as SVG (text kept as text, ids unique to the plot), and its caption."""
    if name not in PLOTS:
        raise PlotError(f"no plot named {name!r}; known: {', '.join(PLOTS)}")
    make, size = PLOTS[name]
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": name, "font.size": TEXT_PT}):
        fig = plt.figure(figsize=size, layout="constrained")
        try:
            text = make(fig)
            out = io.StringIO()
            fig.savefig(out, format="svg", metadata={"Date": None})
        finally:
            plt.close(fig)
    svg = out.getvalue()
    return Drawn(svg=svg[svg.index("<svg") :], caption=text)
