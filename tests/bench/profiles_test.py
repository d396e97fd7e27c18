"""The py-spy summary the benchmarks print: shares of samples by frame."""

from __future__ import annotations

import pytest
from bench import profiles
from bench.profiles import recording, top_frames


def test_self_counts_the_top_frame_and_inclusive_every_frame_once_per_stack() -> None:
    folded = "\n".join(
        [
            "main (m.py:1);loop (l.py:2);parse (p.py:3) 6",
            "main (m.py:1);loop (l.py:2) 3",
            # A recursive frame counts once per stack in the inclusive share.
            "main (m.py:1);walk (w.py:4);walk (w.py:4) 1",
            "",
            "not a sample line",
        ]
    )
    figures = top_frames(folded)
    assert figures["samples"] == 10
    assert figures["self_pct"] == [
        ("parse (p.py:3)", 60.0),
        ("loop (l.py:2)", 30.0),
        ("walk (w.py:4)", 10.0),
    ]
    inclusive = dict(figures["inclusive_pct"])  # type: ignore[call-overload]
    assert inclusive["main (m.py:1)"] == 100.0
    assert inclusive["loop (l.py:2)"] == 90.0
    assert inclusive["walk (w.py:4)"] == 10.0


def test_no_samples_says_so() -> None:
    assert top_frames("") == {"samples": 0}


def test_without_py_spy_the_block_runs_and_nothing_is_recorded(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(profiles, "PY_SPY", "")
    ran = []
    with recording({"self": 1}, "phase"):
        ran.append(True)
    assert ran == [True]
    assert "profile" not in capsys.readouterr().out
