"""The agent's keys and certificates: made on the Host, signed by CSR or by the Host's own CA,
renewed before they age.

Three certificates, each for an ECDSA P-256 key the agent makes itself (EA-060):

| certificate                     | signed by                                | names                              | key       |
|---------------------------------|------------------------------------------|------------------------------------|-----------|
| flintlockd's serving (EA-061)   | `flintlockd-serving` (serving CA)        | Host address, SPIFFE host ID       | Host file |
| the agent's client (EA-126)     | the Host's own client CA, here           | SPIFFE exec-agent ID               | memory    |
| the exec API's serving (EA-068) | `exec-agent-serving` (its own CA, CT-101) | Host address, SPIFFE exec-agent ID | memory    |

The two serving certificates come by CSR: only the certificate request leaves the process. The
client certificate never leaves the Host at all (EA-126): the agent keeps a client CA of its
Host (`HostCA`: a P-256 key made here, `host-client-ca.key` mode 0600 beside flintlockd's files,
and a self-signed CA certificate naming the Node, ten years, re-issued for the same key once
less than a third of it is left), signs its client certificate with it in memory, and writes
flintlockd's `client-ca.crt` as battery's client CA (from the CA bundle ConfigMap) followed by
that Host CA, and nothing else. So flintlockd trusts battery and its own Host's agent, and an
agent's key taken from one Host opens no other Host's flintlockd; the cluster signs no
`flintlockd-client` request (CT-102). The key and CA stay across agent restarts, so a restart
leaves `client-ca.crt` as it is and flintlockd running; an agent started over a `client-ca.crt`
of an older agent (the cluster's client CA alone) rewrites it once, restarting flintlockd.

flintlockd's key and files go to the Host's `--flintlockd-cert-dir` (`tls.key` mode 0600, then
`client-ca.crt`, then `tls.crt` last, each replaced atomically: EA-064); the other two keys never
leave memory (EA-065). That folder is made 0700 (narrowed if it exists, refused if it is a
symlink or another user's) and each file is written through a temporary file of a random name
created with `O_EXCL|O_NOFOLLOW` (EA-125, `batteryop.tls.private_dir` and `write_atomic`).

One request: a CertificateSigningRequest (`generateName: exec-agent-<node>-`, subject CN the
Node, the signer's usages exactly), then a read of that one object until the signer has
answered. A read and not a watch: the agent may only create and get CSRs (EA-067), and a watch
would need `list`/`watch` on every CSR of the cluster, which RBAC cannot narrow to one
generated name. Reads back off from 50 ms to 2 s; the approver answers in tens of
milliseconds. A denied or failed request, or a certificate that does not pass the checks
below, is logged with its reason and requested again, with backoff up to five minutes.

What comes back is used only when its first certificate is for our key, names exactly what was
asked (one URI, and the Host address for a serving certificate: nothing else), is within its
validity, and is signed by the CA published for it in the `flintlockd-ca` ConfigMap (EA-066:
`serving-ca.crt` for flintlockd's, `exec-agent-serving-ca.crt` for the exec API's, EA-127); the
client certificate passes the same checks against the Host CA.

Renewal (EA-063): each certificate is replaced at a random point between 55% and 65% of its
validity (never sooner than a minute after it was issued), well before two thirds. The CA
bundle ConfigMap is followed by a watch (one named object, which the agent's Role allows);
when battery's client CA changes, `client-ca.crt` is rewritten; when a serving certificate in
use is not signed by the CA now published for it (an install moving the exec API to its own
CA, or a CA replaced), it is requested again at once (EA-127). At start, a flintlockd
certificate already on the Host that passes every check and has not reached its renewal point
is kept, so restarting the agent does not restart flintlockd.

Supervision (DP-107, EA-103): the CA bundle watch, its follower (`client-ca`) and one renewal task
per certificate (`TASKS`) run under an `obs.supervisor.Supervisor`. A renewal is one attempt:
a request that is denied, fails, is refused by the API server or returns an unfit certificate
raises, and the supervisor logs it with its traceback, reports the task down in `/readyz`
(``[-]renew-client failed: TaskDownError: ...``) and tries again after its backoff (1 s doubling
to `retry_max`, five minutes by default). `checks()` adds one readiness check per certificate,
failing with `CertificateExpiringError` (naming it) once less than `EXPIRY_MARGIN` of its
validity is left, or it expired (EA-103); `seconds_left()` feeds the
`exec_agent_certificate_expiry_seconds` metric (EA-104).

The exec API's TLS follows renewals through gRPC's dynamic credentials: gRPC asks, on its own
threads, before handshakes; the loop publishes each new configuration with a generation number
in one store and the ask compares generations, so a renewal that lands during an ask is handed
out at the next one (EA-129).

Modules: this one holds `AgentCertificates` (obtain, install, renew, readiness) and the checks
on what a signer returns (`check_issued`); `host_ca` the Host CA and flintlockd's files
(`HostCA`, `CertDir`), `csr` one request to the cluster's signer (`CSRRequester`, `Want`),
`ca_bundle` the CA bundle ConfigMap (`CABundle`).

Time comes from a `batteryop.api.clock.Clock`, so tests move it instead of waiting for
certificates to age.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import ipaddress
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

from batteryop.api import names
from batteryop.api.backoff import Backoff
from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.exec_agent.ca_bundle import CABundle
from batteryop.exec_agent.csr import CertificateError, CSRRequester, Want
from batteryop.exec_agent.host_ca import CLOCK_SKEW, CertDir, HostCA, public_bytes
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import KubeError
from batteryop.obs.supervisor import Supervisor
from batteryop.tls import (
    cert_pem,
    key_pem,
    new_key,
)

log = logging.getLogger(__name__)

RENEW_FROM: Final = 0.55
RENEW_TO: Final = 0.65
"""A certificate is replaced at a random fraction of its validity in [RENEW_FROM, RENEW_TO]."""

MIN_RENEW_AFTER: Final = timedelta(minutes=1)
"""Never request a replacement sooner than this after the certificate's notBefore."""

