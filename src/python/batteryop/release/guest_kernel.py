"""The guest kernel (GI-001..GI-005): Debian's 6.1 kernel source built with Firecracker's CI
configuration for 6.1, for amd64 (an ELF `vmlinux`) and arm64 (an `Image`), packed as one
multi-architecture OCI image holding `boot/vmlinux` (GI-002), as flintlockd pulls it.

Inputs, each pinned (GI-031):

- the source: Debian's `linux-source-6.1`, its `.deb` pinned by sha256 in
  `src/images/guest/kernel/debs.lock.json` (`batteryop.release.debs`);
- Firecracker's configurations (`microvm-kernel-ci-<machine>-6.1.config` and the `ci.config`
  fragment), a tarball of the shared third-party folder pinned in `kernel/versions.env`;
- our own fragment `kernel/overrides.config`, applied last.

The configuration is those three concatenated, then `make olddefconfig` (what the kernel's
build fills in for this source and compiler). The result is checked in per architecture
(`kernel/config-<arch>`), and a build whose derived configuration differs from it stops with
the difference, so a change of source, fragment or compiler shows up in review
(`python -m batteryop.release.guest_kernel config --arch ARCH --write` rewrites it).

A build runs `make vmlinux` (amd64) or `make Image` (arm64, with Debian's
`aarch64-linux-gnu-` cross compiler) with the build's user, host and timestamp fixed and
the build paths mapped away, so the same inputs give the same bytes. Each kernel is cached
under `$BATTERYOP_CACHE/guest-kernel/<key>/`, the key being the sha256 of every input: the
source's and the configurations' pins, the checked-in configuration, the compiler's version.

    python -m batteryop.release.guest_kernel config --arch amd64 [--write]
    python -m batteryop.release.guest_kernel build --arch amd64            # prints the path

The release tool's `guest-image --kind kernel` builds and packs both (`build_image`).
"""

from __future__ import annotations

import argparse
import difflib
import fcntl
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from batteryop.api import samples
from batteryop.release import debs, images, oci
from batteryop.release.guest_agent import read_versions
from batteryop.release.third_party import Tarball, ThirdPartyError, third_party_dir
from batteryop.release.version import Version

NAME: Final = "guest-kernel"
KERNEL: Final = Path("src/images/guest/kernel")
VERSIONS: Final = KERNEL / "versions.env"
LOCK: Final = KERNEL / "debs.lock.json"
OVERRIDES: Final = KERNEL / "overrides.config"
REQUIRED: Final = KERNEL / "config-fragment"
CHECK_KERNEL: Final = KERNEL / "check-kernel.sh"
CHECK_CONFIG: Final = KERNEL / "check-config.sh"
FILENAME: Final = samples.GUEST_KERNEL_FILENAME
"""Where the image holds the kernel: what a Pool's `kernel.filename` names (GI-006)."""
BUILD_USER: Final = "battery"
BUILD_HOST: Final = "guest-kernel"
SIGNATURE: Final = f"({BUILD_USER}@{BUILD_HOST})"
"""What /proc/version of a guest running this kernel shows after its release."""


class KernelError(RuntimeError):
    """An input is missing or altered, the configuration drifted, or the build failed."""


@dataclass(frozen=True)
class Machine:
    """How one architecture's kernel is configured and built."""

    arch: str  # Debian's name: amd64, arm64
    kernel_arch: str  # the kernel's ARCH=
    cross_compile: str  # CROSS_COMPILE=, empty for the machine's own
    firecracker_config: str  # the file in Firecracker's tarball
    make_target: str
    output: str  # the built kernel, relative to the build folder

    @property
    def compiler(self) -> str:
        return f"{self.cross_compile}gcc"


MACHINES: Final = {
    "amd64": Machine("amd64", "x86_64", "", "microvm-kernel-ci-x86_64-6.1.config", "vmlinux",
                     "vmlinux"),
    "arm64": Machine("arm64", "arm64", "aarch64-linux-gnu-", "microvm-kernel-ci-aarch64-6.1.config",
                     "Image", "arch/arm64/boot/Image"),
}  # fmt: skip
FRAGMENT: Final = "ci.config"
"""Firecracker's fragment applied after each machine's configuration."""


def machine(arch: str) -> Machine:
    try:
        return MACHINES[arch]
    except KeyError:
        raise KernelError(f"--arch must be one of {sorted(MACHINES)}, not {arch!r}") from None


