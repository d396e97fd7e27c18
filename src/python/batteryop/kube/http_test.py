"""`ConnectionPool` against a raw asyncio server that answers with exactly the bytes each test
gives: framing (Content-Length, chunked with extensions and trailers, to the close, gzip),
keep-alive and its limits, the one retry on a reused connection, timeouts, and streams.

`KubeClient`'s own tests run the same transport against a real kube-apiserver; these cover what
an API server does rarely or never on loopback (closing a kept connection as a request arrives,
1xx heads, malformed answers)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from batteryop.kube.http import MAX_IDLE_SECONDS, ConnectionPool, HttpError

Handler = Callable[[int, bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request (the connection's number and the request's head): whether to keep the
connection for another request."""


@dataclass
class Server:
    port: int
    connections: int = 0
    requests: list[tuple[int, bytes]] = field(default_factory=list)
    """(connection number, request head and body) in the order they came."""
    open_now: int = 0
    most_open: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


async def _read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.decode("latin-1").split("\r\n"):
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    return head + (await reader.readexactly(length) if length else b"")


Serve = Callable[[Handler], Awaitable[Server]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []
    writers: list[asyncio.StreamWriter] = []

    async def start(handler: Handler) -> Server:
        state = Server(0)

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writers.append(writer)
            state.connections += 1
            number = state.connections
            state.open_now += 1
            state.most_open = max(state.most_open, state.open_now)
            try:
                while (request := await _read_request(reader)) is not None:
                    state.requests.append((number, request))
                    if not await handler(number, request, reader, writer):
                        break
            finally:
                state.open_now -= 1
                writer.close()

        server = await asyncio.start_server(connection, "127.0.0.1", 0)
        servers.append(server)
        state.port = server.sockets[0].getsockname()[1]
        return state

    yield start
    for writer in writers:
        writer.close()
    for server in servers:
        server.close()
        await server.wait_closed()


def answer(body: bytes, *headers: str, status: str = "200 OK") -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers, f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode() + body


def ok(body: bytes = b"{}", *headers: str) -> Handler:
    async def handler(
        _: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> bool:
        w.write(answer(body, *headers))
        await w.drain()
        return True

    return handler


async def test_a_kept_connection_carries_the_next_requests(serve: Serve) -> None:
    server = await serve(ok(b'{"a": 1}', "Content-Type: application/json"))
    pool = ConnectionPool(server.url, None, {"User-Agent": "t"})
    for _ in range(3):
        got = await pool.request("GET", "/x?a=b", {"Authorization": "Bearer t"}, None, timeout=5)
        assert (got.status, got.body, got.headers["content-type"]) == (
            200,
            b'{"a": 1}',
            "application/json",
        )
    await pool.aclose()
    assert server.connections == 1
    head = server.requests[0][1].decode()
    assert head.startswith("GET /x?a=b HTTP/1.1\r\n")
    assert f"Host: 127.0.0.1:{server.port}\r\n" in head
    assert "User-Agent: t\r\n" in head and "Authorization: Bearer t\r\n" in head


async def test_a_body_goes_with_its_length(serve: Serve) -> None:
    server = await serve(ok(b"{}"))
    pool = ConnectionPool(server.url, None, {})
    await pool.request("POST", "/p", {"Content-Type": "application/json"}, b'{"k":"v"}', timeout=5)
    await pool.request("PATCH", "/p", {}, None, timeout=5)
    await pool.aclose()
    first, second = (r.decode() for _, r in server.requests)
    assert "Content-Length: 9\r\n" in first and first.endswith('\r\n\r\n{"k":"v"}')
    assert "Content-Length: 0\r\n" in second


async def test_chunked_with_extensions_and_trailers_then_the_connection_is_reused(
    serve: Serve,
) -> None:
    async def chunked(
        _: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> bool:
        w.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"4;ext=1\r\nabcd\r\n1\r\ne\r\n0\r\nX-Trailer: 1\r\n\r\n"
        )
        await w.drain()
        return True

    server = await serve(chunked)
    pool = ConnectionPool(server.url, None, {})
    assert (await pool.request("GET", "/", {}, None, timeout=5)).body == b"abcde"
    assert (await pool.request("GET", "/", {}, None, timeout=5)).body == b"abcde"
    await pool.aclose()
    assert server.connections == 1


async def test_gzip_is_asked_for_and_undone(serve: Serve) -> None:
    big = b'{"items": [' + b'{"x": 1},' * 20000 + b"{}]}"
    server = await serve(ok(gzip.compress(big), "Content-Encoding: gzip"))
    pool = ConnectionPool(server.url, None, {})
    got = await pool.request("GET", "/", {}, None, timeout=5)
    await pool.aclose()
    assert got.body == big
    assert "Accept-Encoding: gzip\r\n" in server.requests[0][1].decode()


async def test_connection_close_and_http_1_0_answers_are_not_reused(serve: Serve) -> None:
    async def closing(n: int, _: bytes, __: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        if n == 1:
            w.write(answer(b"1", "Connection: close"))
        else:
            w.write(b"HTTP/1.0 200 OK\r\n\r\nto the close")  # no length: ends with the connection
        await w.drain()
        return False

    server = await serve(closing)
    pool = ConnectionPool(server.url, None, {})
    assert (await pool.request("GET", "/", {}, None, timeout=5)).body == b"1"
    assert (await pool.request("GET", "/", {}, None, timeout=5)).body == b"to the close"
    await pool.aclose()
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_not_used(serve: Serve) -> None:
    async def once(_: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(answer(b"{}"))
        await w.drain()
        return False  # the server closes the connection after each answer, without saying so

    server = await serve(once)
    pool = ConnectionPool(server.url, None, {})
    await pool.request("POST", "/", {}, b"{}", timeout=5)
    await asyncio.sleep(0.05)  # the server's close arrives while the connection idles
    await pool.request("POST", "/", {}, b"{}", timeout=5)  # not idempotent: no retry to lean on
    await pool.aclose()
    assert server.connections == 2
    assert [n for n, _ in server.requests] == [1, 2]


def _dropping_the_second_request() -> Handler:
    """Answers the first request of connection 1, then reads its second and closes without a
    word, as a server closing an idle connection just as a request arrives; other connections
    are answered."""

    async def handler(n: int, _: bytes, __: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        if n == 1 and handler.seen:  # type: ignore[attr-defined]
            return False
        handler.seen = True  # type: ignore[attr-defined]
        w.write(answer(b"{}"))
        await w.drain()
        return True

    handler.seen = False  # type: ignore[attr-defined]
    return handler


async def test_an_idempotent_request_lost_on_a_kept_connection_is_sent_once_more(
    serve: Serve,
) -> None:
    server = await serve(_dropping_the_second_request())
    pool = ConnectionPool(server.url, None, {})
    await pool.request("GET", "/", {}, None, timeout=5)
    got = await pool.request("DELETE", "/x", {}, b"{}", timeout=5)
    await pool.aclose()
    assert got.status == 200
    assert [n for n, _ in server.requests] == [1, 1, 2]


async def test_a_post_lost_on_a_kept_connection_fails_rather_than_run_twice(
    serve: Serve,
) -> None:
    server = await serve(_dropping_the_second_request())
    pool = ConnectionPool(server.url, None, {})
    await pool.request("GET", "/", {}, None, timeout=5)
    with pytest.raises(HttpError, match="closed the connection before answering"):
        await pool.request("POST", "/x", {}, b"{}", timeout=5)
    await pool.aclose()
    assert [n for n, _ in server.requests] == [1, 1]


async def test_an_answer_that_does_not_come_times_out_and_its_connection_is_dropped(
    serve: Serve,
) -> None:
    async def late(n: int, _: bytes, __: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        if n == 1:
            await asyncio.sleep(30)
        w.write(answer(b"{}"))
        await w.drain()
        return True

    server = await serve(late)
    pool = ConnectionPool(server.url, None, {})
    with pytest.raises(TimeoutError):
        await pool.request("GET", "/", {}, None, timeout=0.2)
    assert (await pool.request("GET", "/", {}, None, timeout=5)).status == 200
    await pool.aclose()
    assert server.connections == 2


async def test_at_most_limit_connections_are_open(serve: Serve) -> None:
    release = asyncio.Event()

    async def slow(_: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        await release.wait()
        w.write(answer(b"{}"))
        await w.drain()
        return True

    server = await serve(slow)
    pool = ConnectionPool(server.url, None, {}, limit=2)
    calls = [asyncio.ensure_future(pool.request("GET", "/", {}, None, timeout=5)) for _ in range(5)]
    while len(server.requests) < 2:
        await asyncio.sleep(0.01)
    assert server.open_now == 2
    release.set()
    assert {r.status for r in await asyncio.gather(*calls)} == {200}
    await pool.aclose()
    assert server.most_open == 2


async def test_informational_heads_are_skipped(serve: Serve) -> None:
    async def early(_: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + answer(b"done"))
        await w.drain()
        return True

    server = await serve(early)
    pool = ConnectionPool(server.url, None, {})
    got = await pool.request("GET", "/", {}, None, timeout=5)
    await pool.aclose()
    assert (got.status, got.body) == (200, b"done")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "malformed chunk-size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "closed 5 bytes before the end"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\n\r\n", "did not ask for: br"),
    ],
)
async def test_an_answer_this_client_cannot_read_is_an_http_error(
    serve: Serve, raw: bytes, message: str
) -> None:
    async def bad(_: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(raw)
        await w.drain()
        return False

    server = await serve(bad)
    pool = ConnectionPool(server.url, None, {})
    with pytest.raises(HttpError, match=message):
        await pool.request("GET", "/", {}, None, timeout=5)
    await pool.aclose()


async def test_a_stream_yields_lines_of_any_length_across_chunks_and_times_out_reads(
    serve: Serve,
) -> None:
    long_line = b'{"type": "ADDED", "pad": "' + b"x" * 300_000 + b'"}'
    stall = asyncio.Event()

    async def watch(_: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b'{"a":', b"1}\n" + long_line[:1000], long_line[1000:] + b"\n{", b'"b":2}\n'):
            w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await w.drain()
            await asyncio.sleep(0.01)
        await stall.wait()
        return False

    server = await serve(watch)
    pool = ConnectionPool(server.url, None, {})
    lines = []

    async def collect() -> None:
        async with pool.stream("GET", "/w", {}, connect_timeout=5, read_timeout=0.3) as body:
            assert body.status == 200
            async for line in body.lines():
                lines.append(line)

    with pytest.raises(TimeoutError):
        await collect()
    stall.set()
    await pool.aclose()
    assert lines == [b'{"a":1}', long_line, b'{"b":2}']


async def test_closing_the_pool_ends_a_stream_in_use(serve: Serve) -> None:
    async def hold(_: int, __: bytes, ___: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await w.drain()
        await asyncio.sleep(30)
        return False

    server = await serve(hold)
    pool = ConnectionPool(server.url, None, {})

    async def read_all() -> None:
        async with pool.stream("GET", "/w", {}, connect_timeout=5, read_timeout=None) as body:
            await body.read()

    reading = asyncio.ensure_future(read_all())
    while not server.requests:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    await pool.aclose()
    with pytest.raises(HttpError):
        await asyncio.wait_for(reading, 5)
    with pytest.raises(HttpError, match="closed"):
        await pool.request("GET", "/", {}, None, timeout=5)


def test_only_http_urls_with_a_host() -> None:
    with pytest.raises(ValueError, match="not an http"):
        ConnectionPool("unix:///run/x.sock", None, {})
    assert MAX_IDLE_SECONDS < 90  # under the API server's idle timeout
