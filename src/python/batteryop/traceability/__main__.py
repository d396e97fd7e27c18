"""`python -m batteryop.traceability [--root DIR] [--summary] [--markdown FILE]`.

Checks the requirement citations under the root (default: the working directory), prints
each problem as `path:line: what`, then the one-line summary; exits 1 when there is a problem.
Standard library only, so CI can run it with any Python 3.11 (`PYTHONPATH=src/python`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from batteryop.traceability.check import check_tree
from batteryop.traceability.report import render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batteryop.traceability", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root")
    parser.add_argument("--summary", action="store_true", help="print only the summary line")
    parser.add_argument("--markdown", type=Path, help="also write the coverage report here")
    args = parser.parse_args(argv)
    result = check_tree(args.root)
    if not args.summary:
        for problem in result.problems:
            print(problem, file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(render(result))
    print(result.summary())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