def checked_in_config(arch: str) -> Path:
    return KERNEL / f"config-{arch}"


def configs_tarball(path: Path | None = None) -> Tarball:
    path = path or VERSIONS
    values = read_versions(path)
    try:
        return Tarball(values["FIRECRACKER_CONFIGS"], values["FIRECRACKER_CONFIGS_SHA256"])
    except KeyError as err:
        raise KernelError(f"{path} pins no {err.args[0]}") from None


def source_deb(lock: Path = LOCK) -> debs.Deb:
    try:
        (deb,) = debs.load_lock(lock).for_arch("amd64")
    except (ValueError, debs.DebError) as err:
        raise KernelError(
            f"{lock} must pin exactly one package, the kernel source: {err}"
        ) from None
    return deb


# --- inputs --------------------------------------------------------------------------------


def unpack_configs(into: Path, folder: Path | None = None) -> Path:
    """Firecracker's configuration folder, from the pinned tarball (checked first)."""
    pinned = configs_tarball()
    path = (folder or third_party_dir()) / pinned.filename
    if not path.is_file():
        raise KernelError(f"{path} not found: set BATTERYOP_THIRD_PARTY to the folder holding it")
    found = debs.sha256_of(path)
    if found != pinned.sha256:
        raise KernelError(f"{path}: sha256 {found}, pinned {pinned.sha256}")
    with tarfile.open(path) as tar:
        tar.extractall(into, filter="data")
    folders = sorted({p.parent for p in into.rglob(FRAGMENT)})
    if len(folders) != 1:
        raise KernelError(f"{path} holds {len(folders)} folders with {FRAGMENT}, not one")
    return folders[0]


@dataclass(frozen=True)
class Source:
    """The unpacked kernel source and its release date (its Debian changelog's last entry)."""

    tree: Path
    date: str
    """RFC 2822, as `date -d` reads it: the build's timestamp (`KBUILD_BUILD_TIMESTAMP`)."""


def unpack_source(into: Path) -> Source:
    """The kernel source tree, from the pinned `.deb` (sha256-checked, cached)."""
    (deb,) = debs.fetch([source_deb()])
    debs.unpack([deb], into / "deb")
    (archive,) = sorted((into / "deb/usr/src").glob("linux-source-*.tar.xz"))
    (changelog,) = sorted((into / "deb/usr/share/doc").glob("linux-source-*/changelog.Debian.gz"))
    date = changelog_date(gzip.decompress(changelog.read_bytes()).decode(errors="replace"))
    _run(["tar", "-xJf", str(archive), "-C", str(into)], "unpacking the kernel source")
    shutil.rmtree(into / "deb")
    return Source(into / archive.name.removesuffix(".tar.xz"), date)


def changelog_date(changelog: str) -> str:
    """The date of a Debian changelog's newest entry (its first ` -- name <mail>  date` line)."""
    for line in changelog.splitlines():
        if line.startswith(" -- ") and ">  " in line:
            return line.split(">  ", 1)[1].strip()
    raise KernelError("the kernel source's changelog has no dated entry")


def assembled(arch: str, configs: Path) -> str:
    """What `olddefconfig` starts from: Firecracker's configuration, its fragment, ours."""
    m = machine(arch)
    parts = [configs / m.firecracker_config, configs / FRAGMENT, OVERRIDES]
    texts = [p.read_text() for p in parts]
    return "".join(t if t.endswith("\n") else t + "\n" for t in texts)


def _make(m: Machine, source: Source, build: Path, *targets: str, jobs: int = 1) -> list[str]:
    return [
        "make", "-C", str(source.tree), f"O={build}", f"ARCH={m.kernel_arch}",
        *([f"CROSS_COMPILE={m.cross_compile}"] if m.cross_compile else []),
        f"-j{jobs}", *targets,
    ]  # fmt: skip


def _env(source: Source, build: Path) -> dict[str, str]:
    """What makes two builds of the same inputs equal: no user, host, time or path of this
    machine enters the kernel (the kernel's reproducible-builds guide). The timestamp must be
    a date `date -d` reads: the built-in initramfs' file times are taken from it, and two
    builds differed there (and so in their build IDs) while it was not one."""
    return {
        **os.environ,
        "KBUILD_BUILD_USER": BUILD_USER,
        "KBUILD_BUILD_HOST": BUILD_HOST,
        "KBUILD_BUILD_TIMESTAMP": source.date,
        "KBUILD_BUILD_VERSION": "1",
        "KCFLAGS": f"-ffile-prefix-map={source.tree}=. -ffile-prefix-map={build}=.",
        "LC_ALL": "C",
    }


