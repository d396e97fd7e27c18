"""py-spy profiles of a benchmark's processes, when asked for.

`BATTERYOP_BENCH_PYSPY` names a py-spy binary (PyPI's `py-spy`, installed apart: it is not a
project requirement). When it is set, `recording({"operator": pid, ...}, label)` samples each
process while its block runs (`py-spy record --nonblocking --format raw --function`, 100
samples a second, idle threads not sampled) and then prints, per process, the frames that
used the most samples: where the time went in that phase. Without it the block runs
unprofiled and nothing is printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

PY_SPY = os.environ.get("BATTERYOP_BENCH_PYSPY", "")
TOP = 12


def top_frames(folded: str, top: int = TOP) -> dict[str, object]:
    """From py-spy's raw (folded) output: the samples, and the frames most often on top of
    the stack (self) and anywhere in it (inclusive), each as a share of the samples."""
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    total = 0
    for line in folded.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count

    def shares(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(frame, round(100 * n / total, 1)) for frame, n in counter.most_common(top)]

    if total == 0:
        return {"samples": 0}
    return {"samples": total, "self_pct": shares(own), "inclusive_pct": shares(anywhere)}


@contextlib.contextmanager
def recording(pids: Mapping[str, int], label: str) -> Iterator[None]:
    """Profile `pids` (name to pid) while the block runs, if py-spy was named."""
    if not PY_SPY:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="bench-pyspy-") as tmp:
        outputs = {name: Path(tmp) / f"{name}.txt" for name in pids}
        recorders = {
            name: subprocess.Popen(
                [
                    PY_SPY,
                    "record",
                    "--nonblocking",
                    "--rate",
                    "100",
                    "--format",
                    "raw",
                    "--function",  # frames by function, not by line
                    "--output",
                    str(outputs[name]),
                    "--pid",
                    str(pid),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name, pid in pids.items()
        }
        try:
            yield
        finally:
            for name, recorder in recorders.items():
                recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                _, err = recorder.communicate(timeout=60)
                path = outputs[name]
                figures = top_frames(path.read_text()) if path.exists() else {"error": err[-500:]}
                print(f"\nprofile {json.dumps({'phase': label, 'process': name, **figures})}")
