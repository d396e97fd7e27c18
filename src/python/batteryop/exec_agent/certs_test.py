"""The agent's certificates by CSR, against the real API server's CSR API and the real CSR
approver (in this process), acting as the agent's own ServiceAccount with a token bound to a
Pod on its Node: what the DaemonSet's projected token is."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import os
import socket
import ssl
import stat
from collections.abc import AsyncIterator
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from grpc_health.v1 import health, health_pb2_grpc
from prometheus_client import CollectorRegistry

from batteryop.api import names
from batteryop.api.clock import FakeClock
from batteryop.api.conditions import CSRCondition
from batteryop.exec_agent import certs
from batteryop.exec_agent.certs import (
    CLIENT,
    EXEC_SERVING,
    FLINTLOCKD_SERVING,
    AgentCertificates,
    CertDir,
    CertificateError,
    certificate_check,
    check_issued,
    renew_task,
    wants,
)
from batteryop.exec_agent.metrics import AgentMetrics
from batteryop.kube.client import KubeClient
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CERTIFICATE_SIGNING_REQUESTS, SECRETS
from batteryop.obs.health import CheckResult, HealthServer
from batteryop.obs.supervisor import Supervisor
from batteryop.testing.csr_approver_env import (
    TRUST_DOMAIN,
    Cluster,
    agent_certificates,
    new_agent_certificates,
    running,
    tls_secret,
)
from batteryop.testing.sleeps import Sleeps
from batteryop.tls import CertificateAuthority, new_key

ADDRESS = "127.0.0.43"
SIGNED_BY_CSR = (FLINTLOCKD_SERVING, EXEC_SERVING)


# -- the checks on what a signer returns (no cluster) ---------------------------------------


def _bundle(
    serving: CertificateAuthority,
    client: CertificateAuthority,
    exec_serving: CertificateAuthority | None = None,
) -> dict[str, str]:
    return {
        names.SERVING_CA_BUNDLE_KEY: serving.cert_pem.decode(),
        names.CLIENT_CA_BUNDLE_KEY: client.cert_pem.decode(),
        names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY: (exec_serving or serving).cert_pem.decode(),
    }


@pytest.mark.req("EA-061", "EA-066", "EA-068")
def test_check_issued_refuses_what_was_not_asked_for() -> None:
    serving = CertificateAuthority.create("serving")
    client = CertificateAuthority.create("client")
    other = CertificateAuthority.create("other")
    bundle = _bundle(serving, client)
    want = wants("host-a", TRUST_DOMAIN, ADDRESS)[FLINTLOCKD_SERVING]
    key = new_key()
    now = datetime.datetime.now(UTC)
    good = serving.issue("host-a", hosts=[ADDRESS, want.uri], server=True, key=key)
    issued = check_issued(want, key, good.cert_pem, bundle, now, 0.6)
    assert issued.cert.serial_number == good.cert.serial_number
    # EA-063: renewal at 60% of the validity here, always before two thirds.
    life = issued.not_after - issued.not_before
    assert issued.renew_at == issued.not_before + life * 0.6

    def reason(chain: bytes, *, key: object = key, at: datetime.datetime = now) -> str:
        with pytest.raises(CertificateError) as e:
            check_issued(want, key, chain, bundle, at, 0.6)  # type: ignore[arg-type]
        return e.value.reason

    assert reason(good.cert_pem, key=new_key()) == "WrongKey"
    extra = serving.issue("host-a", hosts=[ADDRESS, want.uri, "evil.example"], server=True, key=key)
    assert reason(extra.cert_pem) == "WrongNames"
    wrong_ip = serving.issue("host-a", hosts=["127.0.0.99", want.uri], server=True, key=key)
    assert reason(wrong_ip.cert_pem) == "WrongNames"
    stranger = other.issue("host-a", hosts=[ADDRESS, want.uri], server=True, key=key)
    assert reason(stranger.cert_pem) == "UnknownIssuer"  # EA-066
    by_client_ca = client.issue("host-a", hosts=[ADDRESS, want.uri], server=True, key=key)
    assert reason(by_client_ca.cert_pem) == "UnknownIssuer"
    assert reason(good.cert_pem, at=issued.not_after + timedelta(seconds=1)) == "NotValidNow"
    assert reason(b"not a certificate") == "NotPEM"


@pytest.mark.req("EA-063")
def test_renewal_point_is_between_55_and_65_percent_and_not_before_a_minute() -> None:
    serving = CertificateAuthority.create("serving")
    want = wants("host-a", TRUST_DOMAIN, ADDRESS)[EXEC_SERVING]
    key = new_key()
    now = datetime.datetime.now(UTC)
    long = serving.issue("host-a", hosts=[ADDRESS, want.uri], server=True, key=key)
    bundle = _bundle(serving, serving, serving)
    for fraction in (certs.RENEW_FROM, certs.RENEW_TO):
        issued = check_issued(want, key, long.cert_pem, bundle, now, fraction)
        life = issued.not_after - issued.not_before
        assert issued.renew_at < issued.not_before + life * 2 / 3
    short = serving.issue(
        "host-a", hosts=[ADDRESS, want.uri], server=True, key=key, validity=timedelta(seconds=30)
    )
    # However small the fraction of a short life, never sooner than a minute after issue.
    issued = check_issued(want, key, short.cert_pem, bundle, now, 0.001)
    assert (issued.not_after - issued.not_before) * 0.001 < certs.MIN_RENEW_AFTER
    assert issued.renew_at == issued.not_before + certs.MIN_RENEW_AFTER


@pytest.mark.req("EA-125")
def test_an_existing_open_cert_folder_is_narrowed_to_its_owner(tmp_path: Path) -> None:
    folder = tmp_path / "flintlockd"
    folder.mkdir()
    os.chmod(folder, 0o755)
    assert CertDir(folder).write_client_ca("ca pem")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.req("EA-129")
def test_a_renewal_installed_while_grpc_fetches_the_serving_config_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving, made deterministic: the exec serving certificate is renewed (on the
    loop) exactly between gRPC's thread reading the pending configuration and recording that it
    took it. The renewal must reach gRPC at its next ask."""
    monkeypatch.setattr(
        certs.grpc, "ssl_server_certificate_configuration", lambda pairs: ("config", pairs[0][1])
    )
    ca = CertificateAuthority.create("exec-serving")
    want = wants("host-a", TRUST_DOMAIN, ADDRESS)[EXEC_SERVING]

    def issued() -> certs.Issued:
        key = new_key()
        pair = ca.issue("host-a", hosts=[ADDRESS, want.uri], server=True, key=key)
        return certs.Issued(key, pair.cert_pem, pair.cert, 0.6)

    renewed = issued()

    class Interleaved(AgentCertificates):
        armed = False

        def __getattribute__(self, name: str) -> Any:
            value = super().__getattribute__(name)
            if name.startswith("_server") and type(self).armed:
                type(self).armed = False
                self._install(EXEC_SERVING, renewed)  # the loop, between read and write
            return value

    agent = Interleaved(
        None,  # type: ignore[arg-type]  # no request is made here
        node="host-a",
        trust_domain=TRUST_DOMAIN,
        address=ADDRESS,
        namespace="ns",
        cert_dir=tmp_path,
    )
    agent._install(EXEC_SERVING, issued())
    assert agent._fetch_server_config() is not None  # the first one, taken
    assert agent._fetch_server_config() is None  # nothing new

    Interleaved.armed = True
    agent._fetch_server_config()
    assert not Interleaved.armed, "the fetch read no pending configuration"
    assert agent.current[EXEC_SERVING] is renewed  # what /readyz and the metric report
    given = [agent._fetch_server_config() for _ in range(2)]
    assert ("config", renewed.chain_pem) in given, "the renewal never reached gRPC"


