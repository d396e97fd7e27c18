"""battery-thin-pool: which disk the thin pool takes, over fake block-device trees (sysfs,
device files, mountinfo under BATTERY_ROOT), and the pool itself on a loop device where this
kernel has device-mapper."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from images.hostfs import IMAGE_ENV, LIBEXEC, FakeHost, have, read_env, require_root

INSTANCE_STORE = "Amazon EC2 NVMe Instance Storage"
EBS = "Amazon Elastic Block Store"


class Disks:
    """A fake /sys/block, /dev and mountinfo for the script to read."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.minor = 0
        self.mounts: list[str] = []
        host.path("/proc/self").mkdir(parents=True)

    def disk(self, name: str, model: str, size_mb: int = 16) -> str:
        sysdir = self.host.path(f"/sys/block/{name}")
        (sysdir / "device").mkdir(parents=True)
        (sysdir / "holders").mkdir()
        (sysdir / "device/model").write_text(f"{model:<40}\n")  # sysfs pads the model
        (sysdir / "ro").write_text("0\n")
        (sysdir / "dev").write_text(f"259:{self._next()}\n")
        dev = self.host.path(f"/dev/{name}")
        dev.parent.mkdir(exist_ok=True)
        with dev.open("wb") as f:
            f.truncate(size_mb * 1024 * 1024)
        return name

    def partition(self, disk: str, part: str) -> str:
        pdir = self.host.path(f"/sys/block/{disk}/{part}")
        pdir.mkdir()
        (pdir / "partition").write_text("1\n")
        (pdir / "dev").write_text(f"259:{self._next()}\n")
        return part

    def _next(self) -> int:
        self.minor += 1
        return self.minor

    def mount(self, name: str, where: str) -> None:
        sysfile = next(self.host.path("/sys/block").glob(f"**/{name}/dev"))
        devnum = sysfile.read_text().strip()
        self.mounts.append(f"{len(self.mounts) + 20} 1 {devnum} / {where} rw - ext4 /dev/{name} rw")

    def hold(self, name: str, holder: str) -> None:
        (self.host.path(f"/sys/block/{name}/holders") / holder).mkdir()

    def format(self, name: str) -> None:
        dev = self.host.path(f"/dev/{name}")
        subprocess.run([have("mkfs.ext4"), "-q", "-F", str(dev)], check=True, capture_output=True)

    def choose(self, conf: str = "") -> tuple[int, str]:
        self.host.path("/proc/self/mountinfo").write_text("".join(m + "\n" for m in self.mounts))
        self.host.write_host_conf(conf)
        assert self.host.run("host-config.sh").returncode == 0
        done = self.host.run("thin-pool.sh", "choose")
        return done.returncode, done.stdout.strip()


@pytest.fixture
def disks(tmp_path: Path) -> Disks:
    have("blkid")
    return Disks(FakeHost(tmp_path / "root"))


@pytest.mark.req("HI-020")
def test_the_first_blank_unused_instance_store_disk_is_taken(disks: Disks) -> None:
    disks.disk("nvme0n1", EBS)
    disks.partition("nvme0n1", "nvme0n1p1")
    disks.mount("nvme0n1p1", "/sysroot")
    disks.disk("nvme1n1", INSTANCE_STORE)
    disks.format("nvme1n1")
    disks.disk("nvme2n1", INSTANCE_STORE)
    disks.disk("nvme3n1", INSTANCE_STORE)
    assert disks.choose() == (0, "/dev/nvme2n1")


@pytest.mark.req("HI-023")
def test_no_disk_with_a_signature_a_mount_a_partition_or_a_holder_is_taken(disks: Disks) -> None:
    disks.disk("nvme1n1", INSTANCE_STORE)
    disks.format("nvme1n1")
    disks.disk("nvme2n1", INSTANCE_STORE)
    disks.mount("nvme2n1", "/data")
    disks.disk("nvme3n1", INSTANCE_STORE)
    disks.partition("nvme3n1", "nvme3n1p1")
    disks.mount("nvme3n1p1", "/")
    disks.disk("nvme4n1", INSTANCE_STORE)
    disks.hold("nvme4n1", "md0")
    disks.disk("nvme5n1", INSTANCE_STORE)
    disks.partition("nvme5n1", "nvme5n1p1")
    disks.disk("nvme6n1", EBS)  # blank, unused, but not instance store
    code, out = disks.choose()
    assert code == 1
    assert out.startswith("no usable instance-store disk: ")
    for expected in (
        "/dev/nvme1n1 is not blank (TYPE=ext4)",
        "/dev/nvme2n1 is mounted",
        "/dev/nvme3n1 has a mounted partition (nvme3n1p1)",
        "/dev/nvme4n1 is in use by md0",
        "/dev/nvme5n1 has partitions",
    ):
        assert expected in out
    assert "nvme6n1" not in out