def derive_config(arch: str, source: Source, configs: Path, build: Path) -> str:
    """The `.config` olddefconfig makes of `assembled(arch)` in `build`."""
    m = machine(arch)
    _need(m)
    build.mkdir(parents=True, exist_ok=True)
    (build / ".config").write_text(assembled(arch, configs))
    _run(_make(m, source, build, "olddefconfig"), "make olddefconfig", env=_env(source, build))
    return (build / ".config").read_text()


def config_drift(arch: str, derived: str) -> list[str]:
    """The unified diff from the checked-in configuration to `derived` (empty: none)."""
    path = checked_in_config(arch)
    expected = path.read_text() if path.is_file() else ""
    return list(
        difflib.unified_diff(
            expected.splitlines(), derived.splitlines(), str(path), "derived", lineterm="", n=0
        )
    )


def drift_error(arch: str, diff: Sequence[str]) -> KernelError:
    shown = "\n".join(diff[:40]) + ("\n..." if len(diff) > 40 else "")
    return KernelError(
        f"the {arch} kernel configuration derived from the pinned inputs differs from "
        f"{checked_in_config(arch)} ({len(diff)} diff lines); review it and rewrite the file "
        f"with `python -m batteryop.release.guest_kernel config --arch {arch} --write`:\n{shown}"
    )


# --- the build -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    """One architecture's kernel in the cache, and how it was made."""

    arch: str
    kernel: Path
    config: Path
    seconds: float  # the build's own time (0 for a cache hit of this call)
    cached: bool

    @property
    def sha256(self) -> str:
        return debs.sha256_of(self.kernel)


