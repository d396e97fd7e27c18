"""Exec through a claim, and the `battery` command as a real process, against the whole stack.

Each Host's Node report names a relaying stand-in (`integration.standin`, no authorization)
rather than the Exec Agent: these tests show what the client sends and that stdin, output and
exit codes make the round trip. The agent itself, with authorization, is in exec_agent_test.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from integration.consumer import HOLDER, consumer_kubeconfig, gone, host_ready, ready_pool
from integration.stack import Stack
from integration.standin import StandIns, start_stand_ins

from batteryop.api import names
from batteryop.client import AsyncClient, Client, ExecResult, NoAgentAddressError
from batteryop.client.cli import EXIT_ERROR, EXIT_EXEC_ERROR, EXIT_INTERRUPTED
from batteryop.kube.config import KubeConfig
from batteryop.tls import CertificateAuthority


@pytest.fixture
async def stand_ins(stack: Stack, tmp_path: Path) -> AsyncIterator[StandIns]:
    async with start_stand_ins(stack, tmp_path) as found:
        yield found


@pytest.mark.req("CC-020", "CC-003", "CC-101")
async def test_exec_through_a_claim_streams_and_returns_the_exit_code(
    stack: Stack, namespace: str, stand_ins: StandIns, tmp_path: Path
) -> None:
    await ready_pool(stack, namespace)
    kubeconfig = consumer_kubeconfig(stack, namespace, tmp_path / "consumer.kubeconfig")
    async with (
        AsyncClient(
            namespace=namespace,
            kube_config=KubeConfig.from_kubeconfig(str(kubeconfig)),
            serving_ca=stand_ins.ca_file,
        ) as client,
        await client.claim("demo", HOLDER, timeout=60) as claim,
    ):
        assert claim.agent_address == stand_ins.targets[claim.node_name]
        result = await claim.exec(["sh", "-c", "cat; echo done >&2; exit 7"], stdin=b"hello")
        assert (result.exit_code, result.stdout, result.stderr) == (7, b"hello", b"done\n")
        token = await claim.token()
        sent = stand_ins.tokens() == [token]  # compared apart, so no token reaches a report
        assert sent
        again = await claim.exec(["true"])
        assert again.ok
        # A figure, not a bound: `true` through the client, the stand-in relay and the fake
        # flintlockd (which spawns a real process), over one TLS channel.
        times = []
        for _ in range(20):
            started = time.perf_counter()
            assert (await claim.exec(["true"])).ok
            times.append(time.perf_counter() - started)
        times.sort()
        print(
            f"\nexec of true via the stand-in: p50 {times[10] * 1000:.1f} ms, max {times[-1] * 1000:.1f} ms"
        )
        sent = stand_ins.tokens() == [token] * 22  # the token on every call
        assert sent


async def test_exec_without_an_agent_address_says_so(
    stack: Stack, namespace: str, tmp_path: Path
) -> None:
    await ready_pool(stack, namespace)
    kubeconfig = consumer_kubeconfig(stack, namespace, tmp_path / "consumer.kubeconfig")
    ca = CertificateAuthority.create("unused")
    async with (
        AsyncClient(
            namespace=namespace,
            kube_config=KubeConfig.from_kubeconfig(str(kubeconfig)),
            serving_ca=ca.cert_pem,
        ) as client,
        await client.claim("demo", HOLDER, timeout=60) as claim,
    ):
        with pytest.raises(NoAgentAddressError, match="no Exec Agent address"):
            await claim.exec(["true"])


# -- the `battery` command as a process ------------------------------------------------------


@dataclass
class Cli:
    kubeconfig: Path
    namespace: str
    ca: Path

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        # PYTHONFAULTHANDLER: a command that hangs is made to print every thread's stack
        # (`finished`), so the failure says where it hung.
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(sys.path),
            "BATTERY_HOLDER": HOLDER,
            "PYTHONFAULTHANDLER": "1",
        }
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "batteryop.client.cli",
            "--kubeconfig",
            str(self.kubeconfig),
            "-n",
            self.namespace,
            "--ca",
            str(self.ca),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )

    async def __call__(self, *args: str) -> tuple[int, str, str]:
        process = await self.start(*args)
        out, err = await finished(process, 120)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()


async def finished(process: asyncio.subprocess.Process, seconds: float) -> tuple[bytes, bytes]:
    """`process`'s stdout and stderr once it exits; if it has not within `seconds`, it is
    made to dump every thread's stack (SIGABRT, with PYTHONFAULTHANDLER) and the test fails
    with that dump."""
    communicating = asyncio.ensure_future(process.communicate())
    try:
        return await asyncio.wait_for(asyncio.shield(communicating), seconds)
    except TimeoutError:
        process.send_signal(signal.SIGABRT)
        _, err = await asyncio.wait_for(communicating, 30)
        pytest.fail(f"the command did not exit within {seconds:g}s; its threads:\n{err.decode()}")


@pytest.fixture
async def cli(stack: Stack, namespace: str, stand_ins: StandIns, tmp_path: Path) -> Cli:
    await ready_pool(stack, namespace)
    kubeconfig = consumer_kubeconfig(stack, namespace, tmp_path / "consumer.kubeconfig")
    return Cli(kubeconfig, namespace, stand_ins.ca_file)


@pytest.mark.req("CC-106", "CC-107")
async def test_battery_run_exits_with_the_remote_code_and_releases(
    stack: Stack, namespace: str, cli: Cli
) -> None:
    code, out, err = await cli(
        "run", "demo", "--timeout", "60", "--", "sh", "-c", "echo hi; exit 3"
    )
    assert (code, out) == (3, "hi\n"), err
    assert "Bound to MicroVM" in err
    claims = stack.custom.list_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL
    )["items"]
    for c in claims:  # released: gone, or going once the operator let battery go
        await gone(stack, namespace, c["metadata"]["name"])


@pytest.mark.req("CC-116", "CC-106")
async def test_battery_run_falls_back_and_says_which_pool_served(
    stack: Stack, namespace: str, cli: Cli
) -> None:
    """The Pool `empty` has no MicroVM, so `--fallback demo` serves the run."""
    await ready_pool(stack, namespace, name="empty", size=0)
    code, out, err = await cli(
        "run", "empty", "--fallback", "demo", "--timeout", "60", "--", "echo", "served"
    )
    assert (code, out) == (0, "served\n"), err
    assert " of fallback Pool demo (agent " in err, err


@pytest.mark.req("CC-102", "CC-103", "CC-104", "CC-105")
async def test_battery_claim_ls_exec_release(stack: Stack, namespace: str, cli: Cli) -> None:
    code, out, err = await cli("claim", "demo", "--timeout", "60")
    assert code == 0, err
    name = out.strip()
    assert name.startswith("demo-")
    code, out, err = await cli("ls")
    assert code == 0, err
    assert name in out and "Bound" in out
    await host_ready(stack, namespace, name)  # else `exec` rightly warns on stderr (CC-013)
    code, out, err = await cli("exec", name, "--", "sh", "-c", "echo from-$0 >&2; echo ok", "vm")
    assert (code, out, err) == (0, "ok\n", "from-vm\n")
    code, _, err = await cli("release", name)
    assert code == 0, err
    await gone(stack, namespace, name)
    code, _, err = await cli("release", name)
    assert (code, err) == (0, f"claim {name}: already gone\n")


@pytest.mark.req("CC-109")
async def test_battery_errors_are_one_line_with_a_nonzero_exit(cli: Cli) -> None:
    code, out, err = await cli("claim", "nowhere", "--timeout", "5")
    assert code == EXIT_ERROR
    assert out == ""
    lines = [line for line in err.splitlines() if not line.startswith("battery: waiting:")]
    assert len(lines) == 1, err
    assert lines == [f"battery: error: Pool nowhere does not exist in namespace {cli.namespace}"]
    code, out, err = await cli("exec", "no-such-claim", "--", "true")
    assert (code, out) == (EXIT_EXEC_ERROR, "")
    assert err == "battery: error: claim no-such-claim does not exist\n"


@pytest.mark.req("CC-005", "CC-021", "CC-108")
async def test_ctrl_c_during_battery_run_releases_the_claim(
    stack: Stack, namespace: str, cli: Cli, stand_ins: StandIns
) -> None:
    process = await cli.start("run", "demo", "--timeout", "60", "--", "sleep", "60")
    started = [r.started.wait() for r in stand_ins.relays.values()]
    done, pending = await asyncio.wait(
        [asyncio.ensure_future(s) for s in started], timeout=60, return_when="FIRST_COMPLETED"
    )
    for task in pending:
        task.cancel()
    assert done, "the command never started"
    process.send_signal(signal.SIGINT)
    _, err = await finished(process, 60)
    assert process.returncode == EXIT_INTERRUPTED, err
    assert err.decode().rstrip().endswith("battery: interrupted")
    claims = stack.custom.list_namespaced_custom_object(
        names.GROUP, names.VERSION, namespace, names.CLAIM_PLURAL
    )["items"]
    for c in claims:
        await gone(stack, namespace, c["metadata"]["name"])


@pytest.mark.req("CC-021")
async def test_the_sync_client_claims_runs_and_releases_with_the_same_names(
    stack: Stack, namespace: str, stand_ins: StandIns, tmp_path: Path
) -> None:
    await ready_pool(stack, namespace)
    kubeconfig = consumer_kubeconfig(stack, namespace, tmp_path / "consumer.kubeconfig")

    def scenario() -> tuple[str, ExecResult]:
        with (
            Client(namespace=namespace, kubeconfig=kubeconfig, serving_ca=stand_ins.ca_file) as c,
            c.claim("demo", HOLDER, timeout=60) as claim,
        ):
            return claim.name, claim.exec(["sh", "-c", "echo sync; exit 4"])

    # On a thread: the stand-ins serve from this test's event loop.
    name, result = await asyncio.to_thread(scenario)
    assert (result.exit_code, result.stdout) == (4, b"sync\n")
    await gone(stack, namespace, name)
