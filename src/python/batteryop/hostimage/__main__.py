"""`python3 -m batteryop.hostimage host-env|kubelet-env ...`: the Host Image's boot steps.

Exits 0 on success; on bad input exits 1 with one line on stderr naming the cause (the calling
script turns it into the unit's not-ready file). Warnings (a skipped key) go to stderr too.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from batteryop import hostconf
from batteryop.hostimage import host_env, kubelet_env


def _host_env(args: argparse.Namespace) -> int:
    try:
        skipped = host_env.write_host_env(args.conf, args.out)
    except hostconf.HostConfError as err:
        print(f"host configuration invalid: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"host configuration unreadable: {err}", file=sys.stderr)
        return 1
    for key in skipped:
        print(f"warning: host.conf: {key}: not a key of host.conf, skipped", file=sys.stderr)
    return 0


def _kubelet_env(args: argparse.Namespace) -> int:
    try:
        host = host_env.read_env(args.host_env.read_text())
        versions = host_env.read_env(args.versions.read_text())
        status = args.bootc_status.read_text() if args.bootc_status else ""
        capacity = kubelet_env.Capacity(
            cpus=args.cpus or os.cpu_count() or 1,
            memory_mb=kubelet_env.memory_mb(args.meminfo.read_text()),
        )
        text = kubelet_env.render(host, versions, status, capacity)
    except (OSError, KeyError, ValueError) as err:
        print(f"kubelet configuration failed: {err!r}", file=sys.stderr)
        return 1
    host_env.write_atomically(args.out, text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m batteryop.hostimage")
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("host-env", help="check host.conf and write host.env")
    env.add_argument("--conf", type=Path, required=True)
    env.add_argument("--out", type=Path, required=True)
    env.set_defaults(run=_host_env)
    kub = sub.add_parser("kubelet-env", help="write the kubelet's labels and reserve")
    kub.add_argument("--host-env", type=Path, required=True)
    kub.add_argument("--versions", type=Path, required=True)
    kub.add_argument("--bootc-status", type=Path, help="bootc status --format=json output")
    kub.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    kub.add_argument("--cpus", type=int, help="logical CPUs (default: this machine's)")
    kub.add_argument("--out", type=Path, required=True)
    kub.set_defaults(run=_kubelet_env)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
