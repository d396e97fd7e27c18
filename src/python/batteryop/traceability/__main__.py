"""`python -m batteryop.traceability [--root DIR] [--summary] [--markdown FILE]`, and
`python -m batteryop.traceability sample N [--seed S] [--root DIR]`.

Checks the requirement citations under the root (default: the working directory), prints
each problem as `path:line: what`, then the one-line summary; exits 1 when there is a problem.
`sample` prints N active requirements drawn at random with what the report counts for each
(`audit`), for a person to check by hand; without `--seed` it picks one and prints it.
Standard library only, so CI can run it with any Python 3.11 (`PYTHONPATH=src/python`).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from batteryop.traceability.audit import sample
from batteryop.traceability.check import check_tree
from batteryop.traceability.report import render

PROG = "python -m batteryop.traceability"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sample"]:
        return _sample(argv[1:])
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
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


def _sample(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} sample", description="Draw requirements at random for a hand audit."
    )
    parser.add_argument("count", type=int, help="how many active requirements to draw")
    parser.add_argument("--seed", type=int, help="the random seed (default: a new one, printed)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error("count: must be at least 1")
    seed = random.SystemRandom().randrange(2**32) if args.seed is None else args.seed
    print(sample(check_tree(args.root), args.count, seed), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