# -- against the cluster ----------------------------------------------------------------------


def _agent_certs(
    c: Cluster, kube: KubeClient, node: str, cert_dir: Path, **kw: object
) -> AgentCertificates:
    return new_agent_certificates(c, kube, node, ADDRESS, cert_dir, **kw)


async def _requests_for(c: Cluster, node: str) -> list[dict[str, Any]]:
    found = await c.kube.list(CERTIFICATE_SIGNING_REQUESTS)
    mine = [o for o in found if o["metadata"]["name"].startswith(f"exec-agent-{node}-")]
    c.made_csrs.extend(o["metadata"]["name"] for o in mine)
    return mine


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    uris = ext.get_values_for_type(x509.UniformResourceIdentifier)
    return uris, [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def _served_serial(port: int, ca_pem: bytes, *, verify: bool = True) -> int:
    """The serial number of the certificate a TLS server on ADDRESS:port presents, verified
    against `ca_pem`."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    context.check_hostname = False  # the IP SAN is checked by check_issued
    if not verify:  # a certificate from the test's future: ssl checks validity by the real time
        context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((ADDRESS, port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


@pytest.mark.controlplane
@pytest.mark.req(
    "EA-060", "EA-061", "EA-064", "EA-065", "EA-066", "EA-068", "EA-126", "EA-127", "CT-101"
)
async def test_agent_obtains_its_serving_certificates_by_csr_and_signs_its_client_one(
    csr_cluster: Cluster, tmp_path: Path
) -> None:
    c = csr_cluster
    node = await c.node("certs", ADDRESS)
    cert_dir = tmp_path / "flintlockd"
    async with running(c), agent_certificates(c, node, ADDRESS, cert_dir) as agent:
        bundle = agent.ca_bundle
        current = agent.current

    requests = await _requests_for(c, node)
    assert sorted(str(o["spec"]["signerName"]) for o in requests) == sorted(
        [names.FLINTLOCKD_SERVING_SIGNER, names.EXEC_AGENT_SERVING_SIGNER]
    )  # EA-126: no flintlockd-client request
    for obj in requests:
        # EA-060: only a request left the Host: no private key in what was sent.
        sent = base64.b64decode(str(obj["spec"]["request"]))
        assert b"PRIVATE KEY" not in sent
        x509.load_pem_x509_csr(sent)

    agent_id = names.spiffe_exec_agent_id(TRUST_DOMAIN, node)
    fl = current[FLINTLOCKD_SERVING].cert
    assert _sans(fl) == ([names.spiffe_host_id(TRUST_DOMAIN, node)], [ADDRESS])  # EA-061
    assert _sans(current[CLIENT].cert) == ([agent_id], [])  # EA-126
    assert _sans(current[EXEC_SERVING].cert) == ([agent_id], [ADDRESS])  # EA-068
    serving_ca = x509.load_pem_x509_certificate(bundle[names.SERVING_CA_BUNDLE_KEY].encode())
    client_ca = x509.load_pem_x509_certificate(bundle[names.CLIENT_CA_BUNDLE_KEY].encode())
    exec_ca = x509.load_pem_x509_certificate(
        bundle[names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY].encode()
    )
    host_ca = x509.load_pem_x509_certificate((cert_dir / names.HOST_CA_CERT_FILE).read_bytes())
    fl.verify_directly_issued_by(serving_ca)  # EA-066
    current[EXEC_SERVING].cert.verify_directly_issued_by(exec_ca)  # EA-127, CT-101
    current[CLIENT].cert.verify_directly_issued_by(host_ca)  # EA-126
    for cert, wrong in (
        (current[EXEC_SERVING].cert, serving_ca),
        (current[CLIENT].cert, client_ca),
    ):
        with pytest.raises((ValueError, InvalidSignature)):
            cert.verify_directly_issued_by(wrong)
    assert host_ca.subject.rfc4514_string() == f"CN=exec-agent host CA {node}"

    # EA-064: flintlockd's three files and the Host CA's, the keys owner-only; EA-065: no
    # other key on disk.
    assert sorted(p.name for p in cert_dir.iterdir()) == sorted(
        [
            names.TLS_CERT_FILE,
            names.TLS_KEY_FILE,
            names.CLIENT_CA_BUNDLE_KEY,
            names.HOST_CA_CERT_FILE,
            names.HOST_CA_KEY_FILE,
        ]
    )
    key_file = cert_dir / names.TLS_KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((cert_dir / names.HOST_CA_KEY_FILE).stat().st_mode) == 0o600
    assert (cert_dir / names.TLS_CERT_FILE).read_bytes() == current[FLINTLOCKD_SERVING].chain_pem
    assert key_file.read_bytes() == current[FLINTLOCKD_SERVING].key_pem
    # EA-126: flintlockd trusts battery's client CA and this Host's CA, nothing else.
    trusted = x509.load_pem_x509_certificates((cert_dir / names.CLIENT_CA_BUNDLE_KEY).read_bytes())
    assert trusted == [client_ca, host_ca]
    assert not list(tmp_path.glob("**/.*.tmp"))


@pytest.mark.controlplane
@pytest.mark.req("EA-063")
async def test_certificates_are_renewed_before_two_thirds_of_their_life(
    csr_cluster: Cluster, tmp_path: Path
) -> None:
    c = csr_cluster
    node = await c.node("renew", ADDRESS)
    clock = FakeClock()
    client_renewals = 0

    def on_client() -> None:
        nonlocal client_renewals
        client_renewals += 1

    # One clock for the signer and the agent: certificates issued after the clock moved begin
    # then, as they would have had the time really passed.
    async with running(c, clock=clock), c.client_as(node) as kube:
        agent = _agent_certs(
            c,
            kube,
            node,
            tmp_path / "fl",
            clock=clock,
            on_client_renewed=on_client,
            duration=timedelta(hours=24),  # the client certificate's life, as the others'
        )
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        try:
            await asyncio.wait_for(agent.start(), 60)
            client_renewals = 0  # the first install counts too; count renewals from here
            port = server.add_secure_port(f"{ADDRESS}:0", agent.server_credentials())
            await server.start()
            serving_ca = agent.ca_bundle[names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY].encode()
            first = {kind: issued for kind, issued in agent.current.items()}
            assert _served_serial(port, serving_ca) == first[EXEC_SERVING].cert.serial_number
            life = first[CLIENT].not_after - first[CLIENT].not_before
            # Until 55% of the life nothing is renewed: every keeper still sleeps.
            await _until(lambda: clock.sleepers == 3)
            clock.set(first[CLIENT].not_before + life * 0.54)
            await asyncio.sleep(0)
            assert agent.renewals == 0 and clock.sleepers == 3
            # At two thirds every certificate has been replaced.
            clock.set(first[CLIENT].not_before + life * 2 / 3)
            await asyncio.wait_for(agent.wait_renewals(3), 60)
            after = agent.current
            for kind in certs.KINDS:
                assert after[kind].cert.serial_number != first[kind].cert.serial_number, kind
                assert after[kind].key_pem != first[kind].key_pem, kind  # a new key each time
            assert client_renewals == 1
            # New handshakes get the new serving certificate; flintlockd's file is the new one.
            served = _served_serial(port, serving_ca, verify=False)
            assert served == after[EXEC_SERVING].cert.serial_number
            fl_file = (tmp_path / "fl" / names.TLS_CERT_FILE).read_bytes()
            assert fl_file == after[FLINTLOCKD_SERVING].chain_pem
        finally:
            await server.stop(0)
            await agent.aclose()
    assert len(await _requests_for(c, node)) == 4  # two serving certificates, twice


async def _until(predicate: object, timeout: float = 10.0) -> None:
    """Yield to the loop until `predicate()` holds (other tasks reaching a known wait)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.mark.controlplane
@pytest.mark.req("EA-064", "EA-126")
async def test_a_valid_flintlockd_certificate_and_the_host_ca_are_kept_at_restart(
    csr_cluster: Cluster, tmp_path: Path
) -> None:
    c = csr_cluster
    node = await c.node("restart", ADDRESS)
    cert_dir = tmp_path / "fl"
    async with running(c), c.client_as(node) as kube:
        first = _agent_certs(c, kube, node, cert_dir)
        await asyncio.wait_for(first.start(), 60)
        await first.aclose()
        kept = first.current[FLINTLOCKD_SERVING].cert.serial_number
        client_cas = (cert_dir / names.CLIENT_CA_BUNDLE_KEY).stat()
        host_ca = x509.load_pem_x509_certificate((cert_dir / names.HOST_CA_CERT_FILE).read_bytes())
        again = _agent_certs(c, kube, node, cert_dir)
        await asyncio.wait_for(again.start(), 60)
        await again.aclose()
    assert again.current[FLINTLOCKD_SERVING].cert.serial_number == kept
    assert again.current[CLIENT].cert.serial_number != first.current[CLIENT].cert.serial_number
    # The Host CA and flintlockd's client CAs stay as they were: flintlockd is not restarted.
    again.current[CLIENT].cert.verify_directly_issued_by(host_ca)
    after = (cert_dir / names.CLIENT_CA_BUNDLE_KEY).stat()
    assert (after.st_ino, after.st_mtime_ns) == (client_cas.st_ino, client_cas.st_mtime_ns)
    signers = [str(o["spec"]["signerName"]) for o in await _requests_for(c, node)]
    assert signers.count(names.FLINTLOCKD_SERVING_SIGNER) == 1
    assert signers.count(names.FLINTLOCKD_CLIENT_SIGNER) == 0


@pytest.mark.controlplane
@pytest.mark.req("EA-060", "EA-063")
async def test_a_denied_request_is_asked_again(csr_cluster: Cluster, tmp_path: Path) -> None:
    c = csr_cluster
    node = await c.node("denied", ADDRESS)
    async with c.client_as(node) as kube:
        agent = _agent_certs(c, kube, node, tmp_path / "fl", retry_max=1.0)
        # No approver yet: the bundle is published by hand so the agent gets to its requests.
        await _publish_bundle(c)
        starting = asyncio.create_task(agent.start())
        try:
            denied = await _first_request(c, node, names.EXEC_AGENT_SERVING_SIGNER)
            await c.set_condition(denied, CSRCondition.DENIED, "ByHand")
            async with running(c):
                await asyncio.wait_for(starting, 60)
        finally:
            starting.cancel()
            await agent.aclose()
    signers = [str(o["spec"]["signerName"]) for o in await _requests_for(c, node)]
    assert signers.count(names.EXEC_AGENT_SERVING_SIGNER) == 2
    assert agent.current[EXEC_SERVING].cert is not None


async def _publish_bundle(c: Cluster) -> None:
    from batteryop.csr_approver.publish import bundle, publish

    await publish(
        c.kube,
        c.namespace,
        names.CA_BUNDLE_CONFIG_MAP,
        bundle(c.serving_ca.cert_pem, c.client_ca.cert_pem, c.exec_serving_ca.cert_pem),
    )


async def _first_request(c: Cluster, node: str, signer: str) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while loop.time() < deadline:
        for obj in await _requests_for(c, node):
            if obj["spec"]["signerName"] == signer:
                return str(obj["metadata"]["name"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no request for {signer}")


@pytest.mark.controlplane
@pytest.mark.req("EA-064", "EA-126")
async def test_a_new_client_ca_is_written_to_the_host(csr_cluster: Cluster, tmp_path: Path) -> None:
    c = csr_cluster
    node = await c.node("newca", ADDRESS)
    cert_dir = tmp_path / "fl"
    async with running(c) as approver, c.client_as(node) as kube:
        agent = _agent_certs(c, kube, node, cert_dir)
        try:
            await asyncio.wait_for(agent.start(), 60)
            new_ca = CertificateAuthority.create("client-ca-2")
            secret = tls_secret(approver.config.client_ca_secret, new_ca)
            await c.kube.replace(SECRETS, secret["metadata"]["name"], secret, c.namespace)
            path = cert_dir / names.CLIENT_CA_BUNDLE_KEY
            host_ca = (cert_dir / names.HOST_CA_CERT_FILE).read_bytes()
            await _until(lambda: path.read_bytes() == new_ca.cert_pem + host_ca, timeout=30)
        finally:
            await agent.aclose()


@contextlib.asynccontextmanager
async def _denying(c: Cluster, node: str) -> AsyncIterator[list[str]]:
    """Deny, as an admin would, every request of `node` as it appears (no approver runs)."""
    seen: asyncio.Queue[str] = asyncio.Queue()
    denied: list[str] = []

    def saw(obj: dict[str, Any]) -> None:
        name = str(obj["metadata"]["name"])
        if name.startswith(f"exec-agent-{node}-") and not (obj.get("status") or {}).get(
            "conditions"
        ):
            seen.put_nowait(name)

    def listed(items: list[dict[str, Any]]) -> None:
        for obj in items:
            saw(obj)

    async def deny() -> None:
        while True:
            name = await seen.get()
            if name not in denied:
                denied.append(name)
                c.made_csrs.append(name)
                await c.set_condition(name, CSRCondition.DENIED, "ByHand")

    helpers = Supervisor()
    helpers.start(
        "watch",
        lambda: list_watch(
            c.kube,
            CERTIFICATE_SIGNING_REQUESTS,
            on_list=listed,
            on_event=lambda _kind, obj: saw(obj),
        ),
    )
    helpers.start("deny", deny)
    try:
        yield denied
    finally:
        await helpers.stop()


@pytest.mark.controlplane
@pytest.mark.req("EA-063", "EA-103", "EA-104", "DP-107")
async def test_a_denied_renewal_is_logged_retried_with_backoff_and_in_readyz_before_expiry(
    csr_cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    c = csr_cluster
    node = await c.node("refused", ADDRESS)
    clock = FakeClock()
    sleeps = Sleeps()
    registry = CollectorRegistry()
    gauge = "battery_operator_exec_agent_certificate_expiry_seconds"
    async with c.client_as(node) as kube:
        agent = _agent_certs(
            c,
            kube,
            node,
            tmp_path / "fl",
            clock=clock,
            supervisor=Supervisor(sleep=sleeps),
            duration=timedelta(hours=24),  # the client certificate's life, as the others'
        )
        AgentMetrics(registry).follow_certificates(agent)
        health = HealthServer("127.0.0.1", 0, checks=agent.checks())

        async def readiness() -> dict[str, CheckResult]:
            return {r.name: r for r in await health.readiness()}

        try:
            async with running(c, clock=clock):
                await asyncio.wait_for(agent.start(), 60)
            assert all(r.ok for r in (await readiness()).values())
            first = agent.current
            life = first[EXEC_SERVING].not_after - first[EXEC_SERVING].not_before
            left = registry.get_sample_value(gauge, {"certificate": EXEC_SERVING})
            assert left == (first[EXEC_SERVING].not_after - clock.now()).total_seconds()
            await _until(lambda: clock.sleepers == 3)
            async with _denying(c, node) as denied:
                # Past every renewal point: each renewal is asked for, denied, and fails.
                # The client certificate is signed here (EA-126): renewed, never denied.
                clock.set(first[EXEC_SERVING].not_before + life * 2 / 3)
                waits = [await sleeps.next(timeout=60) for _ in SIGNED_BY_CSR]
                assert sleeps.delays == [1.0, 1.0]
                down = agent.supervisor.down()
                assert sorted(down) == sorted(renew_task(kind) for kind in SIGNED_BY_CSR)
                assert "Denied/ByHand" in down[renew_task(EXEC_SERVING)]
                failure = next(
                    r
                    for r in caplog.records
                    if r.getMessage().startswith(f"Task {renew_task(EXEC_SERVING)} failed")
                )
                assert failure.levelno == logging.ERROR
                assert failure.exc_info is not None
                assert isinstance(failure.exc_info[1], CertificateError)
                ready = await readiness()
                line = ready[renew_task(EXEC_SERVING)].line()
                assert line.startswith(f"[-]{renew_task(EXEC_SERVING)} failed: TaskDownError")
                assert "Denied/ByHand" in line
                assert ready[certificate_check(EXEC_SERVING)].ok  # a third of its life is left
                # Started again: asked again at once, denied again, and the wait doubles.
                for wait in waits:
                    wait.set()
                waits = [await sleeps.next(timeout=60) for _ in SIGNED_BY_CSR]
                assert sleeps.delays[2:] == [2.0, 2.0]
                assert len(denied) == 4
                # Within a fifth of its life of the end: not ready, naming the certificate.
                clock.set(first[EXEC_SERVING].not_after - life * 0.1)
                ready = await readiness()
                for kind in SIGNED_BY_CSR:
                    expiring = ready[certificate_check(kind)]
                    assert not expiring.ok
                    assert f"CertificateExpiringError: {kind} certificate expires at" in (
                        expiring.error or ""
                    )
                left = registry.get_sample_value(gauge, {"certificate": EXEC_SERVING})
                assert left == (life * 0.1).total_seconds()
                # Expired: still named, and the gauge goes negative.
                clock.set(first[EXEC_SERVING].not_after + timedelta(seconds=5))
                expired = (await readiness())[certificate_check(EXEC_SERVING)]
                assert "expired at" in (expired.error or "")
                assert registry.get_sample_value(gauge, {"certificate": EXEC_SERVING}) == -5.0
            # The signer answers again: the next attempts succeed and the agent is ready.
            async with running(c, clock=clock):
                for wait in waits:
                    wait.set()
                await asyncio.wait_for(agent.wait_renewals(3), 60)
                assert {n: r.line() for n, r in (await readiness()).items() if not r.ok} == {}
                renewed = agent.current[EXEC_SERVING].not_after - clock.now()
                assert registry.get_sample_value(gauge, {"certificate": EXEC_SERVING}) == (
                    renewed.total_seconds()
                )
                assert renewed > life / 2
        finally:
            await agent.aclose()


@pytest.mark.controlplane
@pytest.mark.req("EA-128", "EA-064")
async def test_an_older_agents_client_ca_file_is_rewritten_once_at_start(
    csr_cluster: Cluster, tmp_path: Path
) -> None:
    """The upgrade: an agent of before EA-126 left `client-ca.crt` as the cluster's client CA
    alone. The new agent keeps flintlockd's certificate but rewrites that file (flintlockd
    restarts once), to battery's client CA followed by the Host CA."""
    c = csr_cluster
    node = await c.node("upgrade", ADDRESS)
    cert_dir = tmp_path / "fl"
    path = cert_dir / names.CLIENT_CA_BUNDLE_KEY
    async with running(c), c.client_as(node) as kube:
        first = _agent_certs(c, kube, node, cert_dir)
        await asyncio.wait_for(first.start(), 60)
        await first.aclose()
        path.write_bytes(c.client_ca.cert_pem)  # what the older agent wrote
        again = _agent_certs(c, kube, node, cert_dir)
        await asyncio.wait_for(again.start(), 60)
        await again.aclose()
    kept = first.current[FLINTLOCKD_SERVING].cert.serial_number
    assert again.current[FLINTLOCKD_SERVING].cert.serial_number == kept
    host_ca = (cert_dir / names.HOST_CA_CERT_FILE).read_bytes()
    assert path.read_bytes() == c.client_ca.cert_pem + host_ca


@pytest.mark.controlplane
@pytest.mark.req("EA-127", "CT-101")
async def test_an_exec_serving_certificate_the_published_ca_did_not_sign_is_replaced_at_once(
    csr_cluster: Cluster, tmp_path: Path
) -> None:
    """The upgrade to a CA of the agents' own (and any later change of it): once the bundle
    publishes an exec-agent serving CA that did not sign the certificate in use, the agent asks
    for a new one at once, not at its renewal point (the clock does not move here)."""
    c = csr_cluster
    node = await c.node("newexecca", ADDRESS)
    clock = FakeClock()
    async with running(c, clock=clock) as approver, c.client_as(node) as kube:
        agent = _agent_certs(c, kube, node, tmp_path / "fl", clock=clock)
        try:
            await asyncio.wait_for(agent.start(), 60)
            before = agent.current
            new_ca = CertificateAuthority.create("exec-agent-serving-ca-2")
            secret = tls_secret(approver.config.exec_agent_serving_ca_secret, new_ca)
            await c.kube.replace(SECRETS, secret["metadata"]["name"], secret, c.namespace)
            await asyncio.wait_for(agent.wait_renewals(1), 30)
            after = agent.current
        finally:
            await agent.aclose()
    after[EXEC_SERVING].cert.verify_directly_issued_by(new_ca.pair.cert)
    assert agent.renewals == 1  # the exec serving certificate only
    for kind in (FLINTLOCKD_SERVING, CLIENT):
        assert after[kind].cert.serial_number == before[kind].cert.serial_number, kind
    assert clock.now() < before[EXEC_SERVING].renew_at  # not a renewal at its point
