from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bench import memory

STATS = textwrap.dedent("""\
    # arenas allocated total           =                  120
    # arenas reclaimed                 =                    7
    # arenas highwater mark            =                  113
    # arenas allocated current         =                  113
    113 arenas * 1048576 bytes/arena   =          118,489,088

    # bytes in allocated blocks        =          104,857,600
    # bytes in available blocks        =            5,242,880
    """)


def test_the_allocator_statistics_are_read_in_mb() -> None:
    assert memory.parse_mallocstats(STATS) == {
        "arenas": 113,
        "arenas_mb": 113.0,
        "used_mb": 100.0,
        "free_blocks_mb": 5.0,
    }


def test_statistics_without_a_figure_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="bytes in available blocks"):
        memory.parse_mallocstats(STATS.replace("available", "spare"))


def test_composition_of_this_process_adds_up() -> None:
    held = [bytearray(64) for _ in range(200_000)]  # ~20 MB of small objects, in pymalloc
    figures = memory.composition()
    assert figures["pymalloc"]["used_mb"] >= 15
    assert figures["pymalloc"]["arenas_mb"] >= figures["pymalloc"]["used_mb"]
    assert figures["rss_mb"] >= figures["pymalloc"]["used_mb"]
    assert figures["malloc"]["in_use_mb"] > 0
    assert 0 < figures["rss_mb_after_malloc_trim"] <= figures["rss_mb"] + 1
    assert len(held) == 200_000


def test_a_probed_process_reports_on_sigusr1_and_names_what_grew(tmp_path: Path) -> None:
    # The probe's signal handler and report, in a child that stands in for the operator:
    # it grows a list between two reports.
    report_path = tmp_path / "memory.jsonl"
    child = textwrap.dedent("""\
        import os, signal, sys, time, tracemalloc
        from bench import memory
        tracemalloc.start()
        signal.signal(signal.SIGUSR1, memory._on_signal)
        print("ready", flush=True)
        sys.stdin.readline()
        grown = [bytearray(100) for _ in range(100_000)]
        print("grown", flush=True)
        sys.stdin.readline()
        """)
    env = {**os.environ, memory.REPORT_ENV: str(report_path)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        first = memory.report(proc.pid, report_path, timeout=30)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "grown\n"
        second = memory.report(proc.pid, report_path, timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert "grew_most" not in first  # the first report is the baseline
    assert second["traced_mb"] - first["traced_mb"] >= 10
    top = second["grew_most"][0]
    assert "<string>" in top["line"] and top["kb"] >= 10_000 and top["n"] >= 100_000
