"""End to end on one local stack: every deployable its own process, as the Manifests run it
(TD-024), a consumer using the `battery` command of the built client wheel.

The tests share the stack and run in order; each releases what it claimed. They steer the
fakes only through their control APIs (TD-108, TD-109), the operator only by killing and
starting its process, and the Hosts as an administrator and the Host Image would: cordoning
Nodes, leaving files in a Host's not-ready folder, adding Hosts. Nothing publishes the Host set
but the host registry.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from e2e.driver import (
    Body,
    battery_hosts,
    battery_pool_hosts,
    battery_state,
    cli,
    condition,
    control,
    create_claim,
    eventually,
    fetch,
    leases_for,
    metric,
    phase,
    report,
    until,
)

from batteryop.api import names, samples
from batteryop.api.conditions import CSRReason
from batteryop.client._exceptions import ExecPermissionError
from batteryop.client._shell import HOST_KEY as HOST_KEY_PUB
from batteryop.client._transport import ExecRequest, GrpcExecTransport
from batteryop.devstack import cluster, demo
from batteryop.devstack.cluster import DEMO_NAMESPACE, apply, token
from batteryop.devstack.processes import http_status
from batteryop.devstack.stack import Stack
from batteryop.host_registry.inventory.hosts import REMOVE_REFUSED_EVENT_REASON
from batteryop.kube.client import KubeClient
from batteryop.kube.resources import (
    CERTIFICATE_SIGNING_REQUESTS,
    CLAIMS,
    CONFIGMAPS,
    EVENTS,
    NODES,
    POOLS,
    SECRETS,
)
from batteryop.testing import exposition
from batteryop.testing.host_registry_env import (
    publications_since,
    set_cordoned,
    set_labelled,
    until_event,
)
from batteryop.testing.polling import wait_until
from batteryop.testing.terminal import Terminal

pytestmark = pytest.mark.asyncio(loop_scope="module")


def when(rfc3339: str) -> datetime:
    """A time from battery's state (protobuf JSON: RFC 3339, UTC, "Z")."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))


async def bound_claim_via_cli(stack: Stack) -> dict:  # type: ignore[type-arg]
    async with stack.kube() as kube:
        await demo.apply_pool(kube)
        code, out, err = await cli(stack, "claim", demo.POOL)
        assert code == 0, err
        body = await kube.get(CLAIMS, out.strip(), DEMO_NAMESPACE)
    assert phase(body) == "Bound", body
    return body


async def release_via_cli(stack: Stack, name: str) -> None:
    code, _, err = await cli(stack, "release", name)
    assert code == 0, err
    async with stack.kube() as kube:
        await until(kube, CLAIMS, name, lambda b: b is None, what="gone")


@pytest.mark.req("TD-024", "TD-026", "TD-110", "CL-060", "CC-010", "CC-115")
async def test_a_claim_binds_execs_renews_and_releases_through_the_cli(
    stack: Stack, tmp_path: Path
) -> None:
    claim = await bound_claim_via_cli(stack)
    name, uid = claim["metadata"]["name"], claim["metadata"]["uid"]
    # CL-060: battery's Lease carries the claim's uid.
    leases = leases_for(await battery_state(stack), uid)
    assert [x["lease_id"] for x in leases] == [claim["status"]["leaseID"]]

    code, out, err = await cli(stack, "exec", name, "--", "uname", "-a")
    assert (code, out.split()[:1]) == (0, ["Linux"]), err

    # CC-115: a folder in and out through the Exec Agent, modes kept (a relative path is the
    # MicroVM's working folder: the sandbox's here).
    folder = tmp_path / "tree"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "run.sh").write_bytes(b"#!/bin/sh\necho in the VM\n")
    (folder / "sub" / "run.sh").chmod(0o750)
    code, _, err = await cli(stack, "cp", str(folder), f"{name}:tree")
    assert code == 0, err
    code, out, err = await cli(stack, "exec", name, "--", "sh", "tree/sub/run.sh")
    assert (code, out) == (0, "in the VM\n"), err
    code, _, err = await cli(stack, "cp", f"{name}:tree", str(tmp_path / "back"))
    assert code == 0, err
    back = tmp_path / "back" / "sub" / "run.sh"
    assert back.read_bytes() == (folder / "sub" / "run.sh").read_bytes()
    assert back.stat().st_mode & 0o777 == 0o750
    code, _, err = await cli(stack, "cp", f"{name}:no-such-file", str(tmp_path / "x"))
    assert code == 1 and err.count("\n") == 1 and "no such file or folder" in err, err

    code, _, err = await cli(stack, "renew", name)
    assert code == 0, err
    async with stack.kube() as kube:
        renewed = await kube.get(CLAIMS, name, DEMO_NAMESPACE)
    assert renewed["spec"].get("renewTime"), renewed["spec"]

    await release_via_cli(stack, name)
    assert leases_for(await battery_state(stack), uid) == []


