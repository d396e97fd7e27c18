"""A real Kubernetes control plane on loopback: etcd and kube-apiserver (TD-100: the versions
pinned in 3rdparty/go/controlplane, never a mock or envtest).

`ControlPlane.start()` runs the pinned binaries (see `gobuild`) on free
loopback ports with certificates made for this run only:

- one CA signs the apiserver's serving certificate and every client
  certificate; the admin identity is a client certificate in `system:masters`;
- a service-account signing key, so TokenRequest mints real tokens and
  TokenReview checks them with their audiences;
- `--authorization-mode=Node,RBAC`, so RBAC is enforced for every identity
  but the admin; ValidatingAdmissionPolicy is on (it is GA and on by default
  in v1.36) as are the default admission plugins;
- etcd on its own data directory, plain HTTP on 127.0.0.1 only.

It writes an admin kubeconfig and mints clients acting as named
ServiceAccounts with their real RBAC. `stop()` (also called by the context
manager, at interpreter exit, and implied by the kernel when the parent dies:
children get PR_SET_PDEATHSIG) kills both processes and removes every file.

Readiness is the one place that polls: nothing can be watched before the
server answers, so `/readyz` is asked every 50 ms until it says ok.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batteryop.testing.controlplane.gobuild import Binaries, ensure_binaries
from batteryop.testing.processes import file_tail, spawn_logged
from batteryop.tls import CertificateAuthority, KeyPair, new_key, public_key_pem, write_secret

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "batteryop-admin"
_READY_TIMEOUT = 60.0
PORT_ATTEMPTS = 3
"""Starts on fresh ports after etcd or the API server found its port taken."""


class ControlPlaneError(RuntimeError):
    """etcd or kube-apiserver did not start, or stopped unexpectedly."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LoggedProcess:
    """A child process and the file its output goes to."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, lines: int = 25) -> str:
        return file_tail(self.log, lines)


@dataclass
class ControlPlane:
    """A running etcd + kube-apiserver pair; use `start()`."""

    workdir: Path
    url: str
    ca: CertificateAuthority
    admin: KeyPair
    admin_kubeconfig: Path
    started_in: float = 0.0
    _procs: list[LoggedProcess] = field(default_factory=list)
    _owns_workdir: bool = True
    _log_dir: Path | None = None

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    def start(
        cls,
        *,
        workdir: Path | None = None,
        binaries: Binaries | None = None,
        extra_apiserver_flags: Sequence[str] = (),
        log_dir: Path | None = None,
        address: str = "127.0.0.1",
        serving_hosts: Sequence[str] = (),
        ca: CertificateAuthority | None = None,
    ) -> ControlPlane:
        """Start etcd and kube-apiserver; their logs go to `log_dir` (default: `workdir`).

        The API server listens on `address` (loopback unless a real node's Pods must reach it,
        see `testing.kubenode`); `serving_hosts` are added to its certificate; `ca` (default:
        a new one) signs it and authenticates clients."""
        started = time.monotonic()
        bins = binaries or ensure_binaries()
        owns = workdir is None
        wd = Path(tempfile.mkdtemp(prefix="batteryop-cp-")) if workdir is None else workdir
        wd.mkdir(parents=True, exist_ok=True)
        pki = wd / "pki"
        ca = ca or CertificateAuthority.create("batteryop-test-ca")
        (pki).mkdir(parents=True, exist_ok=True)
        (pki / "ca.crt").write_bytes(ca.cert_pem)
        hosts = ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc", address]
        serving = ca.issue(
            "kube-apiserver", hosts=list(dict.fromkeys([*hosts, *serving_hosts])), server=True
        )
        serving.write(pki, "apiserver")
        admin = ca.issue(ADMIN_USER, organizations=["system:masters"], client=True)
        sa_key = new_key()
        write_secret(pki / "sa.key", KeyPair(serving.cert, sa_key).key_pem)
        (pki / "sa.pub").write_bytes(public_key_pem(sa_key))

        # A free port is found by binding to port 0 and letting it go, so another process
        # on the machine (a parallel test's server) can take it before etcd or the API
        # server binds it. They then exit at once with "address already in use": start again
        # on other ports, a few times, before giving up.
        attempt = 1
        while (
            cp := cls._launch(
                wd,
                owns,
                ca,
                admin,
                bins,
                log_dir,
                extra_apiserver_flags,
                address,
                last=attempt == PORT_ATTEMPTS,
            )
        ) is None:
            shutil.rmtree(wd / "etcd", ignore_errors=True)
            attempt += 1
        cp.started_in = time.monotonic() - started
        return cp

    @classmethod
    def _launch(
        cls,
        wd: Path,
        owns: bool,
        ca: CertificateAuthority,
        admin: KeyPair,
        bins: Binaries,
        log_dir: Path | None,
        extra_apiserver_flags: Sequence[str],
        address: str,
        *,
        last: bool = False,
    ) -> ControlPlane | None:
        """Start both on fresh ports; None if one found its port taken (and `last` is false)."""
        pki = wd / "pki"
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port(address)
        url = f"https://{address}:{api_port}"
        cp = cls(wd, url, ca, admin, wd / "admin.kubeconfig", _owns_workdir=owns)
        cp._log_dir = log_dir or wd
        cp.write_kubeconfig(cp.admin_kubeconfig, client=admin)
        atexit.register(cp.stop)
        try:
            cp._spawn(
                "etcd",
                [
                    str(bins.etcd),
                    "--name=test",
                    f"--data-dir={wd / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-cluster=test=http://127.0.0.1:{peer_port}",
                    "--unsafe-no-fsync",  # throwaway data; fsync only slows tests
                    "--log-level=warn",
                ],
            )
            cp._spawn(
                "kube-apiserver",
                [
                    str(bins.kube_apiserver),
                    f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                    f"--bind-address={address}",
                    f"--advertise-address={address}",
                    f"--secure-port={api_port}",
                    f"--tls-cert-file={pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={pki / 'ca.crt'}",
                    f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    "--authorization-mode=Node,RBAC",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--endpoint-reconciler-type=none",
                    "--enable-priority-and-fairness=false",
                    "--profiling=false",
                    "--allow-privileged=true",
                    "--v=0",
                    *extra_apiserver_flags,
                ],
            )
            cp._wait_ready()
        except ControlPlaneError as e:
            if last or "address already in use" not in str(e):
                cp.stop()
                raise
            cp._owns_workdir = False  # the next attempt uses the same directory
            cp.stop()
            return None
        except BaseException:
            cp.stop()
            raise
        return cp

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self._log_dir or self.workdir) / f"{name}.log"
        popen = spawn_logged(argv, log)
        self._procs.append(LoggedProcess(name, popen, log))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT
        ctx = self.ssl_context()
        last = ""
        while time.monotonic() < deadline:
            for p in self._procs:
                if p.popen.poll() is not None:
                    raise ControlPlaneError(
                        f"{p.name} exited with {p.popen.returncode} while starting:\n{p.tail()}"
                    )
            try:
                status, body = self._get("/readyz", ctx)
                if status == 200:
                    return
                last = f"/readyz answered {status}: {body[-300:]}"
            except OSError as e:
                last = f"/readyz: {e}"
            time.sleep(0.05)
        logs = "\n".join(f"--- {p.name}\n{p.tail()}" for p in self._procs)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {_READY_TIMEOUT:.0f}s ({last})\n{logs}"
        )

    def stop(self) -> None:
        """Kill both processes and remove every file this control plane made."""
        for p in reversed(self._procs):
            if p.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.popen.terminate()
        for p in reversed(self._procs):
            try:
                p.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(timeout=5)
        self._procs.clear()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        """The running processes by name (etcd, kube-apiserver)."""
        return {p.name: p.popen.pid for p in self._procs}

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.popen.poll() is None for p in self._procs)

    # -- access --------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self.url.removeprefix("https://")

    def ssl_context(self, client: KeyPair | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        pair = client or self.admin
        with tempfile.TemporaryDirectory() as d:
            crt, key = pair.write(Path(d), "client")
            ctx.load_cert_chain(crt, key)
        return ctx

    def _get(self, path: str, ctx: ssl.SSLContext) -> tuple[int, str]:
        host, port = self.host.rsplit(":", 1)
        conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=2)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")
        finally:
            conn.close()

    def kubeconfig(
        self, *, client: KeyPair | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """A kubeconfig dict for a client certificate or a bearer token."""
        user: dict[str, str] = {}
        if token is not None:
            user["token"] = token
        else:
            pair = client or self.admin
            user["client-certificate-data"] = base64.b64encode(pair.cert_pem).decode()
            user["client-key-data"] = base64.b64encode(pair.key_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "batteryop-test",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(self.ca.cert_pem).decode(),
                    },
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [
                {"name": "batteryop-test", "context": {"cluster": "batteryop-test", "user": "user"}}
            ],
            "current-context": "batteryop-test",
        }

    def write_kubeconfig(
        self, path: Path, *, client: KeyPair | None = None, token: str | None = None
    ) -> Path:
        write_secret(
            path, json.dumps(self.kubeconfig(client=client, token=token), indent=2).encode()
        )
        return path

    def client_cert(self, user: str, groups: Sequence[str] = ()) -> KeyPair:
        """A client certificate for any user name and groups (authenticated by the CA)."""
        return self.ca.issue(user, organizations=groups, client=True)

    @contextlib.contextmanager
    def kubectl_env(self, kubeconfig: Path | None = None) -> Iterator[dict[str, str]]:
        """Environment variables that point kubectl at this control plane."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.admin_kubeconfig)
        yield env
