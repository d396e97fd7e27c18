"""The `battery` command from the built wheel, installed from PyPI into a clean venv, drives a
claim through bind, exec, renew and release against the whole stack (exec through the relaying
stand-in for the Exec Agent, `integration.standin`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from integration.consumer import HOLDER, consumer_kubeconfig, gone, ready_pool
from integration.stack import Stack, wait_for
from integration.standin import StandIns, start_stand_ins

from batteryop.api import names

PYTHONS = ("3.13", "3.12", "3.11")


@pytest.fixture(scope="module")
def battery(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`battery` of a venv that has the wheel and what its metadata asks for, nothing else."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = [p for v in PYTHONS for p in sorted(root.glob(f"{v}.*/bin/python{v}"))]
    if not found:
        pytest.skip(f"pyenv has none of CPython {', '.join(PYTHONS)} here")
    wheels = sorted(Path.cwd().rglob("battery_operator_client-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([str(found[0]), "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheels[0])],
        check=True,
        timeout=600,
    )
    return venv / "bin" / "battery"


@pytest.fixture
async def stand_ins(stack: Stack, tmp_path: Path) -> AsyncIterator[StandIns]:
    async with start_stand_ins(stack, tmp_path) as found:
        yield found


async def run(battery: Path, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = await asyncio.create_subprocess_exec(
        str(battery),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.req("CC-001", "CC-003", "CC-010", "CC-020", "CC-021")
async def test_the_installed_cli_binds_execs_renews_and_releases(
    stack: Stack, namespace: str, stand_ins: StandIns, tmp_path: Path, battery: Path
) -> None:
    await ready_pool(stack, namespace, heartbeat="1s")
    kubeconfig = consumer_kubeconfig(stack, namespace, tmp_path / "consumer.kubeconfig")
    common = ["--kubeconfig", str(kubeconfig), "-n", namespace, "--ca", str(stand_ins.ca_file)]

    code, out, err = await run(
        battery, *common, "run", "demo", "--holder", HOLDER, "--", "sh", "-c", "echo w; exit 5"
    )
    assert (code, out) == (5, "w\n"), err

    code, out, err = await run(battery, *common, "claim", "demo", "--holder", HOLDER)
    assert code == 0, err
    name = out.strip()
    # `exec` holds the claim while its command runs: a command outliving a heartbeat renews it.
    code, out, err = await run(battery, *common, "exec", name, "--", "sh", "-c", "sleep 2; echo x")
    assert (code, out) == (0, "x\n"), err
    body = await asyncio.to_thread(
        wait_for,
        stack,
        names.CLAIM_PLURAL,
        namespace,
        name,
        lambda b: bool(((b or {}).get("spec") or {}).get("renewTime")),
        timeout=30,
    )
    assert body is not None
    code, _, err = await run(battery, *common, "release", name)
    assert code == 0, err
    await gone(stack, namespace, name)
