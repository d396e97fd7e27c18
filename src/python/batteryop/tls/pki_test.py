import datetime
import os
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from batteryop.tls import (
    CertificateAuthority,
    UnsafeDirectoryError,
    make_csr,
    new_key,
    pki,
    private_dir,
    write_atomic,
)


def test_issued_server_cert_verifies_against_its_ca_and_names_its_hosts(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test-ca")
    pair = ca.issue("apiserver", hosts=["127.0.0.1", "localhost"], server=True)
    crt, key = pair.write(tmp_path, "server")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    ctx = ssl.create_default_context(cafile=None, cadata=ca.cert_pem.decode())
    ctx.load_cert_chain(crt, key)  # the pair matches
    pair.cert.verify_directly_issued_by(ca.pair.cert)
    san = pair.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_other_ca_does_not_verify() -> None:
    pair = CertificateAuthority.create("a").issue("x", client=True)
    with pytest.raises((ValueError, x509.verification.VerificationError)):
        pair.cert.verify_directly_issued_by(CertificateAuthority.create("b").pair.cert)


def test_signed_csr_keeps_subject_and_spiffe_san() -> None:
    ca = CertificateAuthority.create("ca")
    pem = make_csr(
        new_key(), "system:node:h1", organizations=["system:nodes"], hosts=["spiffe://x/y"]
    )
    cert = ca.sign_csr(x509.load_pem_x509_csr(pem), client=True)
    assert cert.subject.rfc4514_string() == "CN=system:node:h1,O=system:nodes"
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == ["spiffe://x/y"]
    assert cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) <= datetime.timedelta(
        days=1
    )


def test_issue_requires_a_usage() -> None:
    with pytest.raises(ValueError, match="server= or client="):
        CertificateAuthority.create("ca").issue("x")


@pytest.mark.req("EA-125")
def test_write_atomic_never_follows_a_symlink_planted_at_a_temporary_name(
    tmp_path: Path,
) -> None:
    """The temporary name used to be `.<name>.<pid>.tmp`: anyone able to write into the folder
    could plant a symlink there and have the key written (and chmod'ed) through it."""
    target = tmp_path / "elsewhere"
    target.write_bytes(b"untouched")
    folder = tmp_path / "certs"
    folder.mkdir()
    path = folder / "tls.key"
    planted = folder / f".{path.name}.{os.getpid()}.tmp"
    planted.symlink_to(target)

    write_atomic(path, b"secret key", mode=0o600)

    assert target.read_bytes() == b"untouched"
    assert stat.S_IMODE(target.stat().st_mode) != 0o600  # not chmod'ed through the link
    assert not path.is_symlink() and path.read_bytes() == b"secret key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert planted.is_symlink()  # never opened, never renamed
    leftovers = [p.name for p in folder.iterdir() if p.name not in ("tls.key", planted.name)]
    assert leftovers == []


@pytest.mark.req("EA-125")
def test_write_atomic_refuses_a_symlink_even_at_its_own_temporary_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were the random name guessed, O_EXCL|O_NOFOLLOW still refuse what is there: the next
    name is tried and the link is left alone."""
    names = iter(["guessed", "fresh"])
    monkeypatch.setattr(pki.secrets, "token_hex", lambda _n: next(names))
    target = tmp_path / "elsewhere"
    target.write_bytes(b"untouched")
    path = tmp_path / "tls.key"
    (tmp_path / ".tls.key.guessed.tmp").symlink_to(target)
    write_atomic(path, b"secret key", mode=0o600)
    assert target.read_bytes() == b"untouched"
    assert path.read_bytes() == b"secret key"
    assert not (tmp_path / ".tls.key.fresh.tmp").exists()


@pytest.mark.req("EA-125")
def test_private_dir_narrows_an_existing_folder_and_refuses_a_symlink(tmp_path: Path) -> None:
    folder = tmp_path / "flintlockd"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    private_dir(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700

    fresh = tmp_path / "a" / "b"
    private_dir(fresh)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    os.chmod(elsewhere, 0o755)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(UnsafeDirectoryError, match="symbolic link"):
        private_dir(link)
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755
