"""What a process's memory is made of, asked of the operator while a benchmark runs.

RSS alone cannot tell a leak from memory an allocator keeps after the objects in it were
freed. `composition()` splits it, from inside the process:

- `pymalloc`: CPython's own allocator for objects up to 512 bytes, in 1 MiB arenas taken from
  the OS; an arena goes back only when every block in it is free. `arenas_mb` is what the
  arenas hold, `used_mb` the blocks in use, the rest free blocks pinned by used neighbours
  (`sys._debugmallocstats`; not with tracemalloc on, which hides it).
- `malloc`: glibc's heap, where larger objects, dict tables, strings and the C libraries'
  buffers live: `in_use_mb` and `free_mb` (freed but kept by glibc), and `mmap_mb` (large
  blocks mapped one by one) (`mallinfo2`).
- `rss_mb` before and after `malloc_trim(0)`, which hands glibc's free memory back: what
  trimming wins is memory kept, not leaked. (With tracemalloc on, trimming was seen to raise
  RSS, as it walks the heap: read it from untraced runs.)
- With tracemalloc on (`BATTERYOP_BENCH_TRACEMALLOC=1`: slow, for small runs), the bytes
  Python's objects hold (`traced_mb`) and, against the first report, the source lines whose
  allocations grew most.

The operator reports it on SIGUSR1 when started through this module as its entry point
(`python -m bench.memory <operator flags>`, which then runs the operator's own `main`):
`report(pid, path)` sends the signal and returns the JSON line the process appended to
`path` (`REPORT_ENV`). Only benchmarks run the operator this way.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from batteryop.testing.processes import module_command

REPORT_ENV = "BATTERYOP_BENCH_MEMORY_REPORT"
"""Where the probed process appends one JSON line per report."""
TRACEMALLOC_ENV = "BATTERYOP_BENCH_TRACEMALLOC"
MB = 1024 * 1024
TOP_LINES = 15


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _libc() -> Any:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


def rss_mb(pid: int | str = "self") -> float:
    """VmRSS of a process, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise AssertionError(f"no VmRSS for {pid}")


def parse_mallocstats(text: str) -> dict[str, float]:
    """From `sys._debugmallocstats()`'s text: the arenas' size and the bytes in used and in
    free blocks, in MB."""

    def number(label: str) -> int:
        match = re.search(rf"^# {re.escape(label)}\s*=\s*([\d,]+)$", text, re.MULTILINE)
        if match is None:
            raise ValueError(f"no {label!r} in the allocator's statistics")
        return int(match.group(1).replace(",", ""))

    arenas = re.search(r"^(\d+) arenas \* (\d+) bytes/arena", text, re.MULTILINE)
    if arenas is None:
        raise ValueError("no arena count in the allocator's statistics")
    return {
        "arenas": int(arenas.group(1)),
        "arenas_mb": round(int(arenas.group(1)) * int(arenas.group(2)) / MB, 1),
        "used_mb": round(number("bytes in allocated blocks") / MB, 1),
        "free_blocks_mb": round(number("bytes in available blocks") / MB, 1),
    }


def pymalloc_stats() -> dict[str, float] | None:
    """`sys._debugmallocstats()` writes to the C stderr: caught there, and parsed. None while
    tracemalloc traces (it wraps pymalloc, which then prints no statistics)."""
    if tracemalloc.is_tracing():
        return None
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        return parse_mallocstats(out.read().decode(errors="replace"))


_first_snapshot: tracemalloc.Snapshot | None = None


def composition() -> dict[str, Any]:
    """This process's memory, split as the module docstring says (a full GC first)."""
    global _first_snapshot
    gc.collect()
    libc = _libc()
    info = libc.mallinfo2()
    out: dict[str, Any] = {
        "rss_mb": rss_mb(),
        "gc_objects": len(gc.get_objects()),
        "pymalloc": pymalloc_stats(),
        "malloc": {
            "in_use_mb": round(info.uordblks / MB, 1),
            "free_mb": round(info.fordblks / MB, 1),
            "mmap_mb": round(info.hblkhd / MB, 1),
        },
    }
    if tracemalloc.is_tracing():
        out["traced_mb"] = round(tracemalloc.get_traced_memory()[0] / MB, 1)
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__)]
        )
        if _first_snapshot is None:
            _first_snapshot = snapshot
        else:
            out["grew_most"] = [
                {
                    "line": str(stat.traceback),
                    "kb": round(stat.size_diff / 1024),
                    "n": stat.count_diff,
                }
                for stat in snapshot.compare_to(_first_snapshot, "lineno")[:TOP_LINES]
            ]
    libc.malloc_trim(0)
    out["rss_mb_after_malloc_trim"] = rss_mb()
    return out


def _on_signal(signum: int, frame: object) -> None:
    line = json.dumps(composition())
    with open(os.environ[REPORT_ENV], "a") as report_file:
        report_file.write(line + "\n")


def probe_command(report_path: Path) -> tuple[list[str], dict[str, str]]:
    """The argv prefix and environment that run the operator through this module."""
    argv, env = module_command("bench.memory")
    env[REPORT_ENV] = str(report_path)
    return argv, env


def report(pid: int, path: Path, timeout: float = 120.0) -> dict[str, Any]:
    """Ask the probed process `pid` for a report and return it (the line it appends)."""
    before = len(path.read_text().splitlines()) if path.exists() else 0
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # a file has no event to wait on
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) > before:
            return dict(json.loads(lines[before]))
        time.sleep(0.1)
    raise AssertionError(f"process {pid} wrote no memory report in {timeout} s")


def main() -> None:
    if os.environ.get(TRACEMALLOC_ENV) == "1":
        tracemalloc.start()
    signal.signal(signal.SIGUSR1, _on_signal)
    from batteryop.operator.main import main as operator_main

    sys.exit(operator_main())


if __name__ == "__main__":
    main()