MIN_DURATION: Final = timedelta(minutes=10)
"""The API server's smallest `expirationSeconds`."""

CLIENT_DURATION: Final = timedelta(hours=24)
"""Lifetime of the agent's flintlockd client certificate when `duration` is not given."""
HOST_CA_BUNDLE_KEY: Final = "host-ca"
"""Where `check_issued` finds the Host CA for the client certificate (not a ConfigMap key)."""

FLINTLOCKD_SERVING: Final = "flintlockd-serving"
CLIENT: Final = "client"
EXEC_SERVING: Final = "exec-serving"
KINDS: Final = (FLINTLOCKD_SERVING, CLIENT, EXEC_SERVING)

EXPIRY_MARGIN: Final = 0.2
"""Readiness fails once less than this fraction of a certificate's validity is left (EA-103):
renewal starts by 65%, so a fifth of the life is left for its retries before that."""

CA_BUNDLE_TASK: Final = "ca-bundle"
CLIENT_CA_TASK: Final = "client-ca"


def renew_task(kind: str) -> str:
    """The name of the supervised task renewing the certificate `kind`."""
    return f"renew-{kind}"


def certificate_check(kind: str) -> str:
    """The name of the readiness check on the validity left to the certificate `kind`."""
    return f"certificate-{kind}"


BUNDLE_KEYS: Final = (
    names.SERVING_CA_BUNDLE_KEY,
    names.CLIENT_CA_BUNDLE_KEY,
    names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY,
)
"""The CA bundle keys the agent needs before it asks for anything."""

TASKS: Final = (CA_BUNDLE_TASK, CLIENT_CA_TASK, *(renew_task(kind) for kind in KINDS))
"""The certificates' long-lived tasks, by the name the `Supervisor` and `/readyz` give them."""


class CertificateExpiringError(Exception):
    """A certificate in use is close to its expiry, or past it, and was not renewed."""

    def __init__(self, kind: str, not_after: datetime.datetime, left: timedelta) -> None:
        when = (
            f"expired at {not_after.isoformat()}"
            if left <= timedelta(0)
            else f"expires at {not_after.isoformat()} (in {int(left.total_seconds())}s)"
        )
        super().__init__(f"{kind} certificate {when} and was not renewed")
        self.kind = kind
        self.not_after = not_after
        self.left = left


