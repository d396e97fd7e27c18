"""Files in and out of a claim's MicroVM (CC-115), over the exec path and nothing else: the
Holder's token, the Exec Agent's authorization, one exec per copy, streamed both ways.

- **In** (`put`): a file is the exec's stdin, written by the guest's `cat` to a temporary name
  beside the target, given its mode, then renamed over it; a folder is a tar stream made on the
  fly (never the whole archive in memory) and unpacked by the guest's `tar`.
- **Out** (`get`): the guest says what the path is (`F <mode>` or `D`, one line), then sends
  the file (`cat`) or the folder (`tar -c`). A file lands under a temporary name beside the
  target and is renamed into place once whole; a folder is unpacked beside the target and
  renamed into place, each entry checked first: an absolute name, a `..`, a link out of the
  folder, a device or a FIFO is refused with the entry's name, and nothing is left behind.

Like `cp -r`: a target that is an existing folder receives the source under its own name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Union

from batteryop.client._exceptions import FileTransferError

if TYPE_CHECKING:
    from batteryop.client._async import AsyncClaim

CHUNK: Final = 1 << 20
Source = Union[bytes, str, "os.PathLike[str]", IO[bytes]]
"""What `put` sends: bytes, a local file or folder by path, or an open binary file."""
Target = Union[str, "os.PathLike[str]", IO[bytes]]
"""Where `get` writes: a local path (a folder receives the copy under its own name), or an
open binary file (a folder arrives as a tar stream)."""

# $1 the target, $2 the source's name (for a target that is a folder), $3 the mode.
PUT_FILE: Final = (
    't=$1; [ -d "$t" ] && t="$t/$2"; tmp="$t.battery-put.$$"; '
    'trap \'rm -f "$tmp"\' EXIT; cat > "$tmp" && chmod "$3" "$tmp" && mv -f "$tmp" "$t" '
    "&& trap - EXIT"
)
PUT_FOLDER: Final = (
    't=$1; [ -d "$t" ] && t="$t/$2"; mkdir -p "$t" && tar -x -p --no-same-owner -C "$t"'
)
GET: Final = (
    'if [ -d "$1" ]; then printf "D\\n"; exec tar -c -C "$1" .; '
    'elif [ -f "$1" ]; then printf "F %s\\n" "$(stat -c %a "$1")"; exec cat "$1"; '
    'else echo "$1: no such file or folder" >&2; exit 2; fi'
)


# Entries are checked by `_unpack` itself; where Python has tar filters (3.10.12+, 3.11.4+),
# the one that keeps modes as they are, so that 3.14's default (`data`) changes none.
_TRUSTED: Final = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}


def _sh(script: str, *args: str) -> list[str]:
    return ["sh", "-c", script, "battery-cp", *args]


async def _chunks(file: IO[bytes]) -> AsyncIterator[bytes]:
    while chunk := await asyncio.to_thread(file.read, CHUNK):
        yield chunk


async def _tar_stream(folder: Path) -> AsyncIterator[bytes]:
    """`folder` as a tar stream, made on a thread as it is read (at most a few chunks held)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(maxsize=4)

    class Writer:
        def write(self, data: bytes) -> int:
            asyncio.run_coroutine_threadsafe(queue.put(bytes(data)), loop).result()
            return len(data)

    def make() -> None:
        try:
            writer: Any = Writer()  # tarfile takes any object with write()
            with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                tar.add(folder, arcname=".")
            end: BaseException | None = None
        except BaseException as e:  # handed to the reader
            end = e
        asyncio.run_coroutine_threadsafe(queue.put(end), loop).result()

    threading.Thread(target=make, name="battery-cp-tar", daemon=True).start()
    while True:
        item = await queue.get()
        if item is None:
            return
        if isinstance(item, BaseException):
            raise FileTransferError(f"cannot read {folder}: {item}")
        yield item


async def put(claim: AsyncClaim, path: str, source: Source, *, mode: int | None = None) -> None:
    """Copy `source` to `path` in the claim's MicroVM (CC-115)."""
    name = "file"
    with contextlib.ExitStack() as stack:
        if isinstance(source, bytes):
            argv = _sh(PUT_FILE, path, name, f"{mode or 0o644:o}")
            stdin: AsyncIterator[bytes] = _one(source)
        elif isinstance(source, str | os.PathLike):
            local = Path(source)
            name = local.name
            if local.is_dir():
                argv, stdin = _sh(PUT_FOLDER, path, name), _tar_stream(local)
            else:
                try:
                    file = stack.enter_context(await asyncio.to_thread(local.open, "rb"))
                    file_mode = mode or stat.S_IMODE(os.fstat(file.fileno()).st_mode)
                except OSError as e:
                    raise FileTransferError(f"cannot read {local}: {e.strerror}") from e
                argv, stdin = _sh(PUT_FILE, path, name, f"{file_mode:o}"), _chunks(file)
        else:
            argv, stdin = _sh(PUT_FILE, path, name, f"{mode or 0o644:o}"), _chunks(source)
        err: list[bytes] = []
        result = await claim.exec_stream(argv, stdin=stdin, stdout=_ignore, stderr=err.append)
    _check(result.exit_code, err, f"copying to {claim.name}:{path}", claim.name)


async def _one(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), CHUNK):
        yield data[i : i + CHUNK]


def _ignore(_: bytes) -> None:
    return None


def _check(code: int, err: list[bytes], what: str, claim: str) -> None:
    if code != 0:
        said = b"".join(err).decode(errors="replace").strip().splitlines()
        why = said[-1] if said else f"exit code {code}"
        raise FileTransferError(f"{what}: {why}", claim=claim)


