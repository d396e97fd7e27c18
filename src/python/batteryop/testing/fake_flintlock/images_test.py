"""The fake flintlockd's image store against a real registry: Debian's docker-registry on
loopback, images built by the release's own builder (`release.oci.build_index`) and pushed with
skopeo, pulled back by `ImageStore` as the QEMU backend will for a MicroVM's kernel and root
volume (TD-010, GI-012).

The image that checks owners and whiteouts is written here, layer by layer: `build_index` copies
each layer folder with `buildah copy`, which makes every file root's, and it writes no
whiteouts.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from batteryop.release import oci
from batteryop.testing import oci_registry
from batteryop.testing.controlplane.server import free_port
from batteryop.testing.fake_flintlock.images import ImagePullError, ImageStore

ARCHES = ("amd64", "arm64")
DISK_MB = 32


def kernel_bytes(arch: str, version: str) -> bytes:
    return f"not really a kernel: {arch} {version}\n".encode()


@dataclass(frozen=True)
class Images:
    registry: str
    kernel_layouts: dict[str, Path]
    """Kernel image layouts by version (v1, v2), each tagged `tag`."""
    kernel_digest: str
    rootfs: str
    owners: str


def missing_tools() -> str | None:
    if not oci_registry.have_registry():
        return oci_registry.MISSING_REGISTRY
    for tool, package in (
        ("skopeo", "skopeo"),
        ("buildah", "buildah"),
        ("mkfs.ext4", "e2fsprogs"),
        ("debugfs", "e2fsprogs"),
    ):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install {package})"
    return None


def skopeo(*args: str) -> None:
    done = subprocess.run(["skopeo", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"skopeo {' '.join(args[:2])}: {done.stderr[-1500:]}"


def push(layout: Path, ref: str, tag: str = "v1") -> None:
    skopeo(
        "copy", "--all", "--preserve-digests", "--dest-tls-verify=false",
        f"oci:{layout}:{tag}", f"docker://{ref}",
    )  # fmt: skip


def build(folder: Path, platforms: Sequence[oci.Platform], tag: str = "v1") -> tuple[Path, str]:
    out = folder / "layout"
    digest = oci.build_index(
        platforms,
        oci.ImageConfig(entrypoint=[]),
        created=0,
        out=out,
        tag=tag,
        state=folder / "buildah",
    )
    return out, digest


def write_tree(root: Path, files: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    for name, target in (links or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(target)
    return root


def tar_layer(entries: Sequence[tuple[str, bytes | str | None, int, int]]) -> bytes:
    """A gzipped layer of (name, content, mode, uid): bytes a file, str a symlink's target,
    None a directory."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content, mode, uid in entries:
            info = tarfile.TarInfo(name)
            info.mode, info.uid, info.gid = mode, uid, uid
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return raw.getvalue()


def write_blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256" / digest[7:]).write_bytes(data)
    return digest, len(data)


def write_layout(layout: Path, layers: Sequence[bytes], tag: str = "v1") -> None:
    """A one-platform (linux/amd64) OCI layout of uncompressed `layers`, bottom first,
    gzipped here."""
    (layout / "blobs/sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    descriptors, diff_ids = [], []
    for layer in layers:
        digest, size = write_blob(layout, gzip.compress(layer, mtime=0))
        descriptors.append(
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest,
             "size": size}
        )  # fmt: skip
        diff_ids.append("sha256:" + hashlib.sha256(layer).hexdigest())
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    config_digest, config_size = write_blob(layout, json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": descriptors,
    }
    digest, size = write_blob(layout, json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index))