class CertificateMissingError(Exception):
    """A certificate has not been obtained yet."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"{kind} certificate not obtained yet")
        self.kind = kind


def wants(node: str, trust_domain: str, address: str) -> dict[str, Want]:
    """The three certificates of the agent on `node`, whose Host address is `address`."""
    agent_id = names.spiffe_exec_agent_id(trust_domain, node)
    return {
        FLINTLOCKD_SERVING: Want(  # EA-061
            FLINTLOCKD_SERVING,
            names.FLINTLOCKD_SERVING_SIGNER,
            names.SERVING_USAGES,
            names.spiffe_host_id(trust_domain, node),
            address,
            names.SERVING_CA_BUNDLE_KEY,
        ),
        CLIENT: Want(  # EA-126: signed on the Host by its own CA, never by the cluster
            CLIENT,
            "",
            names.CLIENT_USAGES,
            agent_id,
            None,
            HOST_CA_BUNDLE_KEY,
        ),
        EXEC_SERVING: Want(  # EA-068
            EXEC_SERVING,
            names.EXEC_AGENT_SERVING_SIGNER,
            names.SERVING_USAGES,
            agent_id,
            address,
            names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY,  # CT-101, EA-127
        ),
    }


@dataclass(frozen=True)
class Issued:
    """A key and the chain a signer returned for it, checked."""

    key: ec.EllipticCurvePrivateKey
    chain_pem: bytes
    cert: x509.Certificate
    renew_fraction: float

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)

    @property
    def not_before(self) -> datetime.datetime:
        return self.cert.not_valid_before_utc

    @property
    def not_after(self) -> datetime.datetime:
        return self.cert.not_valid_after_utc

    @property
    def renew_at(self) -> datetime.datetime:
        """EA-063: a point in [55%, 65%] of the validity, at least a minute after issue."""
        life = self.not_after - self.not_before
        return self.not_before + max(life * self.renew_fraction, MIN_RENEW_AFTER)


def _load_cas(bundle_pem: str | None) -> list[x509.Certificate]:
    if not bundle_pem:
        return []
    try:
        return x509.load_pem_x509_certificates(bundle_pem.encode())
    except ValueError:
        return []


def signed_by(leaf: x509.Certificate, cas: list[x509.Certificate]) -> bool:
    """Whether one of `cas` signed `leaf` directly."""
    for ca in cas:
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def check_issued(
    want: Want,
    key: ec.EllipticCurvePrivateKey,
    chain_pem: bytes,
    ca_bundle: Mapping[str, str],
    now: datetime.datetime,
    renew_fraction: float,
) -> Issued:
    """`chain_pem` as an `Issued` when it is fit for `want` and `key`; CertificateError naming
    the first check it fails otherwise (EA-061, EA-066, EA-068, EA-126, EA-127)."""

    def refuse(reason: str, detail: str) -> CertificateError:
        return CertificateError(want.kind, reason, detail)

    try:
        chain = x509.load_pem_x509_certificates(chain_pem)
    except ValueError as e:
        raise refuse("NotPEM", f"the signer's answer is not PEM certificates ({e})") from None
    leaf = chain[0]
    if public_bytes(leaf.public_key()) != public_bytes(key.public_key()):
        raise refuse("WrongKey", "the certificate is not for the key this agent made")
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = x509.SubjectAlternativeName([])
    uris = sans.get_values_for_type(x509.UniformResourceIdentifier)
    ips = [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    others = len(list(sans)) - len(uris) - len(ips)
    want_ips = [] if want.ip is None else [str(ipaddress.ip_address(want.ip))]
    if uris != [want.uri] or ips != want_ips or others:
        raise refuse(
            "WrongNames",
            f"names URIs {uris} and addresses {ips} (and {others} other names); "
            f"asked for {[want.uri]} and {want_ips}",
        )
    if not leaf.not_valid_before_utc - CLOCK_SKEW <= now < leaf.not_valid_after_utc:
        raise refuse(
            "NotValidNow",
            f"valid from {leaf.not_valid_before_utc} to {leaf.not_valid_after_utc}, now {now}",
        )
    cas = _load_cas(ca_bundle.get(want.ca_key))
    if not cas:
        raise refuse("NoCA", f"the {names.CA_BUNDLE_CONFIG_MAP} ConfigMap has no {want.ca_key}")
    if signed_by(leaf, cas):
        return Issued(key, chain_pem, leaf, renew_fraction)
    raise refuse("UnknownIssuer", f"not signed by the CA published as {want.ca_key}")


class AgentCertificates:
    """Obtains, holds and renews the agent's three certificates.

        certs = AgentCertificates(kube, node=..., trust_domain=..., address=..., ...)
        await certs.start()      # every certificate in hand, flintlockd's files written,
                                 # the renewals running under `certs.supervisor`
        server_creds = certs.server_credentials()   # follows renewals
        creds = certs.client_credentials()          # current; on_client_renewed says when
        health_checks = certs.checks()              # tasks down, certificates near expiry
        await certs.aclose()     # stops the renewals

    `start` retries what fails (with backoff) rather than give up: an approver that is not
    running yet delays the agent, it does not crash it. A renewal that fails raises to the
    supervisor, which logs it, reports it and tries again (see the module docstring).
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        node: str,
        trust_domain: str,
        address: str,
        namespace: str,
        cert_dir: Path,
        ca_bundle_config_map: str = names.CA_BUNDLE_CONFIG_MAP,
        duration: timedelta | None = None,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
        on_client_renewed: Callable[[], None] | None = None,
        retry_max: float = 300.0,
        expiry_margin: float = EXPIRY_MARGIN,
        supervisor: Supervisor | None = None,
    ) -> None:
        self._node = node
        self._wants = wants(node, trust_domain, address)
        self._client_duration = duration or CLIENT_DURATION
        self._host_ca: HostCA | None = None
        self._renew_now = {kind: asyncio.Event() for kind in KINDS}
        """Set when a certificate must be replaced before its time (EA-127)."""
        self._requester = CSRRequester(kube, node, duration=duration)
        self._bundle = CABundle(kube, namespace, ca_bundle_config_map)
        self._dir = CertDir(cert_dir)
        self._clock = clock
        self._rng = rng or random.SystemRandom()
        self._on_client_renewed = on_client_renewed
        self._retry_max = retry_max
        self._expiry_margin = expiry_margin
        self.supervisor = supervisor or Supervisor(backoff_max=retry_max)
        """Runs `TASKS` (DP-107); its backoff is the renewals' retry."""
        for task in TASKS:
            self.supervisor.add(task)
        self._current: dict[str, Issued] = {}
        self._server_latest: tuple[Any, int] = (None, 0)
        """The exec API's newest TLS configuration and its generation; replaced whole, on the
        loop only (`_install`), so gRPC's threads read one consistent pair (EA-129)."""
        self._server_served = 0
        """The generation gRPC was last given; written on gRPC's threads only."""
        self._bundle_started = False
        self._renewing = False
        self.renewals = 0
        """Certificates replaced since start."""
        self._renewed = asyncio.Condition()

    @property
    def current(self) -> Mapping[str, Issued]:
        return dict(self._current)

    @property
    def ca_bundle(self) -> Mapping[str, str]:
        return dict(self._bundle.data)

    def _fraction(self) -> float:
        return self._rng.uniform(RENEW_FROM, RENEW_TO)

    async def start(self) -> None:
        """Follow the CA bundle and hold every certificate, reusing flintlockd's if it is fit;
        then renew each at its time and keep `client-ca.crt` current, until `aclose`."""
        if not self._bundle_started:
            self._bundle_started = True
            self.supervisor.start(CA_BUNDLE_TASK, self._bundle.run)
        await self._bundle.wait_for(lambda d: all(d.get(key) for key in BUNDLE_KEYS))
        self._host_ca, _ = self._dir.host_ca(self._node, self._clock.now())  # EA-126
        kept = self._reuse_flintlockd()
        if kept is not None:
            self._current[FLINTLOCKD_SERVING] = kept
            # EA-126: a client-ca.crt of an older agent (the cluster's client CA) is rewritten
            # here, once; one already right is left alone, so flintlockd is not restarted.
            if self._dir.write_client_ca(self._flintlockd_client_cas()):
                log.info(
                    "Rewrote flintlockd's client CAs", extra={"path": str(self._dir.client_ca)}
                )
            log.info("Kept flintlockd's certificate on the Host", extra={"until": kept.not_after})
        missing = [kind for kind in KINDS if kind not in self._current]
        issued = await asyncio.gather(*(self._obtain(kind) for kind in missing))
        for kind, one in zip(missing, issued, strict=True):
            self._install(kind, one)
        if not self._renewing:
            self._renewing = True
            for kind in KINDS:
                self.supervisor.start(renew_task(kind), functools.partial(self._keep, kind))
            self.supervisor.start(CLIENT_CA_TASK, self._follow_bundle)

    def _reuse_flintlockd(self) -> Issued | None:
        found = self._dir.read()
        if found is None:
            return None
        key, chain = found
        try:
            issued = check_issued(
                self._wants[FLINTLOCKD_SERVING],
                key,
                chain,
                self._bundle.data,
                self._clock.now(),
                self._fraction(),
            )
        except CertificateError as e:
            log.info("Replacing flintlockd's certificate on the Host: %s", e)
            return None
        return issued if self._clock.now() < issued.renew_at else None

    async def _obtain(self, kind: str) -> Issued:
        """`_request(kind)`, retried until it succeeds (at start, EA-060)."""
        backoff = Backoff(1.0, self._retry_max)
        while True:
            try:
                return await self._request(kind)
            except CertificateError as e:
                log.warning("Certificate not obtained, asking again: %s", e)
            except KubeError as e:
                log.warning("Certificate request for %s failed, retrying: %s", kind, e)
            await asyncio.sleep(backoff.next())

    def _flintlockd_client_cas(self) -> str:
        """flintlockd's `client-ca.crt` (EA-128): battery's client CA, from the CA bundle, and
        this Host's own CA; no other Host's, so no other Host's agent is let in."""
        assert self._host_ca is not None  # start() loads it first
        battery = self._bundle.data[names.CLIENT_CA_BUNDLE_KEY]
        return battery.rstrip("\n") + "\n" + self._host_ca.cert_pem.decode()

    async def _request(self, kind: str) -> Issued:
        """A new key and a checked certificate for it, in one request (the client certificate:
        signed here, EA-126); CertificateError or KubeError when it was refused or what came
        back is unfit."""
        want = self._wants[kind]
        key = new_key()  # EA-060: made here; only the request leaves
        now = self._clock.now()
        if kind == CLIENT:
            ca, changed = self._dir.host_ca(self._node, now)  # EA-126: its renewal rule
            self._host_ca = ca
            if changed and self._dir.write_client_ca(self._flintlockd_client_cas()):
                log.info("Host CA re-issued; rewrote %s", self._dir.client_ca)
            chain = ca.sign_client(key, self._node, want.uri, now, self._client_duration)
            bundle = {HOST_CA_BUNDLE_KEY: ca.cert_pem.decode()}
            return check_issued(want, key, chain, bundle, now, self._fraction())
        chain = await self._requester.request(want, key)
        return check_issued(
            want, key, chain, self._bundle.data, self._clock.now(), self._fraction()
        )

    def _install(self, kind: str, issued: Issued) -> None:
        self._current[kind] = issued
        log.info(
            "Certificate in use",
            extra={
                "certificate": kind,
                "serial": format(issued.cert.serial_number, "x"),
                "not_after": issued.not_after.isoformat(),
                "renew_at": issued.renew_at.isoformat(),
            },
        )
        if kind == FLINTLOCKD_SERVING:  # EA-064
            self._dir.write(issued.key_pem, issued.chain_pem, self._flintlockd_client_cas())
        elif kind == EXEC_SERVING:
            config = grpc.ssl_server_certificate_configuration([(issued.key_pem, issued.chain_pem)])
            self._server_latest = (config, self._server_latest[1] + 1)  # EA-129: one store
        elif self._on_client_renewed is not None:
            self._on_client_renewed()

    async def aclose(self) -> None:
        """Stop following the bundle and renewing."""
        await self.supervisor.stop()

    async def _keep(self, kind: str) -> None:
        """Renew `kind` at its time (EA-063), one request each time: a failure raises to the
        supervisor, which logs it, reports the task down and runs this again after its
        backoff; the renewal point has passed by then, so it asks again at once (DP-107)."""
        while True:
            await self._renewal_due(kind)
            self._install(kind, await self._request(kind))
            async with self._renewed:
                self.renewals += 1
                self._renewed.notify_all()

    async def _renewal_due(self, kind: str) -> None:
        """Return at `kind`'s renewal point (EA-063), or at once when it must be replaced sooner
        (EA-127: it is not signed by the CA now published for it)."""
        due = self._renew_now[kind]
        if not due.is_set():
            sleeper = asyncio.ensure_future(self._clock.sleep_until(self._current[kind].renew_at))
            waker = asyncio.ensure_future(due.wait())
            try:
                await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (sleeper, waker):
                    task.cancel()
                await asyncio.gather(sleeper, waker, return_exceptions=True)
        due.clear()

    async def wait_renewals(self, count: int) -> None:
        """Return once `count` certificates have been replaced since start."""
        async with self._renewed:
            await self._renewed.wait_for(lambda: self.renewals >= count)

    async def _follow_bundle(self) -> None:
        """At each change of the CA bundle: rewrite flintlockd's client CAs if battery's client
        CA changed (EA-064, EA-126), and replace at once a serving certificate that the CA now
        published for it did not sign (EA-127: a new exec-agent serving CA, say)."""
        seen = self._bundle.version
        while True:
            self._renew_unsigned()
            seen = await self._bundle.changed(seen)
            if self._bundle.data.get(names.CLIENT_CA_BUNDLE_KEY) and self._dir.write_client_ca(
                self._flintlockd_client_cas()
            ):
                log.info("Client CA changed; rewrote %s", self._dir.client_ca)

    def _renew_unsigned(self) -> None:
        for kind in (FLINTLOCKD_SERVING, EXEC_SERVING):
            issued = self._current.get(kind)
            cas = _load_cas(self._bundle.data.get(self._wants[kind].ca_key))
            if issued is not None and cas and not signed_by(issued.cert, cas):
                log.info(
                    "Certificate not signed by the CA published for it; replacing it now",
                    extra={"certificate": kind, "ca": self._wants[kind].ca_key},
                )
                self._renew_now[kind].set()  # EA-127

    # -- readiness and metrics -------------------------------------------------------------

    def seconds_left(self) -> dict[str, float]:
        """Seconds until each certificate in use expires, negative once it has (EA-104)."""
        now = self._clock.now()
        return {kind: (i.not_after - now).total_seconds() for kind, i in self._current.items()}

    def check_validity(self, kind: str) -> bool:
        """True while `kind` has more than `expiry_margin` of its validity left; raises
        `CertificateExpiringError` naming it otherwise (EA-103)."""
        issued = self._current.get(kind)
        if issued is None:
            raise CertificateMissingError(kind)
        left = issued.not_after - self._clock.now()
        if left <= (issued.not_after - issued.not_before) * self._expiry_margin:
            raise CertificateExpiringError(kind, issued.not_after, left)
        return True

    def checks(self) -> dict[str, Callable[[], bool]]:
        """Readiness checks: one per supervised task (down while it waits to run again) and
        one per certificate (`check_validity`), for `HealthServer` (DP-107, EA-103)."""
        validity = {
            certificate_check(kind): functools.partial(self.check_validity, kind) for kind in KINDS
        }
        return {**self.supervisor.checks(), **validity}

    # -- what the agent's TLS uses ----------------------------------------------------------

    def client_credentials(self) -> grpc.ChannelCredentials:
        """Mutual TLS towards flintlockd: the agent's current client certificate, and the
        serving CA the approver publishes as the only root (EA-065, EA-066)."""
        issued = self._current[CLIENT]
        return grpc.ssl_channel_credentials(
            root_certificates=self._bundle.data[names.SERVING_CA_BUNDLE_KEY].encode(),
            private_key=issued.key_pem,
            certificate_chain=issued.chain_pem,
        )

    def server_credentials(self) -> grpc.ServerCredentials:
        """The exec API's TLS; each new handshake uses the newest serving certificate."""
        config, self._server_served = self._server_latest
        return grpc.dynamic_ssl_server_credentials(
            config, self._fetch_server_config, require_client_authentication=False
        )

    def _fetch_server_config(self) -> Any:
        """gRPC asks before handshakes, on its own threads: a configuration when it changed
        since the last ask, else None (keep the current one).

        EA-129: the loop replaces `_server_latest` in one store and this reads it in one load,
        then compares generations; a renewal installed at any point of this call is given out
        at the next ask at the latest, never lost (a swap to None could drop one)."""
        config, generation = self._server_latest
        if generation == self._server_served:
            return None
        self._server_served = generation
        return config

    def serving_pem(self, kind: str = EXEC_SERVING) -> bytes:
        return cert_pem(self._current[kind].cert)
