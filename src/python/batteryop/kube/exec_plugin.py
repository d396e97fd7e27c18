"""kubeconfig `exec` credential plugins: how EKS, GKE, AKS and OIDC users log in (CC-112).

A kubeconfig user with an `exec` entry names a command (`aws eks get-token`, `gke-gcloud-auth-
plugin`, `kubelogin`, ...) that prints an `ExecCredential` on stdout. `ExecPlugin` runs it as
kubectl does (client-go's `plugin/pkg/client/auth/exec`):

- the command (a bare name is looked up on PATH; one with a slash is relative to the kubeconfig
  file that names it) with its `args`, and our environment plus its `env`;
- `KUBERNETES_EXEC_INFO` set to an `ExecCredential` of the same `apiVersion`
  (`client.authentication.k8s.io/v1` or `v1beta1`) whose spec says whether the plugin may
  prompt (stdin is a terminal and `interactiveMode` is not `Never`), and, with
  `provideClusterInfo`, the cluster's server and CA;
- its stdout parsed as an `ExecCredential` of that `apiVersion`: `status.token`, or
  `status.clientCertificateData` and `status.clientKeyData` (PEM), and an optional
  `status.expirationTimestamp`; its stderr goes to ours (prompts, warnings);
- the credential kept until its expiry (none: until the API server refuses it), run again
  after that, and at once after a 401 (`invalidate()`).

Every failure is a `KubeConfigError` naming the plugin, one line.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from batteryop.api.clock import SYSTEM_CLOCK, Clock
from batteryop.api.times import parse_time
from batteryop.kube.errors import KubeConfigError

API_VERSIONS: Final = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
"""The ExecCredential versions a plugin may ask for (v1alpha1 was removed in Kubernetes 1.24)."""

INTERACTIVE_MODES: Final = ("Never", "IfAvailable", "Always")

RUN_TIMEOUT: Final = 60.0
"""Seconds a plugin may take; one that asks for input on a terminal may take its time too."""


@dataclass(frozen=True)
class ExecCredential:
    """What a plugin answered: a bearer token or a client certificate, and until when."""

    token: str | None = field(default=None, repr=False)
    cert_data: bytes | None = None
    key_data: bytes | None = field(default=None, repr=False)
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class ExecPlugin:
    """One kubeconfig user's `exec` entry; `credential()` / `acredential()` run it when needed.

    `source` names the kubeconfig in errors; `base_dir` is the directory of the file that
    names the plugin; `cluster` the cluster entry (for `provideClusterInfo`).
    """

    def __init__(
        self,
        spec: Mapping[str, Any],
        *,
        source: str,
        base_dir: Path,
        cluster: Mapping[str, Any] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        timeout: float = RUN_TIMEOUT,
    ) -> None:
        self.source = source
        command = str(spec.get("command") or "")
        self.name = command or "(no command)"
        if not command:
            raise self._error("the exec entry names no command")
        self.api_version = str(spec.get("apiVersion") or "")
        if self.api_version not in API_VERSIONS:
            raise self._error(
                f"apiVersion {self.api_version or '(none)'!r} is not one of {', '.join(API_VERSIONS)}"
            )
        self.mode = str(spec.get("interactiveMode") or "IfAvailable")
        if self.mode not in INTERACTIVE_MODES:
            raise self._error(f"interactiveMode {self.mode!r} is not one of {INTERACTIVE_MODES}")
        if self.api_version.endswith("/v1") and not spec.get("interactiveMode"):
            raise self._error("interactiveMode is required by client.authentication.k8s.io/v1")
        # kubectl: a command with a path separator is relative to the kubeconfig's directory.
        if os.sep in command and not Path(command).is_absolute():
            command = str(base_dir / command)
        self.command = command
        self.args = [str(a) for a in spec.get("args") or []]
        self.env = {
            str(e["name"]): str(e.get("value", ""))
            for e in spec.get("env") or []
            if isinstance(e, Mapping) and e.get("name")
        }
        self.install_hint = str(spec.get("installHint") or "").strip()
        self.cluster = dict(cluster or {}) if spec.get("provideClusterInfo") else None
        self._clock = clock
        self._timeout = timeout
        self._cached: ExecCredential | None = None
        self._lock = threading.Lock()  # one run at a time, from any thread or loop

    def __repr__(self) -> str:
        return f"ExecPlugin({self.name!r}, {self.api_version})"

    # -- the credential ----------------------------------------------------------------------

    def cached(self) -> ExecCredential | None:
        """The kept credential if it has not expired."""
        cred = self._cached
        return cred if cred is not None and not cred.expired(self._clock.now()) else None

    def invalidate(self, used: ExecCredential | None = None) -> None:
        """Forget the kept credential (the API server refused it: 401); with `used`, only if
        that is still the kept one (a newer one from a concurrent refresh stays)."""
        if used is None or self._cached is used:
            self._cached = None

    def credential(self) -> ExecCredential:
        """The kept credential, or a new one from running the plugin (blocking)."""
        with self._lock:
            cred = self.cached()
            if cred is None:
                cred = self._parse(*self._run_blocking())
                self._cached = cred
            return cred

    async def acredential(self) -> ExecCredential:
        """`credential()` without blocking the event loop while the plugin runs."""
        cred = self.cached()
        if cred is not None:
            return cred
        return await asyncio.to_thread(self.credential)

    # -- running it ----------------------------------------------------------------------------

    def _interactive(self) -> bool:
        tty = sys.stdin is not None and sys.stdin.isatty()
        if self.mode == "Always" and not tty:
            raise self._error("interactiveMode is Always but standard input is not a terminal")
        return tty and self.mode != "Never"

    def _exec_info(self, interactive: bool) -> str:
        spec: dict[str, Any] = {"interactive": interactive}
        if self.cluster is not None:
            info: dict[str, Any] = {"server": str(self.cluster.get("server") or "")}
            ca = self.cluster.get("certificate-authority-data")
            if ca:
                info["certificate-authority-data"] = str(ca)
            if self.cluster.get("insecure-skip-tls-verify"):
                info["insecure-skip-tls-verify"] = True
            if self.cluster.get("tls-server-name"):
                info["tls-server-name"] = str(self.cluster["tls-server-name"])
            if (self.cluster.get("extensions") or []) and isinstance(
                self.cluster["extensions"], list
            ):
                for ext in self.cluster["extensions"]:
                    if (
                        isinstance(ext, Mapping)
                        and ext.get("name") == "client.authentication.k8s.io/exec"
                    ):
                        info["config"] = ext.get("extension")
            spec["cluster"] = info
        return json.dumps({"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec})

    def _run_blocking(self) -> tuple[int, bytes]:
        interactive = self._interactive()
        env = {**os.environ, **self.env, "KUBERNETES_EXEC_INFO": self._exec_info(interactive)}
        program = (
            self.command
            if os.sep in self.command
            else shutil.which(self.command, path=env.get("PATH"))
        )
        if program is None:
            raise self._error("not found on PATH" + self._hint())
        try:
            with _signals_unblocked():
                process = subprocess.Popen(
                    [program, *self.args],
                    stdin=None if interactive else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=None,  # the plugin's own messages reach the user
                    env=env,
                )
        except FileNotFoundError:
            raise self._error("not found" + self._hint()) from None
        except PermissionError as e:
            raise self._error(f"cannot be run: {e.strerror}") from None
        except OSError as e:
            raise self._error(f"cannot be run: {e}") from None
        with process:
            try:
                out, _ = process.communicate(timeout=self._timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                raise self._error(f"gave no answer within {self._timeout:g}s") from None
            except BaseException:  # an interrupt, say: the plugin does not outlive the wait
                process.kill()
                raise
        return process.returncode, out

    def _parse(self, code: int, out: bytes) -> ExecCredential:
        if code != 0:
            raise self._error(f"exited with code {code}")
        try:
            answer = json.loads(out)
        except ValueError:
            raise self._error("did not print an ExecCredential (not JSON)") from None
        if not isinstance(answer, Mapping) or answer.get("kind") != "ExecCredential":
            raise self._error("did not print an ExecCredential")
        if answer.get("apiVersion") != self.api_version:
            raise self._error(
                f"answered apiVersion {answer.get('apiVersion')!r}, asked for {self.api_version!r}"
            )
        status = answer.get("status")
        if not isinstance(status, Mapping):
            raise self._error("its ExecCredential has no status")
        token = str(status.get("token") or "") or None
        cert = str(status.get("clientCertificateData") or "")
        key = str(status.get("clientKeyData") or "")
        if bool(cert) != bool(key):
            raise self._error(
                "its ExecCredential has a client certificate without its key, or back"
            )
        if token is None and not cert:
            raise self._error("its ExecCredential has neither a token nor a client certificate")
        expires_at = None
        stamp = status.get("expirationTimestamp")
        if stamp:
            try:
                expires_at = parse_time(str(stamp))
            except ValueError:
                raise self._error(f"expirationTimestamp {stamp!r} is not a time") from None
        return ExecCredential(
            token=token,
            cert_data=_pem(cert),
            key_data=_pem(key),
            expires_at=expires_at,
        )

    def _hint(self) -> str:
        return f" ({self.install_hint.splitlines()[0]})" if self.install_hint else ""

    def _error(self, problem: str) -> KubeConfigError:
        return KubeConfigError(self.source, f"exec plugin {self.name!r}: {problem}")


def _pem(data: str) -> bytes | None:
    """PEM as the plugin gave it (client-go takes PEM; base64 of PEM is taken too)."""
    if not data:
        return None
    if "-----BEGIN" in data:
        return data.encode()
    try:
        decoded = base64.b64decode(data, validate=True)
    except ValueError:
        return data.encode()
    return decoded if b"-----BEGIN" in decoded else data.encode()


@contextlib.contextmanager
def _signals_unblocked() -> Iterator[None]:
    """Unblock every signal on this thread for the block: a process started in it begins with
    no signal blocked, as one started by a shell or by kubectl does.

    A child inherits the signal mask of the thread that forks it, and the blocking client runs
    the plugin on a thread that blocks SIGINT and SIGTERM (`batteryop.client._threads`); left
    so, an interactive login would not stop at Ctrl-C. While the block runs (the fork and exec,
    a few milliseconds) this thread may take a signal meant for the process; Python then runs
    its handler once the main thread next runs, at the latest when the plugin is done."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_SETMASK, ())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