async def host_nodes(kube: KubeClient) -> dict[str, str]:
    """The Nodes that must be battery's published Hosts (IN-001, IN-003): labelled as Hosts,
    schedulable, their Exec Agent's report ready; name -> the reported flintlockd address."""
    nodes = await kube.list(NODES, label_selector=f"{names.HOST_LABEL}={names.HOST_LABEL_VALUE}")
    out = {}
    for node in nodes:
        ready, address = report(node)
        schedulable = not (node.get("spec") or {}).get("unschedulable")
        if ready == names.EXEC_AGENT_READY_TRUE and address and schedulable:
            out[node["metadata"]["name"]] = address
    return out


async def pool_placed_on(stack: Stack, hosts: list[str]) -> None:
    async def placed() -> bool:
        return battery_pool_hosts(await battery_state(stack), demo.POOL) == hosts

    await eventually(placed, 60, f"the demo Pool placed on {hosts} in battery")


@pytest.mark.req("IN-001", "IN-003", "IN-100", "IN-101", "PO-010", "TD-110")
async def test_pools_are_placed_on_the_hosts_the_registry_publishes_and_leave_a_cordoned_one(
    stack: Stack,
) -> None:
    battery_pid = stack.running("battery").popen.pid
    async with stack.kube() as kube:
        hosts = await host_nodes(kube)
        assert set(hosts) == set(stack.hosts), hosts
        assert await stack.wait_published(lambda p: p == hosts) == hosts
        await demo.apply_pool(kube)
        state = await battery_state(stack)
        assert {n: h["address"] for n, h in battery_hosts(state).items()} == hosts
        assert not any(h["cordoned"] for h in battery_hosts(state).values())
        await pool_placed_on(stack, sorted(hosts))

        # A cordoned Node: cordoned in battery, left out of the Host set and so of the Pool.
        cordoned = sorted(hosts)[-1]
        rest = {n: a for n, a in hosts.items() if n != cordoned}
        await set_cordoned(kube, cordoned, True)
        try:
            await stack.wait_published(lambda p: p == rest)
            # The cordon is made before the publication, in the same pass.
            assert battery_hosts(await battery_state(stack))[cordoned]["cordoned"] is True
            await pool_placed_on(stack, sorted(rest))
        finally:
            await set_cordoned(kube, cordoned, False)
        await stack.wait_published(lambda p: p == hosts)
        assert battery_hosts(await battery_state(stack))[cordoned]["cordoned"] is False
        await pool_placed_on(stack, sorted(hosts))
    # IN-100, IN-101: battery was never restarted for any of it.
    assert stack.running("battery").popen.pid == battery_pid
    assert stack.running("battery").popen.poll() is None
    registry = await fetch(stack.registry_metrics)
    assert metric(registry, "battery_host_registry_battery_restarts_total") == 0


def refused_removals(page: str) -> float:
    """The host registry's count of RemoveHost calls battery refused."""
    return exposition.value(
        page, 'battery_host_registry_host_calls_total{result="refused",rpc="RemoveHost"}'
    )


