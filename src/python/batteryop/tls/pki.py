"""Small X.509 toolkit on `cryptography`: a CA, leaf certificates, PEM files.

Used wherever the project needs certificates it makes itself: the test control
plane (serving certs, the service-account signing key, client certs for
`system:masters`), the fake flintlockd's TLS (TD-012), the exec agent's serving
certificate request. Leaf certificates are built by `leaf.leaf_certificate`, as the CSR
approver's are. Keys are EC P-256: fast to make and accepted by Go's and
gRPC's TLS stacks. Nothing here writes a key anywhere but the path it is given,
and files holding keys are created with mode 0600.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from batteryop.tls.leaf import leaf_certificate

_VALIDITY = datetime.timedelta(days=1)
_SKEW = datetime.timedelta(minutes=5)

PrivateKey = ec.EllipticCurvePrivateKey


def new_key() -> PrivateKey:
    """Make a new EC P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: PrivateKey) -> bytes:
    """The key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: PrivateKey) -> bytes:
    """The key's public half as SubjectPublicKeyInfo PEM."""
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _sans(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        if host.startswith("spiffe://"):
            names.append(x509.UniformResourceIdentifier(host))
            continue
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: PrivateKey

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self.cert)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Write `<stem>.crt` and `<stem>.key` (mode 0600) into directory."""
        directory.mkdir(parents=True, exist_ok=True)
        crt = directory / f"{stem}.crt"
        key = directory / f"{stem}.key"
        crt.write_bytes(self.cert_pem)
        write_secret(key, self.key_pem)
        return crt, key


def write_secret(path: Path, data: bytes) -> None:
    """Write data to a file readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class UnsafeDirectoryError(Exception):
    """A folder meant for keys cannot be made private: `path` names it, `problem` says why."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def private_dir(path: Path) -> None:
    """Make `path` a folder only its owner can enter (0700), creating it (and its parents) when
    missing and narrowing it when it exists; `UnsafeDirectoryError` when it is a symlink, not a
    folder, or owned by another user, whose files we must not trust nor write keys into."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeDirectoryError(path, "is a symbolic link, not a folder of its own")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectoryError(path, "is not a folder")
    if st.st_uid != os.geteuid():
        raise UnsafeDirectoryError(
            path, f"is owned by uid {st.st_uid}, not by this process's uid {os.geteuid()}"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700, follow_symlinks=False)


_TEMP_ATTEMPTS = 16


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` in one step: a reader sees the old file or the new, never half.

    The bytes go to a temporary file in the same directory, under a name no one can guess
    (128 random bits), created by this call and no one else (`O_CREAT|O_EXCL|O_NOFOLLOW`: a
    file or symlink already at that name is never opened, let alone followed) with `mode`, so a
    key is never readable by others, not even for a moment; flushed to disk, then renamed over
    `path`.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_TEMP_ATTEMPTS):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(16)}.tmp")
        try:
            fd = os.open(tmp, flags, mode)
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"{path}: no free temporary name in {_TEMP_ATTEMPTS} attempts")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # the umask may have narrowed it: make it exact
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    pair: KeyPair
    _serial: list[int] = field(default_factory=lambda: [1], compare=False)

    @classmethod
    def create(
        cls,
        common_name: str,
        validity: datetime.timedelta = _VALIDITY,
        *,
        key: PrivateKey | None = None,
        now: datetime.datetime | None = None,
        path_length: int | None = None,
    ) -> CertificateAuthority:
        """A new self-signed CA named `common_name`, valid `validity` from `now` (less a clock
        skew); for `key` when given (the Exec Agent's Host CA keeps its key across restarts),
        signing leaves only when `path_length` is 0. The one CA builder of the house."""
        key = key or new_key()
        now = now or datetime.datetime.now(datetime.UTC)
        name = _name(common_name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        return cls(KeyPair(cert, key))

    @property
    def cert_pem(self) -> bytes:
        return self.pair.cert_pem

    def issue(
        self,
        common_name: str,
        *,
        hosts: Sequence[str] = (),
        organizations: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        validity: datetime.timedelta = _VALIDITY,
        key: PrivateKey | None = None,
    ) -> KeyPair:
        """Issue a leaf certificate; `hosts` become DNS, IP or URI SANs."""
        if not (server or client):
            raise ValueError("issue: at least one of server= or client= must be true")
        key = key or new_key()
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        return KeyPair(
            self.sign(_name(common_name, organizations), key.public_key(), usages, hosts, validity),
            key,
        )

    def sign_csr(
        self,
        csr: x509.CertificateSigningRequest,
        *,
        server: bool = False,
        client: bool = True,
        validity: datetime.timedelta = _VALIDITY,
    ) -> x509.Certificate:
        """Sign a CSR's subject, public key and SAN as a leaf."""
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        try:
            san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            hosts = [str(v.value) for v in san]
        except x509.ExtensionNotFound:
            hosts = []
        public = csr.public_key()
        if not isinstance(public, ec.EllipticCurvePublicKey):
            raise ValueError("sign_csr: only EC public keys are accepted")
        return self.sign(csr.subject, public, usages, hosts, validity)

    def sign(
        self,
        subject: x509.Name,
        public: ec.EllipticCurvePublicKey,
        usages: Sequence[x509.ObjectIdentifier],
        hosts: Iterable[str],
        validity: datetime.timedelta,
    ) -> x509.Certificate:
        now = datetime.datetime.now(datetime.UTC)
        return leaf_certificate(
            subject=subject,
            public_key=public,
            issuer=self.pair.cert,
            issuer_key=self.pair.key,
            not_before=now - _SKEW,
            not_after=now + validity,
            usages=usages,
            sans=_sans(hosts),
        )


def make_csr(
    key: PrivateKey,
    common_name: str,
    *,
    organizations: Sequence[str] = (),
    hosts: Sequence[str] = (),
) -> bytes:
    """A PEM PKCS#10 request for common_name, organizations and SAN hosts."""
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        _name(common_name, organizations)
    )
    sans = _sans(hosts)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
