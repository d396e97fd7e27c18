"""Files in and out (CC-115): the copy's own logic against a real `sh`, `cat`, `tar` and `stat`,
run as the guest runs an exec's argv (a subprocess here, standing for the MicroVM), streamed
both ways through the claim's `exec_stream` interface."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import subprocess
import tarfile
from collections.abc import AsyncIterable
from pathlib import Path
from typing import IO

import pytest

from batteryop.client import FileTransferError, _files
from batteryop.client._exec import OutputSink, deliver
from batteryop.client._models import ExecResult


class Guest:
    """The `exec_stream` of a claim whose MicroVM is this machine: argv run as it is given."""

    name = "claim-1"

    def __init__(self) -> None:
        self.argvs: list[tuple[str, ...]] = []
        self.largest_read = 0

    async def exec_stream(
        self,
        argv: list[str] | tuple[str, ...],
        *,
        stdin: AsyncIterable[bytes] | None = None,
        stdout: OutputSink,
        stderr: OutputSink,
    ) -> ExecResult:
        self.argvs.append(tuple(argv))
        # A plain subprocess, its pipes read and written on threads (asyncio's child watcher
        # across pytest's loops reported exit statuses as 255 now and then).
        proc = subprocess.Popen(  # noqa: ASYNC101 - the guest stand-in, see above
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdin and proc.stdout and proc.stderr

        async def feed() -> None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                if stdin is not None:
                    async for chunk in stdin:
                        self.largest_read = max(self.largest_read, len(chunk))
                        await asyncio.to_thread(proc.stdin.write, chunk)
                await asyncio.to_thread(proc.stdin.close)

        async def pump(stream: IO[bytes], sink: OutputSink) -> None:
            while chunk := await asyncio.to_thread(stream.read1, 1 << 16):  # type: ignore[attr-defined]
                await deliver(sink, chunk)

        try:
            await asyncio.gather(feed(), pump(proc.stdout, stdout), pump(proc.stderr, stderr))
        except BaseException:  # a sink that raised ends the command, as the agent ends the stream
            if proc.poll() is None:
                proc.kill()
            raise
        finally:  # the output ended before the process did, perhaps: its exit status, waited for
            code = await asyncio.to_thread(proc.wait)
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    pipe.close()
        return ExecResult(code)


@pytest.fixture
def guest() -> Guest:
    return Guest()


async def test_a_file_goes_in_and_comes_out_with_its_mode(tmp_path: Path, guest: Guest) -> None:
    local = tmp_path / "tool.sh"
    local.write_bytes(b"#!/bin/sh\necho hi\n")
    local.chmod(0o751)
    remote = tmp_path / "vm"
    remote.mkdir()
    await _files.put(guest, str(remote / "tool.sh"), local)  # type: ignore[arg-type]
    assert (remote / "tool.sh").read_bytes() == local.read_bytes()
    assert (remote / "tool.sh").stat().st_mode & 0o7777 == 0o751
    out = tmp_path / "out"
    out.mkdir()
    await _files.get(guest, str(remote / "tool.sh"), out)  # type: ignore[arg-type]
    assert (out / "tool.sh").read_bytes() == local.read_bytes()  # into a folder: its name
    assert (out / "tool.sh").stat().st_mode & 0o7777 == 0o751
    assert sorted(p.name for p in out.iterdir()) == ["tool.sh"]  # nothing left beside it
    assert await _files.get(guest, str(remote / "tool.sh")) == local.read_bytes()  # type: ignore[arg-type]


async def test_bytes_and_an_open_file_go_in_and_an_open_file_takes_one_out(
    tmp_path: Path, guest: Guest
) -> None:
    await _files.put(guest, str(tmp_path / "a"), b"data", mode=0o600)  # type: ignore[arg-type]
    assert (tmp_path / "a").read_bytes() == b"data"
    assert (tmp_path / "a").stat().st_mode & 0o777 == 0o600
    await _files.put(guest, str(tmp_path / "b"), io.BytesIO(b"x" * 3_000_000))  # type: ignore[arg-type]
    assert (tmp_path / "b").stat().st_size == 3_000_000
    assert guest.largest_read <= _files.CHUNK  # streamed in chunks, never whole
    sink = io.BytesIO()
    await _files.get(guest, str(tmp_path / "b"), sink)  # type: ignore[arg-type]
    assert sink.getvalue() == b"x" * 3_000_000


async def test_a_folder_goes_in_and_comes_out_whole(tmp_path: Path, guest: Guest) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_bytes(b"f")
    (src / "run").write_bytes(b"r")
    (src / "run").chmod(0o700)
    os.symlink("sub/f", src / "link")
    vm = tmp_path / "vm"
    vm.mkdir()
    await _files.put(guest, str(vm), src)  # type: ignore[arg-type]
    assert (vm / "src" / "sub" / "f").read_bytes() == b"f"  # an existing folder: under its name
    assert (vm / "src" / "run").stat().st_mode & 0o777 == 0o700
    assert os.readlink(vm / "src" / "link") == "sub/f"
    back = tmp_path / "back"
    await _files.get(guest, str(vm / "src"), back)  # type: ignore[arg-type]
    assert (back / "sub" / "f").read_bytes() == b"f"
    assert (back / "run").stat().st_mode & 0o777 == 0o700
    assert os.readlink(back / "link") == "sub/f"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back", "src", "vm"]


def _archive(tmp: Path, *members: tarfile.TarInfo) -> Path:
    """A folder in the guest whose `tar -c` gives these entries: a tar binary stand-in."""
    folder = tmp / "evil"
    folder.mkdir()
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    (tmp / "evil.tar").write_bytes(data.getvalue())
    return folder


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    ("members", "why"),
    [
        ([_entry("../escaped")], "outside"),
        ([_entry("/etc/escaped")], "outside"),
        ([_entry("a/../../escaped")], "outside"),
        ([_entry("out", tarfile.SYMTYPE, "/etc")], "a link to '/etc'"),
        ([_entry("out", tarfile.SYMTYPE, "../..")], "outside"),
        ([_entry("out", tarfile.SYMTYPE, "."), _entry("out/../../x")], "outside"),
        ([_entry("d", tarfile.DIRTYPE), _entry("d/l", tarfile.SYMTYPE, "../../..")], "outside"),
        ([_entry("hard", tarfile.LNKTYPE, "../x")], "outside"),
        ([_entry("dev", tarfile.CHRTYPE)], "not a file, folder or link"),
        ([_entry("fifo", tarfile.FIFOTYPE)], "not a file, folder or link"),
    ],
)
async def test_an_entry_that_would_land_outside_the_folder_is_refused_and_nothing_is_left(
    tmp_path: Path, guest: Guest, members: list[tarfile.TarInfo], why: str
) -> None:
    _archive(tmp_path, *members)
    # The guest's folder is sent as this archive (a guest whose tar was replaced, as an
    # attacker inside the MicroVM would).
    evil = f'printf "D\\n"; cat {tmp_path / "evil.tar"}'
    target = tmp_path / "target"
    target.mkdir()
    original = _files.GET
    try:
        _files.GET = evil  # type: ignore[misc]
        with pytest.raises(FileTransferError, match=why):
            await _files.get(guest, "/evil", target)  # type: ignore[arg-type]
    finally:
        _files.GET = original  # type: ignore[misc]
    assert list(target.iterdir()) == []
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()


async def test_a_missing_path_and_an_unwritable_target_are_one_line_each(
    tmp_path: Path, guest: Guest
) -> None:
    with pytest.raises(
        FileTransferError, match=r"copying from claim-1:/nowhere/x: /nowhere/x: no such"
    ):
        await _files.get(guest, "/nowhere/x", tmp_path / "x")  # type: ignore[arg-type]
    (tmp_path / "f").write_bytes(b"f")
    with pytest.raises(FileTransferError, match="cannot write"):
        await _files.get(guest, str(tmp_path / "f"), tmp_path / "no" / "such" / "f")  # type: ignore[arg-type]
    with pytest.raises(FileTransferError, match="copying to claim-1:/proc/nope/x"):
        await _files.put(guest, "/proc/nope/x", b"x")  # type: ignore[arg-type]
    with pytest.raises(FileTransferError, match="give a local folder"):
        await _files.get(guest, str(tmp_path))  # type: ignore[arg-type]