@pytest.mark.req("IN-002", "IN-013", "IN-101", "IN-104", "PO-010", "PO-011", "CL-051", "TD-110")
async def test_a_host_losing_its_label_is_drained_from_pools_first_and_comes_back_with_it(
    stack: Stack,
) -> None:
    """A Host leaving (its Node loses the Host label) while a claim is Bound on it.

    battery refuses `RemoveHost` while MicroVMs are on the Host, and the claim's MicroVM is
    there, so what follows is deterministic: the Host set and the Pool lose the Host at once,
    battery keeps it, the registry says why and retries, and the claim keeps working."""
    battery_pid = stack.running("battery").popen.pid
    claim = await bound_claim_via_cli(stack)
    name = claim["metadata"]["name"]
    leaving = claim["status"]["host"]["nodeName"]
    async with stack.kube() as kube:
        hosts = await host_nodes(kube)
        assert leaving in hosts and len(hosts) >= 2, hosts
        rest = {n: a for n, a in hosts.items() if n != leaving}
        await stack.wait_published(lambda p: p == hosts)
        await pool_placed_on(stack, sorted(hosts))

        await set_labelled(kube, leaving, False)
        try:
            # IN-002, IN-013: the Host set loses the Host first; PO-010, PO-011: the Pool
            # follows in battery; the other Hosts stay.
            await stack.wait_published(lambda p: p == rest)
            gone = await kube.get(CONFIGMAPS, names.BATTERY_CONFIG_MAP, cluster.NAMESPACE)
            await pool_placed_on(stack, sorted(rest))

            # Drain first: the registry asked battery to remove the Host only once no Pool
            # named it (battery's refusal lists the Pools naming the Host: none), and battery
            # keeps it while the claim's MicroVM is there. Said once, with battery's reason.
            event = await until_event(kube, leaving, REMOVE_REFUSED_EVENT_REASON, timeout=60)
            assert event["type"] == "Warning", event
            assert leaving in event["note"] and "still in use" in event["note"], event
            assert "pools []" in event["note"], event
            state = await battery_state(stack)
            assert battery_hosts(state)[leaving]["address"] == hosts[leaving]
            on_it = {v["uid"] for v in state["vms"] if v.get("flintlock_host") == leaving}
            assert claim["status"]["microVM"]["uid"] in on_it, state["vms"]

            # The registry retries (not in a hot loop: every few seconds, no new Event), and
            # never publishes the Host again meanwhile.
            async def retried() -> float:
                metrics = await fetch(stack.registry_metrics)
                return refused_removals(metrics) >= 2 and refused_removals(metrics)

            refusals = await eventually(retried, 30, "RemoveHost retried")
            since = await publications_since(kube, cluster.NAMESPACE, gone)
            assert [p for p in since if p != rest] == [], since
            events = [
                e
                for e in await kube.list(EVENTS, "default")
                if e.get("reason") == REMOVE_REFUSED_EVENT_REASON
                and (e.get("regarding") or {}).get("name") == leaving
            ]
            assert [e.get("series") for e in events] == [None], events

            # CL-051: the Bound claim on the leaving Host keeps working.
            code, out, err = await cli(stack, "exec", name, "--", "echo", "still here")
            assert (code, out) == (0, "still here\n"), err
            code, _, err = await cli(stack, "renew", name)
            assert code == 0, err
            async with stack.kube() as again:
                body = await again.get(CLAIMS, name, DEMO_NAMESPACE)
            assert phase(body) == "Bound", body
        finally:
            await set_labelled(kube, leaving, True)

        # The label back: the Host is published again and the Pool placed on it again.
        assert await stack.wait_published(lambda p: p == hosts) == hosts
        await pool_placed_on(stack, sorted(hosts))
        assert battery_hosts(await battery_state(stack))[leaving]["address"] == hosts[leaving]
    registry = await fetch(stack.registry_metrics)
    assert refused_removals(registry) >= refusals
    print(f"\n{leaving}: RemoveHost refused {refused_removals(registry):.0f} times while leaving")
    # IN-101: battery was never restarted for any of it.
    assert metric(registry, "battery_host_registry_battery_restarts_total") == 0
    assert stack.running("battery").popen.pid == battery_pid
    await release_via_cli(stack, name)


@pytest.mark.req("CC-003", "CC-021", "EA-013")
async def test_battery_run_execs_right_after_the_bind_and_releases(stack: Stack) -> None:
    async with stack.kube() as kube:
        await demo.apply_pool(kube)
    code, out, err = await cli(stack, "run", demo.POOL, "--", "sh", "-c", "echo ran; exit 3")
    assert (code, out) == (3, "ran\n"), err
    name = err.split("claim ", 1)[1].split(":", 1)[0]
    async with stack.kube() as kube:
        await until(kube, CLAIMS, name, lambda b: b is None, what="released")


