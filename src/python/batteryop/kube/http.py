"""HTTP/1.1 to one API server over asyncio streams: the transport under `KubeClient`.

`KubeClient` needs little of HTTP: one origin, requests with JSON bodies, answers with a
`Content-Length` or chunked body (gzip when the server chose it), a streamed body for watches,
kept-alive connections, a bound on connections, a total timeout per request and a per-read one
for streams, TLS with the kubeconfig's context. That is what this module does, on the standard
library alone. It replaced aiohttp there because importing aiohttp (and attrs, yarl, multidict,
the email package it brings) took 100-130 ms of a 300 ms `battery run` budget on the
development machine, more than everything the command does on the network
(docs/dev/client-performance.md); nothing of aiohttp's server side or its other features was
used. The deployables' own HTTP servers (`obs.health`) still use aiohttp's server.
Measured again for issue 46 (`python -X importtime`, aiohttp 3.14.5, bytecode cached, after
`asyncio`, `ssl`, `zlib` and `json`, which both need, median of 11 runs on a 2-core machine at
load 10): `import aiohttp` 1.61 s, `import batteryop.kube.http` 17 ms; most of aiohttp's is its
connector building default TLS contexts from the system's CA store, which the client never uses
(84 ms of aiohttp, 35 ms of it those contexts, at load 2 in docs/dev/client-performance.md).
The `client-is-light` import contract (pyproject.toml) keeps aiohttp out of the client wheel.

    pool = ConnectionPool("https://10.0.0.1:6443", ssl_context, {"User-Agent": "me"})
    answer = await pool.request("GET", "/api/v1/namespaces", {}, None, timeout=30)
    async with pool.stream("GET", "/api/v1/pods?watch=true", {}, read_timeout=330) as body:
        async for line in body.lines(): ...
    await pool.aclose()

Connections: at most `limit` at once (a request waits for one); an answer read to its end on a
connection the server keeps open goes back to the idle list, most recent first, and is taken
again if the server has not closed it meanwhile and it has idled under `MAX_IDLE_SECONDS` (the
API server drops idle connections after 90 s). A request that fails on a reused connection
before any byte of the answer came (the server closed it as we wrote) is sent again once on a
new connection when it is idempotent (GET, PUT, DELETE), as Go's client does; a POST or PATCH
fails instead, since it may have been done. A connection whose exchange was cut (timeout,
cancellation, a body not read to the end) is closed, never reused.

Failures are `HttpError` (a `ConnectionError`, so an `OSError`), TLS errors (`ssl.SSLError`,
an `OSError`) and `TimeoutError` (on 3.10 also `asyncio.TimeoutError`: `TIMEOUT_ERRORS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from batteryop.api._compat import within

MAX_IDLE_SECONDS: Final = 60.0
"""An idle connection older than this is closed rather than reused (the API server's idle
timeout is 90 s)."""
DEFAULT_LIMIT: Final = 100
"""Connections open at once, per pool, by default (a watch holds one for its whole life)."""
MAX_HEAD_BYTES: Final = 1024 * 1024
"""The longest status line and headers read; also the longest chunk-size line."""
READ_BYTES: Final = 256 * 1024
"""What one read of a body without a length asks for."""
IDEMPOTENT: Final = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class HttpError(ConnectionError):
    """The connection failed, or the server's answer was not HTTP/1.1 this client reads."""