@pytest.mark.req("HI-020", "HI-023")
def test_a_configured_device_is_taken_only_when_it_is_safe(disks: Disks) -> None:
    disks.disk("xvdb", EBS)
    disks.disk("xvdc", EBS)
    disks.format("xvdc")
    assert disks.choose("THIN_POOL_DEVICE=/dev/xvdb\n") == (0, "/dev/xvdb")
    code, out = disks.choose("THIN_POOL_DEVICE=/dev/xvdc\n")
    assert (code, out) == (
        1,
        "THIN_POOL_DEVICE /dev/xvdc cannot be used: /dev/xvdc is not blank (TYPE=ext4)",
    )


@pytest.mark.req("HI-022")
def test_no_device_leaves_the_host_not_ready(disks: Disks) -> None:
    disks.disk("nvme0n1", EBS)
    assert disks.choose() == (1, "no instance-store disk found and THIN_POOL_DEVICE is not set")
    done = disks.host.run("thin-pool.sh", PATH=_lvm_path(disks.host.root))
    assert done.returncode == 1
    assert disks.host.not_ready() == {
        "battery-thin-pool": "no thin pool device is available: "
        "no instance-store disk found and THIN_POOL_DEVICE is not set\n"
    }


def _lvm_path(root: Path) -> str:
    """PATH where lvs and vgs answer "no such volume group", as on a Host before the pool."""
    stubs = root / "stub-bin"
    stubs.mkdir(exist_ok=True)
    for tool in ("lvs", "vgs"):
        (stubs / tool).write_text('#!/bin/sh\necho "Volume group not found" >&2\nexit 5\n')
        (stubs / tool).chmod(0o755)
    return f"{stubs}:{os.environ['PATH']}"


def _device_mapper_problem() -> str | None:
    if not Path("/dev/mapper/control").exists():
        return "/dev/mapper/control does not exist: this kernel has no device-mapper"
    done = subprocess.run(["dmsetup", "targets"], capture_output=True, text=True)
    if done.returncode != 0:
        return f"dmsetup targets failed: {done.stderr.strip().splitlines()[0]}"
    if "thin-pool" not in done.stdout:
        return "this kernel's device-mapper has no thin-pool target"
    return None


@pytest.mark.req("HI-020", "HI-021")
def test_the_pool_is_made_on_a_loop_device_once(tmp_path: Path) -> None:
    require_root("the loop-device thin pool")
    problem = _device_mapper_problem()
    if problem:
        pytest.skip(problem)
    for tool in ("losetup", "lvs", "lvcreate"):
        have(tool)
    backing = tmp_path / "disk.img"
    with backing.open("wb") as f:
        f.truncate(256 * 1024 * 1024)
    loop = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], check=True, capture_output=True, text=True
    ).stdout.strip()
    vg = f"bo{os.getpid()}"
    names = read_env(IMAGE_ENV)
    run = tmp_path / "run"
    env_file = tmp_path / "image.env"
    env_file.write_text(
        IMAGE_ENV.read_text()
        .replace(f"THIN_POOL_VG={names['THIN_POOL_VG']}", f"THIN_POOL_VG={vg}")
        .replace("=/run/battery", f"={run}")
        .replace("=/etc/battery", f"={tmp_path}/etc")
    )
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/host.conf").write_text(f"THIN_POOL_DEVICE={loop}\n")
    env = {
        **os.environ,
        "BATTERY_ROOT": "",
        "BATTERY_IMAGE_ENV": str(env_file),
        "BATTERY_LIB": str((LIBEXEC / "lib.sh").resolve()),
    }
    try:
        for script in ("host-config.sh", "thin-pool.sh"):
            done = subprocess.run(
                ["bash", str(LIBEXEC / script)], env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, done.stderr
        uuid = subprocess.run(
            ["lvs", "--noheadings", "-o", "lv_uuid,segtype", f"{vg}/thinpool"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert uuid[1] == "thin-pool"
        # HI-021: a second boot finds the pool and leaves it as it is.
        done = subprocess.run(
            ["bash", str(LIBEXEC / "thin-pool.sh")], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        again = subprocess.run(
            ["lvs", "--noheadings", "-o", "lv_uuid", f"{vg}/thinpool"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert again[0] == uuid[0]
    finally:
        subprocess.run(["vgremove", "--yes", "--force", vg], capture_output=True)
        subprocess.run(["losetup", "-d", loop], capture_output=True)
        shutil.rmtree(run, ignore_errors=True)