@pytest.mark.req("CC-118", "EA-130")
async def test_battery_shell_gives_a_pty_whose_size_and_ctrl_c_reach_the_remote_side(
    stack: Stack, tmp_path: Path
) -> None:
    """`battery shell` typed into a terminal, as a person uses it: the remote side has a PTY of
    the terminal's size, a window change reaches it, Ctrl-C interrupts the remote command (the
    terminal is raw: no SIGINT reaches `battery`), and the shell's exit code is battery's."""
    claim = await bound_claim_via_cli(stack)
    name = claim["metadata"]["name"]
    code, login, err = await cli(stack, "exec", name, "--", "id", "-un")
    assert code == 0, err
    login = login.strip()
    terminal = Terminal(f"battery shell {name}", stack.cli_env(), rows=33, columns=101)
    try:
        terminal.type(b"stty size; echo SIZE-$((1 + 1))\n")
        await terminal.wait_for("SIZE-2", 60)
        assert "33 101" in terminal.text, terminal.text
        terminal.resize(40, 120)
        terminal.type(b"stty size; echo RESIZED-$((2 + 1))\n")
        await terminal.wait_for("RESIZED-3", 30)
        assert "40 120" in terminal.text.split("RESIZED-$")[-1], terminal.text
        # The remote command says when it runs, as the terminal's foreground job: a Ctrl-C
        # typed once the line's echo came could reach the shell before it had handed the
        # terminal to the job, and the shell lets a job that SIGINT missed run on (seen in
        # CI: the sleep was waited out).
        terminal.type(b"sh -c 'echo STARTED-$((6 + 1)); exec sleep 60'; echo SLEPT-$((3 + 1))\n")
        await terminal.wait_for("STARTED-7", 30)
        terminal.type(b"\x03")
        terminal.type(b"echo ALIVE-$((4 + 1))\n")
        await terminal.wait_for("ALIVE-5", 30)
        assert "SLEPT-4" not in terminal.text  # the sleep was interrupted, not waited out
        terminal.type(b"exit 7\n")
        assert await terminal.exited(30) == 7, terminal.text
    finally:
        terminal.close()
    # Without a terminal: the command's output and exit code, no PTY.
    code, out, err = await cli(stack, "shell", name, "--", "sh", "-c", "tty; echo 'a b'; exit 4")
    assert (code, out) == (4, "not a tty\na b\n"), err
    # `battery ssh-proxy` as the ProxyCommand of the user's own ssh, with the user's own key
    # (put in place over exec) and the host key read over exec.
    key = tmp_path / "id_ed25519"
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)]
    await asyncio.to_thread(subprocess.run, keygen, check=True)
    env = stack.cli_env()
    installed = await asyncio.to_thread(
        subprocess.run,
        ["battery", "exec", "-i", name, "--", "sh", "-c",
         'mkdir -p "$HOME/.ssh" && cat >>"$HOME/.ssh/authorized_keys"'],
        input=key.with_suffix(".pub").read_bytes(), env=env, capture_output=True,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    code, host_key, err = await cli(stack, "exec", name, "--", "cat", HOST_KEY_PUB)
    assert code == 0, err
    (tmp_path / "known_hosts").write_text(f"{name} {host_key}")
    own = await asyncio.to_thread(
        subprocess.run,
        ["ssh", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes",
         "-o", f"UserKnownHostsFile={tmp_path / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
         "-o", "ProxyCommand=battery ssh-proxy %n", f"{login}@{name}", "echo", "via", "proxy"],
        env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert (own.returncode, own.stdout) == (0, "via proxy\n"), own.stderr
    await release_via_cli(stack, name)
    # `battery run -it`: claim, the command on a PTY, release.
    run = Terminal(
        f"battery run -it {demo.POOL} -- sh -c 'stty size; exit 5'",
        stack.cli_env(),
        rows=21,
        columns=77,
    )
    try:
        assert await run.exited(120) == 5, run.text
        assert "21 77" in run.text, run.text
    finally:
        run.close()
    ran = run.text.split("claim ", 1)[1].split(":", 1)[0]
    async with stack.kube() as kube:
        await until(kube, CLAIMS, ran, lambda b: b is None, what="released")


@pytest.mark.req("EA-011", "EA-012")
async def test_another_service_account_cannot_exec_in_a_claims_microvm(stack: Stack) -> None:
    claim = await bound_claim_via_cli(stack)
    name = claim["metadata"]["name"]
    status = claim["status"]
    intruder = f"intruder-{uuid.uuid4().hex[:6]}"
    async with stack.kube() as kube:
        await apply(
            kube,
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": intruder, "namespace": DEMO_NAMESPACE},
            },
        )
        secret = await kube.get(SECRETS, names.exec_secret_name(name), DEMO_NAMESPACE)
        # A token with the agent's audience, even bound to the claim's own Secret: not the
        # Holder's, so refused.
        stolen = await token(
            kube,
            intruder,
            namespace=DEMO_NAMESPACE,
            audiences=[names.EXEC_AGENT_AUDIENCE],
            bound={
                "apiVersion": "v1",
                "kind": "Secret",
                "name": secret["metadata"]["name"],
                "uid": secret["metadata"]["uid"],
            },
            seconds=600,
        )
    assert stack.pki is not None
    transport = GrpcExecTransport(stack.pki.exec_serving_ca_file.read_bytes())
    ran: list[bytes] = []
    try:
        with pytest.raises(ExecPermissionError):
            await transport.run(
                status["host"]["agentAddress"],
                stolen,
                ExecRequest(status["microVM"]["uid"], ("touch", "/tmp/pwned")),
                stdin=None,
                stdout=ran.append,
                stderr=ran.append,
                errors=lambda _: None,
            )
    finally:
        await transport.aclose()
    assert ran == []
    await release_via_cli(stack, name)


@pytest.mark.req("CL-050", "CL-051", "CL-053", "CC-013", "EA-033")
async def test_a_host_report_going_not_ready_shows_on_the_claim_and_in_the_cli(
    stack: Stack,
) -> None:
    claim = await bound_claim_via_cli(stack)
    name = claim["metadata"]["name"]
    host = stack.hosts[claim["status"]["host"]["nodeName"]].files
    async with stack.kube() as kube:
        await until(
            kube,
            CLAIMS,
            name,
            lambda b: condition(b, "HostReady").get("status") == "True",
            what="HostReady=True",
        )
        # What the Host Image's units do when the Host is not ready (EA-033).
        (host.not_ready_dir / "containerd").write_text("containerd is restarting\n")
        try:
            body = await until(
                kube,
                CLAIMS,
                name,
                lambda b: condition(b, "HostReady").get("status") == "False",
                what="HostReady=False",
            )
            hr = condition(body, "HostReady")
            assert hr["reason"] == "HostImageNotReady", hr
            assert "containerd" in hr["message"], hr
            assert phase(body) == "Bound"  # CL-051: the claim is kept
            code, out, err = await cli(stack, "exec", name, "--", "true")
            assert code == 0, err
            assert f"warning: Host {host.name} of claim {name} is not ready" in err, err
            assert "HostImageNotReady" in err, err
        finally:
            (host.not_ready_dir / "containerd").unlink()
        await until(
            kube,
            CLAIMS,
            name,
            lambda b: condition(b, "HostReady").get("status") == "True",
            what="HostReady=True again",
        )
    await release_via_cli(stack, name)


@pytest.mark.req("CL-060", "CL-061", "CL-008")
async def test_an_operator_killed_before_its_status_write_gets_the_same_lease_after_restart(
    stack: Stack,
) -> None:
    async with stack.kube() as kube:
        await demo.apply_pool(kube)
        faults = f"{stack.battery_control}/faults"
        # battery commits the Lease, then holds the answer back: the operator waits in ClaimVM.
        await control(faults, "POST", {"claim_delay": 30.0, "claim_delay_after_commit": True})
        try:
            created = await create_claim(kube, "crash", demo.POOL)
            uid = created["metadata"]["uid"]

            async def committed() -> list[dict]:  # type: ignore[type-arg]
                return leases_for(await battery_state(stack), uid)

            await eventually(committed, 60, "battery's Lease for the claim")
            assert stack.processes is not None
            stack.processes.kill("operator")  # it dies before it could write the status
        finally:
            await control(faults, "DELETE")
        body = await kube.get(CLAIMS, "crash", DEMO_NAMESPACE)
        assert phase(body) != "Bound", body
        await stack.start("operator")
        bound = await until(kube, CLAIMS, "crash", lambda b: phase(b) == "Bound", what="Bound")
        assert bound is not None
        state = await battery_state(stack)
        assert [x["lease_id"] for x in leases_for(state, uid)] == [bound["status"]["leaseID"]]
        leased = [v for v in state["vms"] if v.get("lease_id") == bound["status"]["leaseID"]]
        assert [v["uid"] for v in leased] == [bound["status"]["microVM"]["uid"]]
    await release_via_cli(stack, "crash")


@pytest.mark.req("DP-012", "CL-051")
async def test_battery_and_a_flintlockd_going_away_and_back_lose_no_claim(stack: Stack) -> None:
    claim = await bound_claim_via_cli(stack)
    name, lease = claim["metadata"]["name"], claim["status"]["leaseID"]
    readyz = f"{stack.operator_health}/readyz"

    # battery stops answering and restarts (its state kept, as poolmgrd's database keeps it).
    await control(f"{stack.battery_control}/listening", "POST", {"listening": False})
    try:

        async def unready() -> bool:
            return await asyncio.to_thread(http_status, readyz) == 503

        await eventually(unready, 60, "the operator unready while battery is away (DP-012)")
        await control(f"{stack.battery_control}/restart", "POST")
    finally:
        await control(f"{stack.battery_control}/listening", "POST", {"listening": True})

    async def ready() -> bool:
        return await asyncio.to_thread(http_status, readyz) == 200

    await eventually(ready, 60, "the operator ready again")

    # The claim's Host's flintlockd goes down and comes back.
    host = stack.hosts[claim["status"]["host"]["nodeName"]]
    await control(f"{host.flintlockd_control}/down", "POST")
    async with stack.kube() as kube:
        try:
            body = await until(
                kube,
                CLAIMS,
                name,
                lambda b: condition(b, "HostReady").get("reason") == "FlintlockdNotReady",
                what="HostReady=False FlintlockdNotReady",
            )
            assert phase(body) == "Bound"
        finally:
            await control(f"{host.flintlockd_control}/up", "POST")
        body = await until(
            kube,
            CLAIMS,
            name,
            lambda b: condition(b, "HostReady").get("status") == "True",
            what="HostReady=True again",
        )
    assert body is not None and body["status"]["leaseID"] == lease
    code, out, err = await cli(stack, "exec", name, "--", "echo", "still here")
    assert (code, out) == (0, "still here\n"), err
    await release_via_cli(stack, name)


@pytest.mark.req("BA-060", "CL-061", "DP-012", "TD-024")
async def test_battery_killed_and_started_again_keeps_the_claims_lease(stack: Stack) -> None:
    claim = await bound_claim_via_cli(stack)
    name, uid, lease = (
        claim["metadata"]["name"],
        claim["metadata"]["uid"],
        claim["status"]["leaseID"],
    )
    state = await battery_state(stack)
    [before] = leases_for(state, uid)
    hosts = sorted((h["name"], h["address"]) for h in state["hosts"])
    assert {name for name, _ in hosts} >= set(stack.hosts)

    # SIGKILL: no shutdown path runs; battery comes back from its -db file in the state folder.
    seconds = await stack.kill_and_start("battery")
    print(f"\nbattery killed and ready again in {seconds:.2f}s")
    state = await battery_state(stack)
    [after] = leases_for(state, uid)
    assert (after["lease_id"], after["vm_uid"]) == (lease, claim["status"]["microVM"]["uid"])
    # The Hosts the host registry added (AddHost) come back from the database (battery main).
    assert sorted((h["name"], h["address"]) for h in state["hosts"]) == hosts
    assert when(after["expires_at"]) >= when(before["expires_at"])

    async def ready() -> bool:
        return await asyncio.to_thread(http_status, f"{stack.operator_health}/readyz") == 200

    await eventually(ready, 60, "the operator ready with the new battery")
    async with stack.kube() as kube:
        body = await kube.get(CLAIMS, name, DEMO_NAMESPACE)
    assert (phase(body), body["status"]["leaseID"]) == ("Bound", lease)
    code, out, err = await cli(stack, "exec", name, "--", "echo", "after the crash")
    assert (code, out) == (0, "after the crash\n"), err

    # A renewal reaches the new battery: its Lease's heartbeat moves on.
    code, _, err = await cli(stack, "renew", name)
    assert code == 0, err

    async def renewed() -> list[dict]:  # type: ignore[type-arg]
        return [
            x
            for x in leases_for(await battery_state(stack), uid)
            if when(x["last_heartbeat_at"]) > when(after["last_heartbeat_at"])
        ]

    await eventually(renewed, 60, "the renewal's heartbeat on the new battery")
    await release_via_cli(stack, name)
    assert leases_for(await battery_state(stack), uid) == []


@pytest.mark.req("PO-042", "PO-043", "PO-044", "CL-063", "CL-004")
async def test_a_pool_deleted_under_bound_claims_drains_and_goes_after_the_last_release(
    stack: Stack,
) -> None:
    pool = "drain"
    body = samples.demo_pool(pool, namespace=DEMO_NAMESPACE)
    body["spec"]["lease"] = {"expiryThreshold": "10m"}  # nobody renews here
    async with stack.kube() as kube:
        await apply(kube, body)
        await until(
            kube,
            POOLS,
            pool,
            lambda b: condition(b, "Ready").get("status") == "True",
            what="Ready",
        )
        await create_claim(kube, "held", pool)
        held = await until(kube, CLAIMS, "held", lambda b: phase(b) == "Bound", what="Bound")
        assert held is not None

        await kube.delete(POOLS, pool, DEMO_NAMESPACE)
        blocked = await until(
            kube,
            POOLS,
            pool,
            lambda b: condition(b, "Ready").get("reason") == "DeletionBlocked",
            what="Ready=False DeletionBlocked",
        )
        ready = condition(blocked, "Ready")
        assert ready["status"] == "False"
        assert "1" in ready["message"], ready  # PO-043: the leased count
        assert names.POOL_FINALIZER in blocked["metadata"]["finalizers"]  # type: ignore[index]

        # PO-042: battery holds the drained spec (size 0) and makes no MicroVM meanwhile.
        def drained(state: Body) -> bool:
            specs = [p["spec"] for p in state["pools"] if p["spec"].get("name") == pool]
            return bool(specs) and all(not s.get("size") for s in specs)

        state = await wait_until(
            lambda: battery_state(stack),
            drained,
            what="battery's spec of the Pool drained",
            within=30,
        )

        def pool_vms(state: Body) -> set[str]:
            return {v["uid"] for v in state["vms"] if v.get("pool_name") == pool}

        vms = pool_vms(state)
        assert held["status"]["microVM"]["uid"] in vms

        # CL-063: a new claim does not call battery while the Pool is being deleted.
        await create_claim(kube, "late", pool)
        late = await until(
            kube,
            CLAIMS,
            "late",
            lambda b: condition(b, "Bound").get("reason") == "PoolDeleting",
            what="Pending PoolDeleting",
        )
        assert phase(late) == "Pending"
        assert leases_for(await battery_state(stack), late["metadata"]["uid"]) == []  # type: ignore[index]
        assert (
            pool_vms(await battery_state(stack)) <= vms
        ), "no MicroVM made for a Pool being deleted"

        # PO-044: the Pool goes once the last Bound claim is released.
        await kube.delete(CLAIMS, "held", DEMO_NAMESPACE)
        await until(kube, POOLS, pool, lambda b: b is None, what="gone")
        await until(
            kube,
            CLAIMS,
            "late",
            lambda b: condition(b, "Bound").get("reason") == "PoolNotFound",
            what="PoolNotFound",
        )
        await create_claim(kube, "later", pool)
        later = await until(
            kube,
            CLAIMS,
            "later",
            lambda b: condition(b, "Bound").get("reason") == "PoolNotFound",
            what="PoolNotFound",
        )
        assert phase(later) == "Pending"
        for name in ("late", "later"):
            await kube.delete(CLAIMS, name, DEMO_NAMESPACE)


async def denied_csr(kube: KubeClient, node: str, timeout: float = 60.0) -> dict:  # type: ignore[type-arg]
    """The first CSR of `node`'s Exec Agent that the approver denied (list, then watch)."""

    def denied(csr: dict) -> bool:  # type: ignore[type-arg]
        mine = (csr["spec"].get("extra") or {}).get(names.NODE_NAME_EXTRA) == [node]
        conditions = (csr.get("status") or {}).get("conditions") or []
        return mine and any(c.get("type") == "Denied" for c in conditions)

    async def wait() -> dict:  # type: ignore[type-arg]
        items = await kube.list(CERTIFICATE_SIGNING_REQUESTS)
        for csr in items:
            if denied(csr):
                return csr
        async for _, csr in kube.watch(
            CERTIFICATE_SIGNING_REQUESTS, resource_version=items.resource_version or None
        ):
            if denied(csr):
                return csr
        raise AssertionError("the watch ended")

    return await asyncio.wait_for(wait(), timeout)


@pytest.mark.req("IN-001", "IN-101", "EA-033", "CT-010", "CT-014", "TD-110")
async def test_a_host_joins_battery_only_once_its_exec_agent_is_ready_and_approved(
    stack: Stack,
) -> None:
    # One Host whose Host Image says it is not ready; one whose Node has another address, so
    # the CSR approver denies its Exec Agent's certificates: it never has a flintlockd to offer.
    unready = await stack.add_host(not_ready={"containerd": "containerd is restarting\n"})
    unapproved = await stack.add_host(node_address="127.0.0.250")
    first = next(iter(stack.hosts))
    async with stack.kube() as kube:
        await until(
            kube,
            NODES,
            unready,
            lambda b: report(b)[0] == names.EXEC_AGENT_READY_FALSE,
            namespace=None,
            what="reported not ready",
        )
        csr = await denied_csr(kube, unapproved)
        denial = next(c for c in csr["status"]["conditions"] if c["type"] == "Denied")
        assert denial["reason"] == CSRReason.SUBJECT_ALT_NAMES_MISMATCH, denial
        assert "not an internal address" in denial["message"], denial
        node = await kube.get(NODES, unapproved)
        assert report(node) == (None, None), node["metadata"].get("annotations")

        # A barrier: cordoning another Node is published from a pass over every Node, so that
        # pass (and every later one) saw both new Nodes. Then nothing waits to settle: a
        # wrongly admitted Node would be pending or, after the settle time, in battery.
        await set_cordoned(kube, first, True)
        try:
            await stack.wait_published(lambda p: first not in p)
        finally:
            await set_cordoned(kube, first, False)
        pending = metric(
            await fetch(stack.registry_metrics), "battery_host_registry_pending_changes"
        )
        assert pending == 0
        in_battery = battery_hosts(await battery_state(stack))
        assert unready not in in_battery and unapproved not in in_battery, in_battery
        published = await stack.wait_published(lambda p: first in p)
        assert unready not in published and unapproved not in published, published

        # The Host turns ready: it joins battery and the Host set; how long that takes.
        address = stack.hosts[unready].flintlockd
        ready_at: list[float] = []

        async def turned_ready() -> None:
            await until(
                kube,
                NODES,
                unready,
                lambda b: report(b) == (names.EXEC_AGENT_READY_TRUE, address),
                namespace=None,
                what="reported ready",
            )
            ready_at.append(time.monotonic())

        watcher = asyncio.create_task(turned_ready())
        (stack.hosts[unready].files.not_ready_dir / "containerd").unlink()
        published = await stack.wait_published(lambda p: unready in p)
        joined_at = time.monotonic()
        await watcher
        assert published[unready] == address
        assert battery_hosts(await battery_state(stack))[unready]["address"] == address
        print(
            f"\n{unready}: report ready -> Host in battery and published in "
            f"{(joined_at - ready_at[0]) * 1000:.0f} ms (settle time 1s, AddHost)"
        )
        assert unapproved not in published
        node = await kube.get(NODES, unapproved)
        assert report(node) == (None, None), node["metadata"].get("annotations")
