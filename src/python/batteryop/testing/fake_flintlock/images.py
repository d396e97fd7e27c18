"""The fake flintlockd's image service (TD-010): a MicroVM's kernel and root volume taken from
the OCI image references in its spec, pulled from a registry by digest, as flintlockd does
through containerd (flintlock-api.md §3).

flintlockd hands `kernel.image` (and `initrd.image`) to containerd, which pulls it under a lease
and unpacks it with the kernel snapshotter (`native` by default); the VMM is pointed at
`<mount>/<kernel.filename>`. `root_volume.source.container_source` is unpacked with the
`devmapper` snapshotter, and each MicroVM gets a thin device of its own, which the guest boots as
`/dev/vda` (GI-012). `ImageStore` stands in for that pair:

- `kernel(ref, filename, arch)`: the file `filename` of the image's filesystem (its layers
  applied bottom to top, OCI whiteouts honoured), as a file of its own;
- `root_disk(ref, arch, size_mb)`: the image's filesystem as an ext4 disk image, made with
  `mkfs.ext4 -d` from the layers unpacked as root (owners, modes, symlinks, device nodes and
  xattrs kept); the QEMU backend gives each MicroVM a copy-on-write overlay of it, where
  flintlockd gives a thin snapshot.

A pull is Debian's `skopeo copy` of the image for `linux/<arch>` into an OCI layout in the cache
folder. The reference is first resolved to its manifest digest (the digest a `repo@sha256:…`
reference names, or the sha256 of what the registry serves for a tag), the pull is of
`name@digest`, and everything is cached under that digest: a tag pointed at new content is
pulled again, a reference by digest never asks the registry at all. Concurrent callers for the
same image (two MicroVMs booting from it) wait on one pull and one disk through `fcntl` file
locks, which also hold across processes.

What differs from flintlockd:
- flintlockd keeps the first image containerd pulled under a name (`imageExists`, then no
  pull): a tag re-pointed later is not seen until the image is removed from containerd. This
  store asks the registry what a tag names on every call.
- Registries on loopback (127.0.0.0/8, ::1, localhost) are reached over plain HTTP and without
  TLS verification (skopeo's `--src-tls-verify=false`), because the fake talks to a
  docker-registry on loopback; containerd, as flintlockd drives it, uses HTTPS everywhere.
- The platform is the one asked for (the guest's architecture), not the host's.
- One root disk per image and size, read-only, under the QEMU overlays; no thin pool, and its
  size is `size_mb` rather than devmapper's `base_image_size`.
- A kernel path that is a symlink is resolved inside the image (flintlockd's VMM opens it on the
  host's mount, where an absolute link would leave the image).
- An upper layer that writes through a symlink left by a lower one (without replacing it by a
  directory) is refused; containerd resolves such a path inside the root instead.
- No leases, no garbage collection: the cache folder grows until it is removed.
- Layers must be tarballs, plain or gzip-compressed (zstd is not read here).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import logging
import os
import posixpath
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Literal

from batteryop.release.debs import cache_root
from batteryop.testing import guest_image

log = logging.getLogger(__name__)

CACHE_FOLDER: Final = "flintlock-images"
"""The store's folder under `$BATTERYOP_CACHE` when none is given."""
PULL_TIMEOUT_SECONDS: Final = 900.0
INSPECT_TIMEOUT_SECONDS: Final = 120.0
PULLED_TAG: Final = "pulled"
WHITEOUT: Final = ".wh."
OPAQUE: Final = ".wh..wh..opq"
MAX_SYMLINKS: Final = 40  # as Linux's path walk