def compiler_version(m: Machine) -> str:
    _need(m)
    done = subprocess.run([m.compiler, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else "unknown"


def cache_key(arch: str) -> str:
    """The sha256 of everything the kernel is made of (see the module's docstring)."""
    m = machine(arch)
    digest = hashlib.sha256(arch.encode())
    for part in (
        source_deb().sha256,
        configs_tarball().sha256,
        checked_in_config(arch).read_text(),
        OVERRIDES.read_text(),
        compiler_version(m),
        f"{m.make_target} {BUILD_USER}@{BUILD_HOST} timestamp=changelog",
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:24]


def build(arch: str, *, jobs: int | None = None, log: Path | None = None) -> Built:
    """`arch`'s kernel, built once per `cache_key` (concurrent callers wait for one build)."""
    m = machine(arch)
    if not checked_in_config(arch).is_file():
        raise KernelError(
            f"{checked_in_config(arch)} is missing: make it with "
            f"`python -m batteryop.release.guest_kernel config --arch {arch} --write`"
        )
    out = debs.cache_root() / NAME / cache_key(arch)
    kernel, config = out / Path(m.output).name, out / "config"
    if (out / ".complete").is_file():
        return Built(arch, kernel, config, 0.0, True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / ".complete").is_file():
            return Built(arch, kernel, config, 0.0, True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="kernel-", dir=out) as tmp:
            work = Path(tmp)
            source = unpack_source(work)
            configs = unpack_configs(work / "firecracker")
            folder = work / "build"
            derived = derive_config(arch, source, configs, folder)
            diff = config_drift(arch, derived)
            if diff:
                raise drift_error(arch, diff)
            _run(
                _make(m, source, folder, m.make_target, jobs=jobs or os.cpu_count() or 1),
                f"make {m.make_target} ({arch})",
                env=_env(source, folder),
                log=log or out / "build.log",
            )
            # GI-032: the check stage, on what the image will hold.
            _run(["sh", str(CHECK_KERNEL), arch, str(folder / m.output)], "check-kernel.sh")
            _run(["sh", str(CHECK_CONFIG), str(REQUIRED), str(folder / ".config")],
                 "check-config.sh")  # fmt: skip
            shutil.copyfile(folder / m.output, kernel)
            shutil.copyfile(folder / ".config", config)
        seconds = time.monotonic() - started
        (out / "build.json").write_text(
            json.dumps({"arch": arch, "seconds": round(seconds, 1), "jobs": jobs})
        )
        (out / ".complete").touch()
    return Built(arch, kernel, config, seconds, False)


# --- the image -----------------------------------------------------------------------------


def image_config(version: Version) -> oci.ImageConfig:
    deb = source_deb()
    return oci.ImageConfig(
        # Never run: flintlockd takes boot/vmlinux out of the image. An image config records an
        # entrypoint; this one names the kernel, so nothing else is implied.
        entrypoint=[f"/{FILENAME}"],
        user="0:0",
        labels={
            **images.labels(NAME, version),
            "org.opencontainers.image.description": (
                f"Linux {deb.version} (Debian's {deb.package}) with Firecracker's CI 6.1 "
                f"configuration, at {FILENAME} (GI-001..GI-005)"
            ),
        },
    )


def pack(kernels: Mapping[str, Path], out: Path, version: Version) -> str:
    """One image per architecture holding its kernel at `boot/vmlinux` (mode 0644), one index
    in the OCI layout `out` under the version's tag; returns the index digest."""
    with tempfile.TemporaryDirectory(prefix="image-guest-kernel-") as tmp:
        platforms = []
        for arch, kernel in sorted(kernels.items()):
            machine(arch)
            tree = Path(tmp) / arch
            (tree / "boot").mkdir(parents=True)
            shutil.copyfile(kernel, tree / FILENAME)
            os.chmod(tree / FILENAME, 0o644)
            platforms.append(oci.Platform(arch, [tree]))
        return oci.build_index(
            platforms, image_config(version), created=version.created, out=out,
            tag=version.image_tag, state=Path(tmp) / "buildah",
        )  # fmt: skip


def build_image(architectures: Sequence[str], out: Path, version: Version) -> str:
    """Each architecture's kernel built (or found in the cache), then packed (the release's
    `guest-image`)."""
    return pack({arch: build(arch).kernel for arch in architectures}, out, version)


# --- helpers -------------------------------------------------------------------------------

BUILD_TOOLS: Final = ("make", "flex", "bison", "bc", "tar", "xz")


def _need(m: Machine) -> None:
    missing = [t for t in (*BUILD_TOOLS, m.compiler) if shutil.which(t) is None]
    if missing:
        raise KernelError(
            f"{', '.join(missing)} not found: the guest kernel needs Debian's make, flex, bison, "
            "bc, xz-utils, libelf-dev and libssl-dev"
            + (", and gcc-aarch64-linux-gnu for arm64" if m.cross_compile else "")
        )


def _run(
    argv: Sequence[str], what: str, *, env: dict[str, str] | None = None, log: Path | None = None
) -> None:
    if log is None:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise KernelError(f"{what} failed (exit {done.returncode}):\n{tail}")
        return
    with log.open("w") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    if code != 0:
        tail = "\n".join(log.read_text().strip().splitlines()[-15:])
        raise KernelError(f"{what} failed (exit {code}); {log} ends:\n{tail}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batteryop.release.guest_kernel",
        description="Configure, build and pack the guest kernel.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    cfg = sub.add_parser("config", help="derive the configuration; diff it or --write it")
    cfg.add_argument("--arch", required=True)
    cfg.add_argument("--write", action="store_true")
    bld = sub.add_parser("build", help="build (or find in the cache) one kernel")
    bld.add_argument("--arch", required=True)
    bld.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    try:
        if args.command == "config":
            with tempfile.TemporaryDirectory(prefix="kernel-config-") as tmp:
                work = Path(tmp)
                source = unpack_source(work)
                derived = derive_config(
                    args.arch, source, unpack_configs(work / "firecracker"), work / "build"
                )
            diff = config_drift(args.arch, derived)
            if args.write:
                checked_in_config(args.arch).write_text(derived)
                print(f"wrote {checked_in_config(args.arch)} ({len(diff)} diff lines)")
            elif diff:
                raise drift_error(args.arch, diff)
            else:
                print(f"{checked_in_config(args.arch)} is what the pinned inputs give")
        else:
            built = build(args.arch, jobs=args.jobs)
            state = "cached" if built.cached else f"built in {built.seconds:.0f} s"
            print(f"{built.kernel} ({state}; sha256 {built.sha256})")
    except (KernelError, ThirdPartyError, debs.DebError, oci.OciError, OSError) as err:
        print(f"guest_kernel: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
