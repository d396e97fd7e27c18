"""Root filesystems from pinned Debian packages, made without running anything in them.

`build(lock, architecture, dest)` fetches the architecture's pinned packages (`debs.fetch`,
cached by sha256), unpacks them (`debs.unpack`) and does by hand the little the packages'
maintainer scripts would have done that a program of ours needs:

- the CA bundle `/etc/ssl/certs/ca-certificates.crt` (what `update-ca-certificates` writes:
  every certificate under `/usr/share/ca-certificates`, sorted by path), and OpenSSL's default
  paths `/usr/lib/ssl/{cert.pem,certs}` pointing at it (Debian's `openssl` package links them);
- `/etc/passwd` and `/etc/group` with root and the unprivileged `nonroot` (65532), `/tmp`
  (1777, also nonroot's home, so nothing in the image need be nonroot's) and `/etc/localtime` (UTC);
- documentation and manual pages removed (nothing reads them; they are a sixth of the size).

The Host/guest image builders call `build` with their own lock and `finish=False` when their
packages' own configuration differs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

from batteryop.release import debs

NONROOT: Final = 65532
"""The unprivileged user and group our containers run as (install.yaml's runAsUser)."""
CA_BUNDLE: Final = "etc/ssl/certs/ca-certificates.crt"
_DROP: Final = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian")


def build(lock: debs.Lock, architecture: str, dest: Path, *, finish: bool = True) -> None:
    """Unpack the lock's packages for `architecture` into `dest` (which must not exist)."""
    if dest.exists():
        raise FileExistsError(f"{dest} exists: a root filesystem is built into a new folder")
    paths = debs.fetch(lock.for_arch(architecture))
    debs.unpack(paths, dest)
    if finish:
        finish_rootfs(dest)


def finish_rootfs(root: Path) -> None:
    for rel in _DROP:
        shutil.rmtree(root / rel, ignore_errors=True)
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/tmp:/usr/sbin/nologin\n",
        encoding="utf-8",
    )
    (etc / "group").write_text(f"root:x:0:\nnonroot:x:{NONROOT}:\n", encoding="utf-8")
    tmp = root / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(0o1777)
    localtime = etc / "localtime"
    if (root / "usr/share/zoneinfo/Etc/UTC").exists() and not localtime.is_symlink():
        localtime.unlink(missing_ok=True)
        localtime.symlink_to("/usr/share/zoneinfo/Etc/UTC")
    _ca_bundle(root)


def _ca_bundle(root: Path) -> None:
    source = root / "usr/share/ca-certificates"
    if not source.is_dir():
        return
    certs = sorted(p for p in source.rglob("*.crt") if p.is_file())
    bundle = root / CA_BUNDLE
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with bundle.open("w", encoding="utf-8") as out:
        for cert in certs:
            text = cert.read_text(encoding="utf-8")
            out.write(text if text.endswith("\n") else text + "\n")
    ssl = root / "usr/lib/ssl"
    ssl.mkdir(parents=True, exist_ok=True)
    for name, target in (("cert.pem", f"/{CA_BUNDLE}"), ("certs", "/etc/ssl/certs")):
        link = ssl / name
        if not link.is_symlink() and not link.exists():
            link.symlink_to(target)
