"""The local stack: the README's main job.

Starts the real control plane (etcd + kube-apiserver, built once from the
pinned Go module), writes an admin kubeconfig to `.devstack/kubeconfig`
(ignored by git), prints how to reach it with kubectl, and runs until
interrupted. Later issues extend it with the operator, battery, the fake
flintlockd Hosts and a demo claim.

    ./pants run src/python/batteryop/testing:devstack            # until Ctrl-C
    ./pants run src/python/batteryop/testing:devstack -- --once  # start, check, stop
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path

from batteryop.testing.controlplane import ControlPlane, ControlPlaneBuildError, ControlPlaneError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".devstack"),
        help="where the kubeconfig is written (default: .devstack)",
    )
    parser.add_argument(
        "--once", action="store_true", help="start, run one kubectl command, stop (a smoke test)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    try:
        cp = ControlPlane.start()
    except (ControlPlaneBuildError, ControlPlaneError) as e:
        print(f"devstack: {e}", file=sys.stderr)
        return 1
    with cp:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        kubeconfig = cp.write_kubeconfig(args.state_dir.resolve() / "kubeconfig")
        print(f"control plane ready at {cp.url} in {cp.started_in:.2f}s")
        print("reach it with kubectl:")
        print(f"  export KUBECONFIG={kubeconfig}")
        print("  kubectl get namespaces")
        sys.stdout.flush()
        check = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "namespaces"],
            capture_output=True,
            text=True,
        )
        print(check.stdout or check.stderr, end="")
        if args.once:
            return check.returncode
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        print("running; Ctrl-C stops it and removes everything it made")
        stop.wait()
        kubeconfig.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
