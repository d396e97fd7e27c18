"""The local stack on a real node: `./pants run src/python/batteryop/devstack:up-kubelet`.

The default stack (`main`) runs every component as a process and starts in seconds. This one
installs the release itself, as a platform team does, on the real one-node cluster the
cluster tests use (`batteryop.testing.kubenode`, see docs/dev/real-node.md): the release's
images mirrored into the node's registry, `install.yaml` applied with `kubectl apply -k`, the
Node made a Host by the Host Image's boot steps. Then the demo Pool, and the demo through the
`battery` command of a venv holding the released wheel. It needs root (namespaces, cgroups,
nftables) and takes a few minutes (the host registry's settle time and restart window are
install.yaml's: 30 s and 60 s). Ctrl-C stops the node and puts the machine back; a run that
was killed is cleaned up by the next start.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from batteryop.api import names, samples
from batteryop.devstack import demo
from batteryop.devstack.artifacts import Artifacts
from batteryop.devstack.cluster import DEMO_HOLDER, DEMO_NAMESPACE
from batteryop.devstack.stack import KUBECTL_DIR, clean_env, make_client_venv
from batteryop.testing.kubenode import install
from batteryop.testing.kubenode.node import KubeNode, NodeError
from batteryop.testing.progress import Heartbeat

IMAGES = ("battery-operator", "exec-agent", "csr-approver", "host-registry", install.FAKE_BATTERY)


def say(text: str) -> None:
    print(text, flush=True)


async def run_demo(node: KubeNode, artifacts: Artifacts, work: Path) -> None:
    node.kubectl(["create", "namespace", DEMO_NAMESPACE])
    node.kubectl(["create", "serviceaccount", DEMO_HOLDER, "-n", DEMO_NAMESPACE])
    pool = samples.demo_pool(demo.POOL, namespace=DEMO_NAMESPACE)
    node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump(pool))
    started = time.monotonic()
    wait = ["wait", "-n", DEMO_NAMESPACE, f"pool/{demo.POOL}", "--for=condition=Ready",
            "--timeout=300s"]  # fmt: skip
    heartbeat = Heartbeat(
        f"Waiting for Pool {DEMO_NAMESPACE}/{demo.POOL} Ready", left="the demo", say=say
    )
    await heartbeat.watch(asyncio.to_thread(node.kubectl, wait))
    say(f"Pool {DEMO_NAMESPACE}/{demo.POOL} Ready in {time.monotonic() - started:.1f} s")
    battery = await make_client_venv(work / "venv", artifacts.wheel, work)
    env = clean_env(os.environ)
    env.update(
        KUBECONFIG=str(node.cp.admin_kubeconfig),
        PATH=os.pathsep.join([str(battery.parent), str(KUBECTL_DIR), env.get("PATH", "")]),
        BATTERY_NAMESPACE=DEMO_NAMESPACE,
        BATTERY_HOLDER=DEMO_HOLDER,
        BATTERY_CA=str(work / names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY),
    )
    for step in await demo.run(env):
        say(f"$ {step.command}   ({step.seconds:.2f} s)\n{step.stdout.rstrip()}")
    say("\nTo use it from another terminal:")
    for key in ("KUBECONFIG", "BATTERY_NAMESPACE", "BATTERY_HOLDER", "BATTERY_CA"):
        say(f"  export {key}={env[key]}")
    say(f'  export PATH={battery.parent}:{KUBECTL_DIR}:"$PATH"')


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="up-kubelet", description=__doc__.split("\n")[0])
    parser.add_argument("--artifacts", type=Path, required=True, help="where Pants built them")
    parser.add_argument("--once", action="store_true", help="stop after the demo")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    if os.geteuid() != 0:
        print("up-kubelet: the real node needs root (namespaces, cgroups, nftables)",
              file=sys.stderr)  # fmt: skip
        return 1
    artifacts = Artifacts.find(args.artifacts)
    layouts = {name: args.artifacts / "images" / name for name in IMAGES}
    flintlockd = [sys.executable, str(artifacts.pexes["flintlockd"])]
    stop = asyncio.Event()
    say("Starting the real node (binaries built once per pin, minutes cold)...")
    node = KubeNode.start()
    try:
        say(f"Node Ready in {node.timings['start']:.1f} s; installing the release...")
        done = install.install(node, args.artifacts / "release" / "install.yaml", layouts,
                               flintlockd=flintlockd)  # fmt: skip
        say(done.applied.rstrip())
        say(f"\nEvery workload Ready {done.times['apply_to_ready']:.1f} s after kubectl apply:")
        say(node.kubectl(["get", "pods", "-A", "-o", "wide"]).rstrip())
        work = Path(tempfile.mkdtemp(prefix="up-kubelet-", dir=node.state))
        # CT-101: the client trusts the Exec Agents' serving CA, and only it.
        (work / names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY).write_bytes(done.pki.exec_serving_ca)

        async def session() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await run_demo(node, artifacts, work)
            if not args.once:
                say("\nRunning; Ctrl-C stops the node and puts the machine back.")
                await stop.wait()

        asyncio.run(session())
    except (NodeError, demo.DemoError) as err:
        print(f"up-kubelet: {err}", file=sys.stderr)
        return 1
    finally:
        say("Stopping the node...")
        problems = node.stop()
        for problem in problems:
            print(f"up-kubelet: not restored: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
