"""The demo on a running stack: the demo Pool, then a claim's life through the `battery` CLI.

`apply_pool` creates `samples.demo_pool` in the demo namespace and waits until it is Ready.
`run` then calls the `battery` command of the client venv as a user would after sourcing the
stack's `env` file: `claim demo`, `exec <claim> -- uname -a`, `renew <claim>`, `release <claim>`,
timing each step. A step that fails stops the demo with the command's own error line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batteryop.api import samples
from batteryop.api._compat import within
from batteryop.devstack.cluster import DEMO_NAMESPACE, apply
from batteryop.kube.client import KubeClient
from batteryop.kube.resources import POOLS, name_selector

POOL = "demo"
STEP_TIMEOUT_SECONDS = 120.0
QEMU_POOL_TIMEOUT_SECONDS = 900.0
"""The wait for the Pool's first MicroVM when each is a QEMU guest booting under TCG."""


class DemoError(RuntimeError):
    """A demo step failed."""


@dataclass(frozen=True)
class Step:
    argv: tuple[str, ...]
    seconds: float
    stdout: str
    stderr: str

    @property
    def command(self) -> str:
        return " ".join(self.argv)


def pool_ready(body: Mapping[str, Any], *, available: bool = False) -> bool:
    """Ready, and with `available` also holding an available MicroVM (RS-013's count)."""
    status = body.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and (not available or int(status.get("available") or 0) > 0)


async def apply_pool(
    kube: KubeClient,
    *,
    available: bool = False,
    timeout: float | None = None,
    images: samples.GuestImages | None = None,
) -> float:
    """Apply the demo Pool and wait (watching it) until it is Ready, and with `available`
    until one of its MicroVMs is available too; the seconds it took. With `images` (the
    stack's `--guests qemu` registry), the Pool's MicroVMs boot those guest images."""
    timeout = timeout or STEP_TIMEOUT_SECONDS
    started = time.monotonic()
    pool = samples.demo_pool(POOL, namespace=DEMO_NAMESPACE, guests=images or samples.V0_4_1)
    body = await apply(kube, pool)
    version = body["metadata"]["resourceVersion"]

    def wanted(obj: Mapping[str, Any]) -> bool:
        return pool_ready(obj, available=available)

    async def ready() -> None:
        if wanted(body):
            return
        async for _, obj in kube.watch(
            POOLS,
            DEMO_NAMESPACE,
            field_selector=name_selector(POOL),
            resource_version=version,
            timeout_seconds=int(timeout),
        ):
            if wanted(obj):
                return
        raise TimeoutError

    try:
        await within(ready(), timeout)
    except TimeoutError:
        raise DemoError(f"Pool {DEMO_NAMESPACE}/{POOL} not Ready within {timeout:.0f}s") from None
    return time.monotonic() - started


async def battery(env: Mapping[str, str], *args: str) -> Step:
    """Run `battery args` with the stack's environment; DemoError with its error if it fails."""
    argv = ("battery", *args)
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )
    try:
        out, err = await within(process.communicate(), STEP_TIMEOUT_SECONDS)
    except TimeoutError:
        process.kill()
        raise DemoError(
            f"`{' '.join(argv)}` did not finish in {STEP_TIMEOUT_SECONDS:.0f}s"
        ) from None
    step = Step(argv, time.monotonic() - started, out.decode(), err.decode())
    if process.returncode != 0:
        raise DemoError(f"`{step.command}` exited with {process.returncode}: {step.stderr.strip()}")
    return step


async def run(env: Mapping[str, str]) -> Sequence[Step]:
    """claim, exec `uname -a`, renew, release: each step's result, in order."""
    steps = [await battery(env, "claim", POOL)]
    claim = steps[0].stdout.strip()
    steps.append(await battery(env, "exec", claim, "--", "uname", "-a"))
    steps.append(await battery(env, "renew", claim))
    steps.append(await battery(env, "release", claim))
    return steps
