"""Where the Kubernetes API is and how to log in to it: `KubeConfig`.

`KubeConfig.load()` is what an entry point calls: in a Pod (KUBERNETES_SERVICE_HOST set) it is
`in_cluster()`, the ServiceAccount's projected token and CA; elsewhere `from_kubeconfig()`, the
file(s) named by $KUBECONFIG or ~/.kube/config. This package never imports kopf, so the
client wheel need not ship it.

A token file (`token_file`: the in-cluster token, or a kubeconfig's `tokenFile`) is read again
for every request, so a token the kubelet rotated is used as soon as it is written; a static
`token` is only used when there is no file.

Supported kubeconfig fields: `server`, `certificate-authority(-data)`,
`insecure-skip-tls-verify`, `client-certificate(-data)`, `client-key(-data)`, `token`,
`tokenFile`, and `exec` credential plugins (`batteryop.kube.exec_plugin`: EKS, GKE, AKS, OIDC
logins; CC-112); relative paths are relative to the file that names them. Auth providers and
basic auth are refused with `KubeConfigError` rather than silently ignored.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from batteryop.api._compat import UTC
from batteryop.kube.errors import KubeConfigError
from batteryop.kube.exec_plugin import ExecCredential, ExecPlugin
from batteryop.kube.tokens import token_payload

SERVICE_ACCOUNT_DIR: Final = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a Pod's ServiceAccount token, CA and namespace are mounted."""

DEFAULT_KUBECONFIG: Final = "~/.kube/config"
"""The kubeconfig read when $KUBECONFIG is not set."""


