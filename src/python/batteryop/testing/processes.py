"""How the harnesses start a Python module of ours as its own process.

`sys.executable -m <module>` with this process's `sys.path` as PYTHONPATH: the child imports
exactly the code the parent runs, from a source tree, a Pants test sandbox or a pex alike.
"""

from __future__ import annotations

import os
import sys


def module_command(module: str) -> tuple[list[str], dict[str, str]]:
    """The argv prefix and environment that run `python -m module` with our sys.path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return [sys.executable, "-m", module], env