OWNERS_LAYERS = (
    tar_layer(
        [
            ("etc", None, 0o755, 0),
            ("etc/hostname", b"lower\n", 0o644, 0),
            ("etc/removed", b"whited out above\n", 0o644, 0),
            ("etc/link", "hostname", 0o777, 0),
            ("opaque", None, 0o755, 0),
            ("opaque/old", b"hidden by the opaque marker\n", 0o644, 0),
            ("boot", None, 0o755, 0),
            ("boot/vmlinux", b"whited out kernel\n", 0o644, 0),
        ]
    ),
    tar_layer(
        [
            ("etc", None, 0o755, 0),
            ("etc/hostname", b"upper\n", 0o644, 0),
            ("etc/.wh.removed", b"", 0o644, 0),
            ("opaque", None, 0o700, 0),
            ("opaque/.wh..wh..opq", b"", 0o644, 0),
            ("opaque/new", b"kept\n", 0o644, 0),
            ("boot", None, 0o755, 0),
            ("boot/.wh.vmlinux", b"", 0o644, 0),
            ("home", None, 0o755, 0),
            ("home/user", None, 0o750, 1000),
            ("home/user/secret", b"only user 1000 reads this\n", 0o600, 1000),
        ]
    ),
)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Images]:
    reason = missing_tools()
    if reason is not None:
        print(f"\nskipping the image store's tests: {reason}")
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("images")
    kernel_layouts, kernel_digest = {}, ""
    for version in ("v1", "v2"):
        platforms = [
            oci.Platform(
                arch,
                [write_tree(root / version / arch, {"boot/vmlinux": kernel_bytes(arch, version)})],
            )
            for arch in ARCHES
        ]
        kernel_layouts[version], digest = build(root / f"kernel-{version}", platforms)
        kernel_digest = kernel_digest or digest
    base = write_tree(
        root / "rootfs-base",
        {"etc/hostname": b"base\n", "etc/os-release": b"ID=test\n", "root/key": b"secret\n"},
        {"etc/alias": "hostname", "bin": "usr/bin"},
    )
    (base / "root/key").chmod(0o600)
    (base / "usr/bin").mkdir(parents=True)
    top = write_tree(root / "rootfs-top", {"etc/hostname": b"top\n", "usr/bin/tool": b"#!\n"})
    (top / "usr/bin/tool").chmod(0o755)
    rootfs_layout, _ = build(root / "rootfs", [oci.Platform(arch, [base, top]) for arch in ARCHES])
    owners_layout = root / "owners"
    write_layout(owners_layout, OWNERS_LAYERS)
    with oci_registry.loopback_registry(root / "registry") as address:
        push(kernel_layouts["v1"], f"{address}/kernel:v1")
        push(rootfs_layout, f"{address}/rootfs:v1")
        push(owners_layout, f"{address}/owners:v1")
        yield Images(
            address,
            kernel_layouts,
            kernel_digest,
            f"{address}/rootfs:v1",
            f"{address}/owners:v1",
        )


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "cache")


def debugfs(disk: Path, request: str) -> str:
    done = subprocess.run(
        ["debugfs", "-R", request, str(disk)], capture_output=True, text=True, check=True
    )
    return done.stdout


def inode(disk: Path, path: str) -> dict[str, str]:
    """Type, mode, owner and a fast symlink's target of `path` in the ext4 image `disk`."""
    out = debugfs(disk, f"stat {path}")
    found = {
        key: (m.group(1) if (m := re.search(pattern, out)) else "")
        for key, pattern in {
            "type": r"Type: (\w+)",
            "mode": r"Mode:\s+(\d+)",
            "user": r"User:\s+(\d+)",
            "group": r"Group:\s+(\d+)",
            "link": r'Fast link dest: "([^"]*)"',
        }.items()
    }
    assert found["type"], f"{path} is not in {disk}: {out}"
    return found


async def test_a_kernel_comes_from_the_image_of_each_architecture(
    images: Images, store: ImageStore
) -> None:
    ref = f"{images.registry}/kernel:v1"
    for arch in ARCHES:
        path = await store.kernel(ref, "boot/vmlinux", arch)
        assert path.read_bytes() == kernel_bytes(arch, "v1")
        assert path.name == "vmlinux"
    assert [(p.ref, p.arch) for p in store.pulls] == [(ref, "amd64"), (ref, "arm64")]
    assert {p.digest for p in store.pulls} == {images.kernel_digest}
    # Asked again, by tag: the registry says the tag still names that digest, no pull.
    again = await store.kernel(ref, "/boot/vmlinux", "arm64")
    assert again.read_bytes() == kernel_bytes("arm64", "v1")
    assert len(store.pulls) == 2
    assert store.resolved == [ref] * 3


async def test_a_reference_by_digest_is_pulled_once_and_never_resolved(
    images: Images, store: ImageStore
) -> None:
    by_digest = f"{images.registry}/kernel@{images.kernel_digest}"
    tagged = f"{images.registry}/kernel:v1@{images.kernel_digest}"
    first = await store.kernel(by_digest, "boot/vmlinux", "amd64")
    second = await store.kernel(tagged, "boot/vmlinux", "amd64")
    assert first == second
    assert first.read_bytes() == kernel_bytes("amd64", "v1")
    assert len(store.pulls) == 1
    assert store.resolved == []
    assert await store.resolve(f"{images.registry}/kernel:v1") == images.kernel_digest


