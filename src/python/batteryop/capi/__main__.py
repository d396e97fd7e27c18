"""`python -m batteryop.capi SETTINGS.yaml [--templates DIR]`: render one Host pool.

Prints the pool's objects as a YAML stream for `kubectl apply -f -` against the management
cluster. A setting that breaks a rule ends the run with one line naming it, and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from batteryop.capi.render import TemplateError, Templates, find_root, load_settings, render
from batteryop.capi.settings import SettingsError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batteryop.capi", description="Render a Host pool for Cluster API."
    )
    parser.add_argument("settings", type=Path, help="the pool's host-pool.yaml")
    parser.add_argument("--templates", type=Path, help="the src/capi folder (found by default)")
    args = parser.parse_args(argv)
    try:
        templates = Templates.load(args.templates or find_root())
        objects = render(load_settings(args.settings, templates), templates)
    except (SettingsError, TemplateError, OSError, yaml.YAMLError) as err:
        print(f"{parser.prog}: {err}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader stopped early (`| head`): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