_INDEX_TYPES: Final = frozenset(
    {
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    }
)
_GZIP_LAYERS: Final = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
    }
)
_PLAIN_LAYERS: Final = frozenset(
    {
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        "application/vnd.docker.image.rootfs.diff.tar",
    }
)
_DIGEST: Final = re.compile(r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$")
_TAG: Final = re.compile(r"^\w[\w.-]{0,127}$")
_ARCH: Final = re.compile(r"^[a-z0-9_]+$")
_FATAL: Final = re.compile(r'msg="((?:[^"\\]|\\.)*)"')
_PARSING: Final = re.compile(r'^Error parsing image name "[^"]*": ')
_TarMode = Literal["r:", "r:gz"]


class ImagePullError(RuntimeError):
    """An image could not be pulled (an unknown repository or tag, a registry that does not
    answer, no image for the architecture), does not hold what was asked of it (the kernel
    file), or could not be made into a root disk. The message is one line."""


@dataclass(frozen=True)
class Reference:
    """An image reference split as the docker transport reads it: `name[:tag][@digest]`, the
    name starting with its registry host when the first component looks like one."""

    text: str
    name: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> Reference:
        if not text or any(c.isspace() or not c.isprintable() for c in text):
            raise ImagePullError(f"image reference {text!r} is empty or holds blanks")
        rest, _, digest = text.partition("@")
        if digest and not _DIGEST.match(digest):
            raise ImagePullError(f"image reference {text!r}: {digest!r} is not a digest")
        name, tag = rest, None
        slash = rest.rfind("/")
        colon = rest.rfind(":")
        if colon > slash:
            name, tag = rest[:colon], rest[colon + 1 :]
            if not _TAG.match(tag):
                raise ImagePullError(f"image reference {text!r}: {tag!r} is not a tag")
        if not name or name.startswith("/") or name.endswith("/") or "//" in name:
            raise ImagePullError(f"image reference {text!r} has no repository name")
        return cls(text, name, tag, digest or None)

    @property
    def registry(self) -> str:
        """The registry host[:port]; Docker Hub's when the name has none."""
        first, sep, _ = self.name.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            return first
        return "docker.io"

    @property
    def on_loopback(self) -> bool:
        host = self.registry
        if host.startswith("["):
            host = host[1 : host.find("]")]
        elif host.count(":") == 1:
            host = host.rsplit(":", 1)[0]
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def pinned(self, digest: str) -> str:
        """`name@digest`: skopeo reads no reference with both a tag and a digest."""
        return f"{self.name}@{digest}"


@dataclass(frozen=True)
class Pull:
    """One `skopeo copy` this store ran (the seam a test counts pulls by)."""

    ref: str
    digest: str
    arch: str
    seconds: float


@dataclass
class ImageStore:
    """Kernels and root disks of OCI images, pulled by digest into `cache` (by default
    `$BATTERYOP_CACHE/flintlock-images`), standing in for flintlockd's containerd image service.

    Layout: `<cache>/<algorithm>-<hex>/<arch>/` per resolved digest and architecture, holding the
    pulled OCI layout `oci/`, the kernel files under `files/<filename>` and the disks
    `root-<size>M.ext4`. Each is moved into place once complete, so a reader never sees half of
    one. `pulls` and `resolved` record each `skopeo copy` and `skopeo inspect` run.
    """

    cache: Path = field(default_factory=lambda: cache_root() / CACHE_FOLDER)
    pulls: list[Pull] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)

    async def kernel(self, ref: str, filename: str, arch: str) -> Path:
        """The file `filename` (e.g. `boot/vmlinux`) of the image `ref` for `linux/<arch>`,
        cached per manifest digest and filename. ImagePullError when it cannot be pulled or
        holds no such regular file."""
        return await asyncio.to_thread(self._kernel, ref, filename, arch)

    async def root_disk(self, ref: str, arch: str, size_mb: int = 1024) -> Path:
        """The filesystem of the image `ref` for `linux/<arch>` as an ext4 disk image of
        `size_mb` MiB labelled `root` (GI-012: the guest's `/dev/vda`), cached per manifest
        digest and size. Needs root (the tree keeps the image's owners) and e2fsprogs. Boot
        from a copy-on-write overlay of it: it is shared."""
        return await asyncio.to_thread(self._root_disk, ref, arch, size_mb)

    async def resolve(self, ref: str) -> str:
        """The digest of the manifest `ref` names (an index for a multi-architecture image)."""
        return await asyncio.to_thread(self._resolve, Reference.parse(ref))

    # --- the work, run in a thread ---------------------------------------------------------

    def _kernel(self, ref: str, filename: str, arch: str) -> Path:
        reference, digest, folder = self._image(ref, arch)
        member = _member_name(filename)
        if not member:
            raise ImagePullError(f"kernel filename {filename!r} names no file")
        out = folder / "files" / member
        if out.is_file():
            return out
        layout = self._layout(reference, digest, arch, folder)
        where = f"image {ref} ({digest}, linux/{arch})"
        with _Layers(layout, where) as layers:
            found = layers.find(member)
            if found is None:
                raise ImagePullError(f"kernel file {filename} not found in {where}")
            out.parent.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(prefix=".partial-", dir=out.parent)
            try:
                with os.fdopen(fd, "wb") as sink, found as source:
                    shutil.copyfileobj(source, sink, 1 << 20)
                os.replace(partial, out)
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
        return out

    def _root_disk(self, ref: str, arch: str, size_mb: int) -> Path:
        if size_mb < 8:
            raise ImagePullError(f"root disk size {size_mb} MiB is too small for ext4")
        reference, digest, folder = self._image(ref, arch)
        out = folder / f"root-{size_mb}M.ext4"
        if out.is_file():
            return out
        with _locked(folder / f".disk-{size_mb}M.lock"):
            if out.is_file():
                return out
            layout = self._layout(reference, digest, arch, folder)
            where = f"image {ref} ({digest}, linux/{arch})"
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="tree-", dir=folder) as tmp:
                tree = Path(tmp) / "root"
                tree.mkdir(mode=0o755)
                for i, layer in enumerate(_layer_blobs(layout, where)):
                    _unpack_layer(layer, tree, upper=i > 0, where=where)
                partial = folder / f".partial-root-{size_mb}M.ext4"
                try:
                    guest_image.root_disk(tree, partial, size_mb)
                except guest_image.BootError as err:
                    partial.unlink(missing_ok=True)
                    raise ImagePullError(f"{err} (for {where})") from None
                os.replace(partial, out)
            log.info("root disk of %s made in %.1fs", where, time.monotonic() - started)
        return out

    def _image(self, ref: str, arch: str) -> tuple[Reference, str, Path]:
        if not _ARCH.match(arch):
            raise ImagePullError(f"architecture {arch!r} is not one like amd64 or arm64")
        reference = Reference.parse(ref)
        digest = self._resolve(reference)
        folder = self.cache / digest.replace(":", "-") / arch
        folder.mkdir(parents=True, exist_ok=True)
        return reference, digest, folder

    def _resolve(self, reference: Reference) -> str:
        if reference.digest is not None:
            return reference.digest
        raw = self._skopeo(
            ["inspect", "--raw", *self._tls(reference, "--tls-verify=false")],
            f"docker://{reference.name}:{reference.tag or 'latest'}",
            reference,
            INSPECT_TIMEOUT_SECONDS,
        )
        self.resolved.append(reference.text)
        # The registry serves the manifest's bytes as stored: their sha256 is its digest.
        return "sha256:" + hashlib.sha256(raw).hexdigest()

    def _layout(self, reference: Reference, digest: str, arch: str, folder: Path) -> Path:
        """The image pulled for `linux/<arch>` as an OCI layout (pulled once per digest)."""
        layout = folder / "oci"
        if (layout / "index.json").is_file():
            return layout
        with _locked(folder / ".pull.lock"):
            if (layout / "index.json").is_file():
                return layout
            partial = folder / ".partial-oci"
            shutil.rmtree(partial, ignore_errors=True)
            started = time.monotonic()
            try:
                self._skopeo(
                    ["copy", "--quiet", "--override-os", "linux", "--override-arch", arch,
                     *self._tls(reference, "--src-tls-verify=false")],
                    f"docker://{reference.pinned(digest)}",
                    reference,
                    PULL_TIMEOUT_SECONDS,
                    f"oci:{partial}:{PULLED_TAG}",
                )  # fmt: skip
                seconds = time.monotonic() - started
                self.pulls.append(Pull(reference.text, digest, arch, seconds))
                log.info("pulled %s (%s, linux/%s) in %.1fs", reference.text, digest, arch, seconds)
                _check_platform(partial, arch, f"image {reference.text} ({digest})")
            except ImagePullError:
                shutil.rmtree(partial, ignore_errors=True)
                raise
            os.replace(partial, layout)
        return layout

    @staticmethod
    def _tls(reference: Reference, flag: str) -> list[str]:
        # The fake flintlockd pulls from a docker-registry on loopback, which serves plain HTTP:
        # only there is TLS (and its verification) left out. Any other registry is HTTPS.
        return [flag] if reference.on_loopback else []

    def _skopeo(
        self,
        args: Sequence[str],
        source: str,
        reference: Reference,
        timeout: float,
        *dest: str,
    ) -> bytes:
        argv = ["skopeo", *args, source, *dest]
        if shutil.which("skopeo") is None:
            raise ImagePullError(
                f"skopeo not found: it pulls {reference.text} (apt-get install skopeo)"
            )
        try:
            done = subprocess.run(argv, capture_output=True, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ImagePullError(
                f"pulling {reference.text}: skopeo {args[0]} gave no answer in {timeout:.0f}s"
            ) from None
        if done.returncode != 0:
            cause = _last_line(done.stderr.decode(errors="replace"))
            raise ImagePullError(f"pulling {reference.text}: {cause}")
        return done.stdout


# --- helpers -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive `flock` on `path`, for threads of this process and other processes alike
    (each open() is its own lock holder)."""
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _last_line(stderr: str) -> str:
    """The cause skopeo (or a tool) gave: its last stderr line, logrus's `msg="…"` unquoted."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "(no error output)"
    line = lines[-1]
    found = _FATAL.search(line)
    if found:
        try:
            line = str(json.loads(f'"{found.group(1)}"'))
        except ValueError:
            line = found.group(1)
    return _PARSING.sub("", " ".join(line.split()))  # an escaped newline stays one line


def _member_name(path: str) -> str:
    """A tar member's or asked-for path as one name: no leading `/` or `./`, no `..` above it."""
    return posixpath.normpath("/" + path).lstrip("/")


def _read_json(layout: Path, digest: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(_blob_path(layout, digest).read_bytes())
    except (OSError, ValueError) as err:
        raise ImagePullError(f"{where}: blob {digest} is unreadable: {err}") from None
    if not isinstance(data, dict):
        raise ImagePullError(f"{where}: blob {digest} is not a JSON object")
    return data


def _blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algorithm / hexdigest


def _manifest(layout: Path, where: str) -> dict[str, Any]:
    """The image manifest skopeo wrote to `layout` (one platform's, never an index)."""
    try:
        index = json.loads((layout / "index.json").read_text(encoding="utf-8"))
        (entry,) = index["manifests"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ImagePullError(f"{where}: the pulled layout {layout} is unreadable: {err}") from None
    if entry.get("mediaType") in _INDEX_TYPES:
        raise ImagePullError(f"{where}: the pulled layout holds an index, not one image")
    return _read_json(layout, str(entry["digest"]), where)


def _check_platform(layout: Path, arch: str, where: str) -> None:
    """As containerd's platform match: an image of one platform (no index) must be ours."""
    manifest = _manifest(layout, where)
    config = _read_json(layout, str(manifest["config"]["digest"]), where)
    os_name, found = config.get("os"), config.get("architecture")
    if (os_name and os_name != "linux") or (found and found != arch):
        raise ImagePullError(f"{where} is for {os_name}/{found}, not linux/{arch}")


def _layer_blobs(layout: Path, where: str) -> list[tuple[Path, _TarMode]]:
    """The image's layers, bottom first: each blob's path and tarfile's mode to read it."""
    out: list[tuple[Path, _TarMode]] = []
    for layer in _manifest(layout, where).get("layers", []):
        media = str(layer.get("mediaType", ""))
        if media in _GZIP_LAYERS:
            out.append((_blob_path(layout, str(layer["digest"])), "r:gz"))
        elif media in _PLAIN_LAYERS:
            out.append((_blob_path(layout, str(layer["digest"])), "r:"))
        else:
            raise ImagePullError(f"{where}: layer media type {media!r} is not read here")
    return out


@dataclass
class _Layer:
    """One layer's members by normalized name (whiteout files among them)."""

    tar: tarfile.TarFile
    members: dict[str, tarfile.TarInfo]

    def hides(self, path: str) -> bool:
        """Whether this layer, not holding `path`, hides it in the layers below: a whiteout of
        it or of a directory above it, an opaque directory above it, or a directory above it
        replaced by something else."""
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            above, name = "/".join(parts[: i - 1]), parts[i - 1]
            if posixpath.join(above, WHITEOUT + name) in self.members:
                return True
            if i < len(parts):
                prefix = "/".join(parts[:i])
                if posixpath.join(prefix, OPAQUE) in self.members:
                    return True
                member = self.members.get(prefix)
                if member is not None and not member.isdir():
                    return True
        return False


class _Layers:
    """An image's layers read with tarfile, looked up from the top (the union a snapshotter
    mounts): enough to read one file, not to unpack a tree."""

    def __init__(self, layout: Path, where: str) -> None:
        self.where = where
        self.layers: list[_Layer] = []
        self._stack = contextlib.ExitStack()
        try:
            for blob, mode in _layer_blobs(layout, where):
                tar = self._stack.enter_context(tarfile.open(blob, mode))
                members = {_member_name(m.name): m for m in tar.getmembers()}
                self.layers.append(_Layer(tar, members))
        except (OSError, tarfile.TarError) as err:
            self._stack.close()
            raise ImagePullError(f"{where}: a layer is unreadable: {err}") from None

    def __enter__(self) -> _Layers:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def lookup(self, path: str) -> tuple[_Layer, tarfile.TarInfo] | None:
        for layer in reversed(self.layers):
            member = layer.members.get(path)
            if member is not None:
                return layer, member
            if layer.hides(path):
                return None
        return None

    def find(self, path: str) -> IO[bytes] | None:
        """The regular file at `path`, symlinks on the way resolved inside the image."""
        todo = [p for p in path.split("/") if p]
        done: list[str] = []
        hops = 0
        hit = None
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            hit = self.lookup("/".join([*done, part]))
            if hit is None:
                return None
            member = hit[1]
            if member.issym():
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise ImagePullError(f"{self.where}: too many symlinks under {path}")
                if member.linkname.startswith("/"):
                    done = []
                todo = [p for p in member.linkname.split("/") if p] + todo
                hit = None
                continue
            done.append(part)
            if todo and not member.isdir():
                return None
        if hit is None or not (hit[1].isfile() or hit[1].islnk()):
            return None
        try:
            return hit[0].tar.extractfile(hit[1])
        except (KeyError, tarfile.TarError) as err:
            raise ImagePullError(f"{self.where}: {path} is unreadable: {err}") from None


def _unpack_layer(layer: tuple[Path, _TarMode], tree: Path, *, upper: bool, where: str) -> None:
    """Apply one layer to `tree` as containerd's applier does: first its whiteouts (removing
    what lower layers put there), then its members, extracted by GNU tar as root with their
    numeric owners, modes, symlinks and xattrs; the whiteout files themselves are left out."""
    blob, _ = layer
    if upper:
        _apply_whiteouts(blob, tree, where)
    done = subprocess.run(
        ["tar", "-x", "-f", str(blob), "-C", str(tree),
         "--numeric-owner", "--same-owner", "--same-permissions",
         "--xattrs", "--xattrs-include=*", f"--exclude={WHITEOUT}*"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ImagePullError(
            f"{where}: unpacking layer {blob.name} failed: {_last_line(done.stderr)}"
        )


def _apply_whiteouts(blob: Path, tree: Path, where: str) -> None:
    """Remove from `tree` what this upper layer whites out, and refuse a layer that would write
    through a symlink a lower layer left (GNU tar would follow it, out of the tree perhaps)."""
    try:
        with tarfile.open(blob, "r:*") as tar:
            members = [(_member_name(m.name), m.isdir()) for m in tar]
    except (OSError, tarfile.TarError) as err:
        raise ImagePullError(f"{where}: layer {blob.name} is unreadable: {err}") from None
    dirs = {name for name, is_dir in members if is_dir}
    checked: set[str] = set()
    for name, _ in members:
        parts = name.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in checked:
                continue
            checked.add(prefix)
            if prefix not in dirs and (tree / prefix).is_symlink():
                raise ImagePullError(
                    f"{where}: layer {blob.name} writes {name} through the symlink {prefix}, "
                    "which is not read here"
                )
    for name, _ in members:
        above, base = posixpath.split(name)
        if not base.startswith(WHITEOUT) or not _no_symlink_on(tree, above):
            # Under a lower layer's symlink that this layer makes a directory, nothing is left
            # to white out (and removing through the link could reach out of the tree).
            continue
        if base == OPAQUE:
            target = tree / above
            if target.is_dir():
                for child in target.iterdir():
                    _remove(child)
        else:
            _remove(tree / above / base[len(WHITEOUT) :])


def _no_symlink_on(tree: Path, path: str) -> bool:
    """Whether no component of `path` (relative to `tree`) is a symlink in `tree`."""
    parts = [p for p in path.split("/") if p]
    return not any((tree / "/".join(parts[:i])).is_symlink() for i in range(1, len(parts) + 1))


def _remove(path: Path) -> None:
    """Remove `path` (a directory with its contents), never following a symlink."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    else:
        path.unlink()
