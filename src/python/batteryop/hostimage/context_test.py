"""The Host Image's build context archive: reproducible, complete, and its Python runs alone."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from batteryop.hostimage import context


def _definition(tmp_path: Path) -> Path:
    definition = tmp_path / "host"
    (definition / "rootfs/usr/libexec/battery").mkdir(parents=True)
    (definition / "Containerfile").write_text("FROM scratch\n")
    (definition / "BUILD").write_text("files()\n")
    script = definition / "rootfs/usr/libexec/battery/x.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return definition


@pytest.mark.req("HI-005")
def test_the_same_definition_gives_the_same_bytes(tmp_path: Path) -> None:
    definition = _definition(tmp_path)
    first = context.build(definition, tmp_path / "a.tar.gz")
    os.utime(definition / "Containerfile", (1, 1))  # mtimes do not matter
    second = context.build(definition, tmp_path / "b.tar.gz")
    assert first == second
    assert (tmp_path / "a.tar.gz").read_bytes() == (tmp_path / "b.tar.gz").read_bytes()
    assert hashlib.sha256((tmp_path / "a.tar.gz").read_bytes()).hexdigest() == first
    assert (tmp_path / "a.tar.gz.sha256").read_text() == f"{first}  a.tar.gz\n"


def test_the_archive_holds_the_definition_and_the_boot_python_only(tmp_path: Path) -> None:
    definition = _definition(tmp_path)
    out = definition / "ctx.tar.gz"  # written inside the definition: never packed into itself
    context.build(definition, out)
    with tarfile.open(out) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert "BUILD" not in members and "ctx.tar.gz" not in members
    assert members["rootfs/usr/libexec/battery/x.sh"].mode == 0o755
    assert members["Containerfile"].mode == 0o644
    assert {m.mtime for m in members.values()} == {0}
    python = sorted(n for n in members if n.startswith("python/"))
    assert "python/batteryop/hostconf/keys.py" in python
    assert "python/batteryop/api/names.py" in python
    assert not [n for n in python if n.endswith("_test.py") or n.endswith("context.py")]
    assert not [
        n
        for n in python
        if n.startswith("python/batteryop/api/")
        and "names" not in n
        and not n.endswith("__init__.py")
    ]


@pytest.mark.req("HI-051")
def test_the_packed_python_runs_the_boot_steps_by_itself(tmp_path: Path) -> None:
    out = tmp_path / "ctx.tar.gz"
    context.build(_definition(tmp_path), out)
    unpacked = tmp_path / "unpacked"
    with tarfile.open(out) as tar:
        tar.extractall(unpacked, filter="data")
    done = subprocess.run(
        [
            sys.executable,
            "-P",
            "-S",
            "-m",
            "batteryop.hostimage",
            "host-env",
            "--conf",
            str(tmp_path / "absent"),
            "--out",
            str(tmp_path / "host.env"),
        ],
        env={"PYTHONPATH": str(unpacked / "python")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "GUEST_GATEWAY=10.220.0.1\n" in (tmp_path / "host.env").read_text()


def test_a_folder_without_a_containerfile_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert context.main([str(tmp_path), str(tmp_path / "x.tar.gz")]) == 1
    assert capsys.readouterr().err == f"context: {tmp_path} has no Containerfile\n"