@dataclass(frozen=True)
class KubeConfig:
    """The API server's URL, the CA to trust, and the client's credentials.

    `ca_data`, `cert_data` and `key_data` are PEM. `token_file` wins over `token` and is read
    per request. `exec_plugin`, when set, gives the token or client certificate instead
    (kept until it expires). `insecure` turns off server certificate checks (never in
    production).
    """

    server: str
    ca_data: bytes | None
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    cert_data: bytes | None = None
    key_data: bytes | None = field(default=None, repr=False)
    insecure: bool = False
    exec_plugin: ExecPlugin | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.server.startswith(("https://", "http://")):
            raise KubeConfigError(self.server, "the server must be an http(s):// URL")
        if (self.cert_data is None) != (self.key_data is None):
            raise KubeConfigError(self.server, "a client certificate needs its key, and back")

    # -- credentials -------------------------------------------------------------------------

    def bearer_token(self) -> str | None:
        """The token to send now: the exec plugin's, the token file's current content, else
        `token`."""
        if self.exec_plugin is not None:
            return self.exec_plugin.credential().token
        if self.token_file:
            try:
                token = Path(self.token_file).read_text(encoding="utf-8").strip()
            except OSError as e:
                raise KubeConfigError(self.token_file, f"cannot read the token: {e}") from e
            if not token:
                raise KubeConfigError(self.token_file, "the token file is empty")
            if any(c in token for c in "\r\n"):
                raise KubeConfigError(self.token_file, "the token file holds more than one line")
            return token
        return self.token or None

    def ssl_context(self, credential: ExecCredential | None = None) -> ssl.SSLContext:
        """A TLS client context trusting `ca_data` (else the system CAs), with the client cert
        (an exec plugin's `credential`, when it carries one, instead of `cert_data`).

        `ssl` loads a certificate chain only from files (`_load_cert_chain`).
        """
        cert_data, key_data = self.cert_data, self.key_data
        if credential is not None and credential.cert_data is not None:
            cert_data, key_data = credential.cert_data, credential.key_data
        try:
            ctx = ssl.create_default_context(
                cadata=self.ca_data.decode("ascii") if self.ca_data else None
            )
            if cert_data is not None and key_data is not None:
                _load_cert_chain(ctx, cert_data, key_data)
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
            raise KubeConfigError(self.server, f"unusable CA or client certificate: {e}") from e
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def login_expiry(self) -> datetime.datetime | None:
        """When a login with these credentials should be made again: a token file's token
        expires (its `exp` claim, read now), an exec plugin's credential at its expiry;
        anything else does not."""
        if self.exec_plugin is not None:
            return self.exec_plugin.credential().expires_at
        token = self.bearer_token()
        return token_expiry(token) if self.token_file and token else None

    # -- loading -----------------------------------------------------------------------------

    @classmethod
    def load(cls) -> KubeConfig:
        """In a Pod, `in_cluster()`; elsewhere `from_kubeconfig()` with its defaults."""
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.in_cluster()
        return cls.from_kubeconfig()

    @classmethod
    def in_cluster(cls, *, service_account_dir: str | None = None) -> KubeConfig:
        """The Pod's ServiceAccount: KUBERNETES_SERVICE_HOST/PORT, its CA and token file.

        The token file is only checked here; it is read for every request.
        """
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise KubeConfigError("in-cluster", "KUBERNETES_SERVICE_HOST is not set")
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"  # an IPv6 address
        sa_dir = Path(service_account_dir or SERVICE_ACCOUNT_DIR)
        token_file = sa_dir / "token"
        if not token_file.is_file():
            raise KubeConfigError(str(token_file), "no ServiceAccount token is mounted")
        try:
            ca = (sa_dir / "ca.crt").read_bytes()
        except OSError as e:
            raise KubeConfigError(str(sa_dir / "ca.crt"), f"cannot read the CA: {e}") from e
        return cls(server=f"https://{host}:{port}", ca_data=ca, token_file=str(token_file))

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None) -> KubeConfig:
        """The `context` (default: current-context) of the kubeconfig at `path`.

        Without `path`, $KUBECONFIG, else ~/.kube/config. `path` or $KUBECONFIG may be a list
        of files joined by the path separator, merged as kubectl does: the first file to name
        an entry (cluster, user, context) or a current-context wins, and missing files of the
        list are skipped (CC-112).
        """
        listed = os.environ.get("KUBECONFIG", "") if path is None else path
        files = [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
        files = files or [Path(DEFAULT_KUBECONFIG).expanduser()]
        merged = _Merged()
        for f in files:
            if len(files) > 1 and not f.exists():
                continue  # kubectl skips missing entries of a KUBECONFIG list
            merged.add(f, _read_yaml(f))
        return merged.config(cls, context, source=os.pathsep.join(str(f) for f in files))

    @classmethod
    def from_dict(
        cls,
        kubeconfig: Mapping[str, Any],
        context: str | None = None,
        *,
        base_dir: str | None = None,
    ) -> KubeConfig:
        """Like `from_kubeconfig` for a parsed kubeconfig; relative paths from `base_dir`."""
        merged = _Merged()
        merged.add(Path(base_dir or ".", "kubeconfig"), kubeconfig)
        return merged.config(cls, context, source="kubeconfig")


# -- kubeconfig parsing ------------------------------------------------------------------------


class _Merged:
    """Named clusters, users and contexts of one or more kubeconfig files, first one wins."""

    def __init__(self) -> None:
        self.current: str | None = None
        self.entries: dict[str, dict[str, tuple[Mapping[str, Any], Path]]] = {
            "clusters": {},
            "users": {},
            "contexts": {},
        }

    def add(self, file: Path, data: Mapping[str, Any]) -> None:
        if not isinstance(data, Mapping):
            raise KubeConfigError(str(file), "not a kubeconfig (no mapping at the top)")
        if self.current is None and data.get("current-context"):
            self.current = str(data["current-context"])
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in data.get(section) or []:
                if not isinstance(entry, Mapping) or "name" not in entry:
                    raise KubeConfigError(str(file), f"an entry of {section} has no name")
                body = entry.get(key) or {}
                self.entries[section].setdefault(str(entry["name"]), (body, file.parent))

    def lookup(self, section: str, name: str, source: str) -> tuple[Mapping[str, Any], Path]:
        try:
            return self.entries[section][name]
        except KeyError:
            raise KubeConfigError(source, f"no {section[:-1]} named {name!r}") from None

    def config(self, cls: type[KubeConfig], context: str | None, *, source: str) -> KubeConfig:
        name = context or self.current
        if not name:
            raise KubeConfigError(source, "no context given and no current-context set")
        ctx, _ = self.lookup("contexts", name, source)
        cluster, cluster_dir = self.lookup("clusters", str(ctx.get("cluster", "")), source)
        user: Mapping[str, Any] = {}
        user_dir = cluster_dir
        if ctx.get("user"):
            user, user_dir = self.lookup("users", str(ctx["user"]), source)
        server = str(cluster.get("server") or "")
        if not server:
            raise KubeConfigError(source, f"cluster of context {name!r} has no server")
        for unsupported in ("auth-provider", "username"):
            if user.get(unsupported):
                raise KubeConfigError(
                    source, f"user of context {name!r}: {unsupported} is not supported"
                )
        plugin = None
        if user.get("exec"):  # CC-112
            if not isinstance(user["exec"], Mapping):
                raise KubeConfigError(source, f"user of context {name!r}: exec is not a mapping")
            plugin = ExecPlugin(user["exec"], source=source, base_dir=user_dir, cluster=cluster)
        token_file = user.get("tokenFile")
        return cls(
            server=server,
            ca_data=_data_or_file(cluster, "certificate-authority", cluster_dir, source),
            token=str(user["token"]) if user.get("token") else None,
            token_file=str(_resolve(str(token_file), user_dir)) if token_file else None,
            cert_data=_data_or_file(user, "client-certificate", user_dir, source),
            key_data=_data_or_file(user, "client-key", user_dir, source),
            insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
            exec_plugin=plugin,
        )


_SAFE_LOADER: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader, on libyaml when PyYAML was built with it (its wheels are): the same
documents and values as `yaml.safe_load`, parsed 10-15 times faster (a kubeconfig of 2.5 kB:
1.5 ms in Python, 0.1 ms in C; kubeconfigs of many clusters are tens of kB)."""


def _read_yaml(file: Path) -> Mapping[str, Any]:
    try:
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    except OSError as e:
        raise KubeConfigError(str(file), f"cannot read it: {e}") from e
    except yaml.YAMLError as e:
        raise KubeConfigError(str(file), f"not YAML: {e}") from e
    return data if data is not None else {}


def _resolve(path: str, base: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path, source: str) -> bytes | None:
    """`<key>-data` (base64) or the file named by `<key>`, as bytes."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError) as e:
            raise KubeConfigError(source, f"{key}-data is not base64: {e}") from e
    path = entry.get(key)
    if path:
        file = _resolve(str(path), base)
        try:
            return file.read_bytes()
        except OSError as e:
            raise KubeConfigError(source, f"{key} {file}: {e}") from e
    return None


def _load_cert_chain(ctx: ssl.SSLContext, cert_data: bytes, key_data: bytes) -> None:
    """`ctx.load_cert_chain` of PEM bytes. `ssl` reads the chain only from files: on Linux
    they are anonymous memory files (`memfd_create`) read through /proc/self/fd, so the key
    is never written to a file system and `tempfile` (4 ms of a command's start) is not
    imported; elsewhere, or without /proc, a private (0700) temporary directory holds them for
    the duration of the call."""
    if hasattr(os, "memfd_create"):
        fds: list[int] = []
        try:
            for data in (cert_data, key_data):
                fds.append(os.memfd_create("batteryop-kube", os.MFD_CLOEXEC))
                with os.fdopen(os.dup(fds[-1]), "wb") as f:
                    f.write(data)
            ctx.load_cert_chain(*(f"/proc/self/fd/{fd}" for fd in fds))
            return
        except ssl.SSLError:
            raise  # the certificate or key itself (an OSError too)
        except OSError:
            pass  # no memfd (a seccomp filter) or no /proc here
        finally:
            for fd in fds:
                os.close(fd)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="batteryop-kube-") as tmp:
        cert = _write_private(Path(tmp, "client.crt"), cert_data)
        key = _write_private(Path(tmp, "client.key"), key_data)
        ctx.load_cert_chain(cert, key)


def _write_private(path: Path, data: bytes) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return str(path)


def token_expiry(token: str) -> datetime.datetime | None:
    """The `exp` claim of a JWT, unverified (only to know when to log in again), else None."""
    exp = (token_payload(token) or {}).get("exp")
    if isinstance(exp, int | float):
        with contextlib.suppress(ValueError, OverflowError, OSError):
            return datetime.datetime.fromtimestamp(exp, tz=UTC)
    return None