class _Receiver:
    """Takes the guest's answer as it streams: the header line, then the file or the folder."""

    def __init__(self, target: Path | IO[bytes] | None, remote: str) -> None:
        self.target = target
        self.remote = remote
        self.header = b""
        self.kind = ""
        self.mode = 0o644
        self.memory: list[bytes] = []
        self._file: IO[bytes] | None = None
        self._tmp: Path | None = None
        self._pipe: IO[bytes] | None = None
        self._unpacker: asyncio.Future[None] | None = None
        self.final: Path | None = None

    async def take(self, data: bytes) -> None:
        if not self.kind:
            self.header += data
            line, found, data = self.header.partition(b"\n")
            if not found:
                return
            self._start(line.decode(errors="replace"))
        if data:
            await self._write(data)

    def _start(self, line: str) -> None:
        kind, _, mode = line.partition(" ")
        self.kind = kind
        if kind == "F":
            self.mode = int(mode or "644", 8) & 0o7777
        if isinstance(self.target, Path):
            self.final = _place(self.target, posixpath.basename(self.remote.rstrip("/")))
            try:
                self._tmp = Path(
                    tempfile.mkdtemp(prefix=f".{self.final.name}.", dir=self.final.parent)
                )
            except OSError as e:
                raise FileTransferError(f"cannot write {self.final}: {e.strerror}") from e
        if kind == "D" and self._tmp is None:
            if self.target is None:
                raise FileTransferError(f"{self.remote} is a folder: give a local folder for it")
        elif kind == "D" and self._tmp is not None:
            read, write = os.pipe()
            self._pipe = os.fdopen(write, "wb")
            self._unpacker = asyncio.ensure_future(
                asyncio.to_thread(_unpack, os.fdopen(read, "rb"), self._tmp)
            )
        elif self._tmp is not None:
            self._file = (self._tmp / "file").open("wb")

    async def _write(self, data: bytes) -> None:
        if self._pipe is not None:
            assert self._unpacker is not None
            if self._unpacker.done():
                self._unpacker.result()  # its refusal, raised here
            try:
                await asyncio.to_thread(self._pipe.write, data)
            except BrokenPipeError:
                await self._unpacker  # it stopped reading: its refusal
                raise
        elif self._file is not None:
            await asyncio.to_thread(self._file.write, data)
        elif self.target is None:
            self.memory.append(data)
        else:
            assert not isinstance(self.target, Path)
            await asyncio.to_thread(self.target.write, data)

    async def finish(self) -> None:
        """Put what came into place (after a whole, successful copy only)."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
            assert self._unpacker is not None
            await self._unpacker
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            assert self._tmp is not None and self.final is not None
            os.chmod(self._tmp / "file", self.mode)
            os.replace(self._tmp / "file", self.final)
        elif self._tmp is not None and self.final is not None:
            try:
                os.replace(self._tmp, self.final)  # a folder: its unpacked copy, renamed in
            except OSError as e:
                raise FileTransferError(f"cannot write {self.final}: {e.strerror}") from e
            self._tmp = None

    def discard(self) -> None:
        for closing in (self._file, self._pipe):
            if closing is not None:
                with contextlib.suppress(OSError):
                    closing.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)


def _place(target: Path, name: str) -> Path:
    """Where a copy named `name` lands for `target` (`cp`'s rule for an existing folder)."""
    return target / name if target.is_dir() else target


def _unpack(source: IO[bytes], into: Path) -> None:
    """Unpack a tar stream into `into`, refusing any entry that would land outside it."""
    root = os.path.realpath(into)
    with source, tarfile.open(fileobj=source, mode="r|") as tar:
        for member in tar:
            name = posixpath.normpath(member.name)
            if member.name.startswith("/") or name == ".." or name.startswith("../"):
                raise FileTransferError(f"refused {member.name!r}: it names a path outside")
            where = os.path.join(into, name)
            if not os.path.realpath(os.path.dirname(where)).startswith(root):
                raise FileTransferError(f"refused {member.name!r}: it goes through a link out")
            if member.issym() or member.islnk():
                base = posixpath.dirname(name) if member.issym() else ""
                link = posixpath.normpath(posixpath.join(base, member.linkname))
                if member.linkname.startswith("/") or link == ".." or link.startswith("../"):
                    raise FileTransferError(
                        f"refused {member.name!r}: a link to {member.linkname!r}, outside"
                    )
            elif not (member.isfile() or member.isdir()):
                raise FileTransferError(f"refused {member.name!r}: not a file, folder or link")
            if name == ".":
                os.chmod(into, member.mode & 0o7777)
                continue
            tar.extract(member, into, set_attrs=not member.issym(), **_TRUSTED)  # type: ignore[arg-type]


async def get(claim: AsyncClaim, path: str, target: Target | None = None) -> bytes | None:
    """Copy `path` out of the claim's MicroVM (CC-115): to `target`, or returned as bytes."""
    local = Path(target) if isinstance(target, str | os.PathLike) else target
    receiver = _Receiver(local, path)
    err: list[bytes] = []
    try:
        result = await claim.exec_stream(_sh(GET, path), stdout=receiver.take, stderr=err.append)
        _check(result.exit_code, err, f"copying from {claim.name}:{path}", claim.name)
        if receiver.kind not in ("F", "D"):
            raise FileTransferError(f"copying from {claim.name}:{path}: no answer from the guest")
        await receiver.finish()
    finally:
        receiver.discard()
    return b"".join(receiver.memory) if target is None else None