@dataclass(frozen=True)
class Response:
    """A whole answer: its status, headers (names lower-cased, repeats joined by ", ") and
    body (decompressed)."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class _Connection:
    """One TCP (and TLS) connection, and when it went idle."""

    __slots__ = ("reader", "writer", "idle_since")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        """Still open at both ends (a server's close arrives as EOF while it idles), nothing
        unread on it, and not idle too long."""
        return (
            not self.reader.at_eof()
            and not self.writer.is_closing()
            and not self.reader._buffer  # type: ignore[attr-defined]  # bytes nobody asked for
            and now - self.idle_since < MAX_IDLE_SECONDS
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing anyway; TLS may already be torn down
            self.writer.close()


class Body:
    """A streamed answer's status, headers and body (see `ConnectionPool.stream`)."""

    def __init__(
        self,
        status: int,
        headers: Mapping[str, str],
        connection: _Connection,
        read_timeout: float | None,
    ) -> None:
        self.status = status
        self.headers = headers
        self._reader = connection.reader
        self._read_timeout = read_timeout
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self._left = _content_length(length) if length is not None and not self._chunked else -1
        self._gzip = _decoder(headers)
        self.done = False
        """The body was read to its end (the connection may then be reused)."""

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they come, decompressed; each read waits at most the read
        timeout (`TimeoutError`)."""
        while not self.done:
            data = await within(self._next(), self._read_timeout)
            if self._gzip is not None:
                data = self._gzip.decompress(data)
                if self.done:
                    data += self._gzip.flush()
            if data:
                yield data

    async def _next(self) -> bytes:
        reader = self._reader
        try:
            if self._chunked:
                size = _chunk_size(await reader.readuntil(b"\r\n"))
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any
                        pass
                    self.done = True
                    return b""
                data = await reader.readexactly(size)
                if await reader.readexactly(2) != b"\r\n":
                    raise HttpError("a chunk does not end with CRLF")
                return data
            if self._left >= 0:
                if self._left == 0:
                    self.done = True
                    return b""
                data = await reader.read(min(self._left, READ_BYTES))
                if not data:
                    raise HttpError(f"the connection closed {self._left} bytes before the end")
                self._left -= len(data)
                self.done = self._left == 0
                return data
            data = await reader.read(READ_BYTES)  # no length: the body ends with the connection
            self.done = not data
            return data
        except asyncio.IncompleteReadError as e:
            raise HttpError("the connection closed in the middle of the body") from e
        except asyncio.LimitOverrunError as e:
            raise HttpError("a chunk-size line is too long") from e

    async def read(self) -> bytes:
        """The rest of the body, whole."""
        return b"".join([chunk async for chunk in self.chunks()])

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split at each newline (a watch's events), of any length, without it."""
        pending = b""
        async for chunk in self.chunks():
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line
        if pending:
            yield pending


class ConnectionPool:
    """Kept-alive HTTP/1.1 connections to the origin of `url` (http or https: `ssl` is then
    the context to verify with); `headers` go with every request."""

    def __init__(
        self,
        url: str,
        ssl_context: ssl.SSLContext | None,
        headers: Mapping[str, str],
        *,
        limit: int = DEFAULT_LIMIT,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {url!r}")
        self._host = parts.hostname
        self._tls = ssl_context if parts.scheme == "https" else None
        if parts.scheme == "https" and ssl_context is None:
            self._tls = ssl.create_default_context()
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        """The URL's path, which every request's path is put after (a server behind a proxy
        path)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        default_port = 443 if self._tls is not None else 80
        authority = host if self._port == default_port else f"{host}:{self._port}"
        self._head = "".join(
            f"{name}: {value}\r\n"
            for name, value in {"Host": authority, "Accept-Encoding": "gzip", **headers}.items()
        )
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._closed = False

    async def aclose(self) -> None:
        """Close every connection, idle or in use (an exchange on one then fails)."""
        self._closed = True
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        timeout: float | None,
    ) -> Response:
        """Send one request (`target`: path and query) and read its whole answer, all within
        `timeout` seconds (`TimeoutError`)."""
        return await within(self._request(method, target, headers, body), timeout)

    async def _request(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> Response:
        async with self._slots:
            for attempt in (1, 2):
                connection, reused = await self._take()
                kept = False
                try:
                    try:
                        status, answer_headers = await self._exchange(
                            connection, method, target, headers, body
                        )
                    except (HttpError, OSError) as e:
                        # Nothing came back on a kept connection: the server closed it as we
                        # wrote. Once more on a new one, if doing it twice cannot matter.
                        if reused and attempt == 1 and method in IDEMPOTENT and _nothing_read(e):
                            continue
                        raise
                    answer = Body(status, answer_headers, connection, None)
                    data = b"" if _no_body(method, status) else await answer.read()
                    kept = (_no_body(method, status) or answer.done) and _keeps(answer_headers)
                    return Response(status, answer_headers, data)
                finally:
                    self._give_back(connection, kept)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> AsyncIterator[Body]:
        """Send one request and hand over its answer as it comes: the status line and headers
        within `connect_timeout`, then each read of the body within `read_timeout`. The
        connection is kept only if the body was read to its end."""
        async with self._slots:
            connection, _ = await self._take()
            kept = False
            try:
                status, answer_headers = await within(
                    self._exchange(connection, method, target, headers, None), connect_timeout
                )
                body = Body(status, answer_headers, connection, read_timeout)
                yield body
                kept = body.done and _keeps(answer_headers)
            finally:
                self._give_back(connection, kept)

    async def _take(self) -> tuple[_Connection, bool]:
        """An idle connection that is still good (True), else a new one (False)."""
        if self._closed:
            raise HttpError("the connection pool is closed")
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now):
                return connection, True
            self._forget(connection)
        reader, writer = await asyncio.open_connection(
            self._host,
            self._port,
            ssl=self._tls,
            server_hostname=self._host if self._tls is not None else None,
            limit=MAX_HEAD_BYTES,
        )
        connection = _Connection(reader, writer)
        if self._closed:  # closed while connecting
            connection.close()
            raise HttpError("the connection pool is closed")
        self._open.add(connection)
        return connection, False

    def _give_back(self, connection: _Connection, keep: bool) -> None:
        if keep and not self._closed and connection in self._open:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            self._forget(connection)

    def _forget(self, connection: _Connection) -> None:
        self._open.discard(connection)
        connection.close()

    async def _exchange(
        self,
        connection: _Connection,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
    ) -> tuple[int, dict[str, str]]:
        """Write the request; read the status line and headers of its answer."""
        head = [f"{method} {self.prefix}{target} HTTP/1.1\r\n", self._head]
        head.extend(f"{name}: {value}\r\n" for name, value in headers.items())
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body or b'')}\r\n")
        head.append("\r\n")
        writer = connection.writer
        writer.write("".join(head).encode("latin-1") + (body or b""))
        await writer.drain()
        try:
            while True:
                raw = await connection.reader.readuntil(b"\r\n\r\n")
                status, answer_headers = _parse_head(raw)
                if status >= 200 or status == 101:
                    return status, answer_headers
                # 1xx (100 Continue, 103 Early Hints): another head follows.
        except asyncio.IncompleteReadError as e:
            raise _ClosedBeforeAnswer(
                (
                    "the server closed the connection before answering"
                    if not e.partial
                    else "the connection closed in the middle of the answer's head"
                ),
                nothing_read=not e.partial,
            ) from e
        except asyncio.LimitOverrunError as e:
            raise HttpError(f"the answer's head is over {MAX_HEAD_BYTES} bytes") from e


class _ClosedBeforeAnswer(HttpError):
    def __init__(self, message: str, *, nothing_read: bool) -> None:
        super().__init__(message)
        self.nothing_read = nothing_read


def _nothing_read(error: Exception) -> bool:
    """Whether `error` means no byte of the answer arrived (so the request can be sent
    again on another connection, if it is idempotent)."""
    if isinstance(error, _ClosedBeforeAnswer):
        return error.nothing_read
    return isinstance(error, ConnectionResetError | BrokenPipeError)


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise HttpError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpError(f"a malformed header line: {line[:100]!r}")
        key, value = name.lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if version == "HTTP/1.0" and "keep-alive" not in headers.get("connection", "").lower():
        headers["connection"] = "close"
    return int(code), headers


def _chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise HttpError(f"a malformed chunk-size line: {line[:40]!r}") from None


def _content_length(value: str) -> int:
    if not value.strip().isdigit():
        raise HttpError(f"a malformed Content-Length: {value[:40]!r}")
    return int(value)


def _no_body(method: str, status: int) -> bool:
    return method == "HEAD" or status in (204, 304)


def _keeps(headers: Mapping[str, str]) -> bool:
    return "close" not in headers.get("connection", "").lower()


def _decoder(headers: Mapping[str, str]) -> zlib._Decompress | None:
    encoding = headers.get("content-encoding", "identity").lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise HttpError(f"an answer in an encoding this client did not ask for: {encoding}")
