"""The local stack: the README's main job.

Starts the real control plane (etcd + kube-apiserver, built once from the pinned Go module)
and the local stack around the operator (`batteryop.testing.localstack`): two simulated
Hosts (fake flintlockd processes with their Nodes), the fake battery, and the operator as a
process with its own ServiceAccount and RBAC. It then applies the demo Pool, waits until it
is Ready, claims a MicroVM from it with a demo MicroVMClaim and waits until it is Bound, writes an admin kubeconfig to `.devstack/kubeconfig` (ignored by git), prints how
to reach everything with kubectl, and runs until interrupted.

    ./pants run src/python/batteryop/testing:devstack            # until Ctrl-C
    ./pants run src/python/batteryop/testing:devstack -- --once  # start, demo, stop
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from batteryop.api import names, samples
from batteryop.testing.controlplane import (
    ControlPlane,
    ControlPlaneBuildError,
    ControlPlaneError,
    admin_client,
)
from batteryop.testing.localstack import LocalStack

DEMO_NAMESPACE = "demo"


def kubectl(kubeconfig: Path, *args: str) -> str:
    out = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True
    )
    return out.stdout if out.returncode == 0 else out.stderr


def apply_demo(cp: ControlPlane) -> None:
    api = admin_client(cp)
    try:
        core = k8s.CoreV1Api(api)
        try:
            core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=DEMO_NAMESPACE)))
        except k8s.ApiException as e:
            if e.status != 409:
                raise
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            DEMO_NAMESPACE,
            names.POOL_PLURAL,
            samples.demo_pool(namespace=DEMO_NAMESPACE),
        )
    finally:
        api.close()


def wait_until(
    cp: ControlPlane, plural: str, name: str, done: Any, what: str, timeout: float = 120
) -> dict[str, Any]:
    """Read the object every 0.2 s until done(body) (a person's demo, not a test)."""
    api = admin_client(cp)
    custom = k8s.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    try:
        while time.monotonic() < deadline:
            body = custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, DEMO_NAMESPACE, plural, name
            )
            if done(body):
                return body
            time.sleep(0.2)
    finally:
        api.close()
    raise TimeoutError(f"{plural}/{name} not {what} in {timeout}s: {json.dumps(body)[:2000]}")


def pool_ready(body: dict[str, Any]) -> bool:
    conds = (body.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def claim_bound(body: dict[str, Any]) -> bool:
    return bool((body.get("status") or {}).get("phase") == "Bound")


def expiry_known(body: dict[str, Any]) -> bool:
    return bool((body.get("status") or {}).get("leaseExpiresAt"))


def apply_demo_claim(cp: ControlPlane) -> None:
    api = admin_client(cp)
    try:
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            names.GROUP,
            names.VERSION,
            DEMO_NAMESPACE,
            names.CLAIM_PLURAL,
            samples.sample_claim(name="demo-claim", pool="demo", namespace=DEMO_NAMESPACE),
        )
    finally:
        api.close()


async def run(args: argparse.Namespace) -> int:
    try:
        cp = ControlPlane.start()
    except (ControlPlaneBuildError, ControlPlaneError) as e:
        print(f"devstack: {e}", file=sys.stderr)
        return 1
    with cp, tempfile.TemporaryDirectory(prefix="devstack-") as tmp:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        kubeconfig = cp.write_kubeconfig(args.state_dir.resolve() / "kubeconfig")
        print(f"control plane ready at {cp.url} in {cp.started_in:.2f}s", flush=True)
        async with LocalStack.start(cp, Path(tmp)) as stack:
            print(
                f"battery (fake, poolmgrd v0.4.0 semantics) at {stack.battery.target}; Hosts: "
                + ", ".join(f"{n}={h.target}" for n, h in stack.hosts.items()),
                flush=True,
            )
            print(f"operator running (pid {stack.operator.popen.pid})", flush=True)
            apply_demo(cp)
            started = time.monotonic()
            await asyncio.to_thread(wait_until, cp, names.POOL_PLURAL, "demo", pool_ready, "Ready")
            print(f"demo Pool Ready in {time.monotonic() - started:.1f}s", flush=True)
            apply_demo_claim(cp)
            started = time.monotonic()
            claim = await asyncio.to_thread(
                wait_until, cp, names.CLAIM_PLURAL, "demo-claim", claim_bound, "Bound"
            )
            status = claim["status"]
            print(
                f"demo claim Bound in {(time.monotonic() - started) * 1000:.0f} ms: MicroVM "
                f"{status['microVM']['uid']} on {status['host']['nodeName']}, "
                f"lease {status['leaseID']}",
                flush=True,
            )
            # battery's expiry is read back a moment after the bind (CL-016): show it too.
            await asyncio.to_thread(
                wait_until, cp, names.CLAIM_PLURAL, "demo-claim", expiry_known, "an expiry"
            )
            print(kubectl(kubeconfig, "get", "pools,microvmclaims", "-A"), end="")
            print("reach it with kubectl:")
            print(f"  export KUBECONFIG={kubeconfig}")
            print("  kubectl get pools,microvmclaims -A")
            sys.stdout.flush()
            if args.once:
                return 0
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            print("running; Ctrl-C stops it and removes everything it made", flush=True)
            await stop.wait()
        kubeconfig.unlink(missing_ok=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="devstack", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(".devstack"),
        help="where the kubeconfig is written (default: .devstack)",
    )
    parser.add_argument(
        "--once", action="store_true", help="start, apply the demo, check it, stop (a smoke test)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