async def test_a_tag_pointed_at_new_content_is_pulled_again(
    images: Images, store: ImageStore
) -> None:
    ref = f"{images.registry}/moving:latest"
    push(images.kernel_layouts["v1"], ref)
    old = await store.kernel(ref, "boot/vmlinux", "amd64")
    assert old.read_bytes() == kernel_bytes("amd64", "v1")
    push(images.kernel_layouts["v2"], ref)
    new = await store.kernel(ref, "boot/vmlinux", "amd64")
    assert new.read_bytes() == kernel_bytes("amd64", "v2")
    assert old.read_bytes() == kernel_bytes("amd64", "v1"), "the old digest's file is kept"
    assert len(store.pulls) == 2
    assert store.pulls[0].digest != store.pulls[1].digest


async def test_a_kernel_file_the_image_lacks_or_whites_out_is_an_error(
    images: Images, store: ImageStore
) -> None:
    ref = f"{images.registry}/kernel:v1"
    with pytest.raises(ImagePullError) as missing:
        await store.kernel(ref, "boot/nope", "amd64")
    assert "boot/nope" in str(missing.value)
    assert images.kernel_digest in str(missing.value)
    with pytest.raises(ImagePullError, match="boot/vmlinux not found"):
        await store.kernel(images.owners, "boot/vmlinux", "amd64")
    # The upper layer's file, read through a symlink of the lower one.
    link = await store.kernel(images.owners, "etc/link", "amd64")
    assert link.read_bytes() == b"upper\n"


async def test_pull_errors_say_why_in_one_line(images: Images, store: ImageStore) -> None:
    down = f"127.0.0.1:{free_port()}"
    cases = {
        f"{images.registry}/no-such-repo:v1": "manifest unknown",
        f"{images.registry}/kernel:no-such-tag": "manifest unknown",
        f"{images.registry}/kernel@sha256:{'0' * 64}": "manifest unknown",
        f"{down}/kernel:v1": "connection refused",
    }
    for ref, cause in cases.items():
        with pytest.raises(ImagePullError) as err:
            await store.kernel(ref, "boot/vmlinux", "amd64")
        message = str(err.value)
        assert ref in message and cause in message and "\n" not in message, message
    with pytest.raises(ImagePullError, match="no image found .* s390x"):
        await store.kernel(f"{images.registry}/kernel:v1", "boot/vmlinux", "s390x")
    assert store.pulls == []
    # A one-platform image is copied whatever the platform asked; its config then says no.
    with pytest.raises(ImagePullError, match="is for linux/amd64, not linux/arm64"):
        await store.root_disk(images.owners, "arm64", DISK_MB)
    assert [p.arch for p in store.pulls] == ["arm64"]
    assert not list(store.cache.glob("*/arm64/oci")), "nothing of it is kept"


async def test_a_root_disk_keeps_owners_modes_symlinks_and_whiteouts(
    images: Images, store: ImageStore
) -> None:
    disk = await store.root_disk(images.owners, "amd64", DISK_MB)
    assert disk.stat().st_size == DISK_MB << 20
    assert "Filesystem volume name:   root" in debugfs(disk, "stats")
    secret = inode(disk, "/home/user/secret")
    assert (secret["type"], secret["mode"], secret["user"], secret["group"]) == (
        "regular", "0600", "1000", "1000",
    )  # fmt: skip
    assert inode(disk, "/home/user")["mode"] == "0750"
    link = inode(disk, "/etc/link")
    assert (link["type"], link["link"]) == ("symlink", "hostname")
    assert debugfs(disk, "cat /etc/hostname") == "upper\n"
    listing = debugfs(disk, "ls -l /etc") + debugfs(disk, "ls -l /opaque")
    assert "removed" not in listing and "old" not in listing and ".wh." not in listing
    assert "new" in listing
    assert inode(disk, "/opaque")["mode"] == "0700"
    assert not list(disk.parent.glob("tree-*")), "the unpacked tree is removed"
    assert await store.root_disk(images.owners, "amd64", DISK_MB) == disk
    assert len(store.pulls) == 1


async def test_two_microvms_booting_from_one_image_pull_it_once(
    images: Images, store: ImageStore
) -> None:
    first, second = await asyncio.gather(
        store.root_disk(images.rootfs, "arm64", DISK_MB),
        store.root_disk(images.rootfs, "arm64", DISK_MB),
    )
    assert first == second
    assert len(store.pulls) == 1
    # The release builder's two layers: the upper one's files over the lower one's.
    assert debugfs(first, "cat /etc/hostname") == "top\n"
    assert inode(first, "/root/key")["mode"] == "0600"
    assert inode(first, "/usr/bin/tool")["mode"] == "0755"
    assert (inode(first, "/bin")["type"], inode(first, "/bin")["link"]) == ("symlink", "usr/bin")
    assert inode(first, "/etc/alias")["link"] == "hostname"
