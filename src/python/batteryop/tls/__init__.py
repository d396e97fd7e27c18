"""TLS helpers shared by the deployables and the test harnesses."""

from batteryop.tls.leaf import leaf_certificate
from batteryop.tls.pki import (
    CertificateAuthority,
    KeyPair,
    UnsafeDirectoryError,
    cert_pem,
    key_pem,
    make_csr,
    new_key,
    private_dir,
    public_key_pem,
    write_atomic,
    write_secret,
)

__all__ = [
    "CertificateAuthority",
    "KeyPair",
    "UnsafeDirectoryError",
    "cert_pem",
    "key_pem",
    "leaf_certificate",
    "make_csr",
    "new_key",
    "private_dir",
    "public_key_pem",
    "write_atomic",
    "write_secret",
]
