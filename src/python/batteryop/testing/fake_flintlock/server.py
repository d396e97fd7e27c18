"""One fake flintlockd Host: its gRPC endpoint (which can go down and come up again), its
in-memory MicroVMs, its faults, and its JSON control API (TD-010, TD-011, TD-012).

The gRPC endpoint serves `MicroVM` (with ServerInfo), unless exec is disabled `MicroVMExec`,
and when the SSH proxy is enabled `MicroVMSSHProxy`, in plaintext or TLS; given a client CA it requires and verifies client
certificates. The control API is plain HTTP on a second port of the same loopback address; it
stays up while the gRPC endpoint is down.

Control API (JSON bodies and answers; errors are `{"error": ...}` with 400 or 404):

| Request | Body | Effect |
|---|---|---|
| `GET /status` | | `{"up", "target"}` |
| `POST /down` | | stop listening; in-flight RPCs are cancelled |
| `POST /up` | | listen again on the same address and port |
| `POST /slow-creates` | `{"seconds", "store_first"}` | delay every CreateMicroVM (0 stops) |
| `POST /fail-creates` | `{"code", "message", "times"}` | fail the next `times` creates |
| `POST /cut-next-exec-stream` | `{"code", "message", "after_chunks"}` | see `faults.StreamCut` |
| `POST /vm-state` | `{"uid", "state"}` | force a MicroVM's state |
| `GET /vms` | | `{"vms": [MicroVM as proto JSON]}` |
| `GET /execs` | | `{"execs": [ExecStart as proto JSON]}`, in the order they started |
| `GET /execs/{n}/session?wait_ended=s` | | `{"ended", "stdin_bytes", "stdin"}` of the n-th exec (0-based, as in `/execs`; `stdin` base64, its first MiB); with `wait_ended`, answers once the RPC ended or `s` seconds passed |
| `GET /exec-timings` | | `{"timings": [{"spawn_ms", "run_ms"}]}`: each command's process start and run, as they exited |
| `GET /guests` | | `{"guests": [...]}`: each running QEMU guest (uid, pid, agent and SSH ports, boot seconds, RSS); empty for sandboxes |
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import json_format

from battery_protos.flintlock.services.microvm.v1alpha1 import microvms_pb2_grpc
from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2_grpc
from battery_protos.flintlock.services.microvmsshproxy.v1alpha1 import microvmsshproxy_pb2_grpc
from batteryop.testing.fake_flintlock.execution import ExecService
from batteryop.testing.fake_flintlock.faults import (
    DEFAULT_CUT_CODE,
    DEFAULT_CUT_MESSAGE,
    CreateFailure,
    Faults,
    StreamCut,
)
from batteryop.testing.fake_flintlock.guests import Guests, SandboxGuests
from batteryop.testing.fake_flintlock.qemu import QemuGuests
from batteryop.testing.fake_flintlock.services import MicroVMService, ServerInfoConfig
from batteryop.testing.fake_flintlock.sshproxy import SSHProxyService
from batteryop.testing.fake_flintlock.vms import State, VmNotFoundError, VmStore
from batteryop.testing.faultcodes import status_code

log = logging.getLogger(__name__)


class FakeHostError(RuntimeError):
    """The fake Host could not bind its endpoint."""


@dataclass(frozen=True)
class TLSFiles:
    """PEM files for the gRPC endpoint; client_ca set means mutual TLS."""

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass(frozen=True)
class HostConfig:
    address: str
    state_dir: Path
    port: int = 0
    tls: TLSFiles | None = None
    info: ServerInfoConfig = field(default_factory=ServerInfoConfig)
    boot_delay: float = 0.0
    delete_delay: float = 0.0
    agent_delay: float = 0.0
    guests: str = "sandbox"
    """The `Guests` backend: "sandbox" or "qemu" (guests.py)."""


def make_guests(config: HostConfig, faults: Faults) -> Guests:
    if config.guests == "qemu":
        return QemuGuests(config.state_dir)
    if config.guests != "sandbox":
        raise ValueError(f"unknown guests backend {config.guests!r}")
    return SandboxGuests(
        boot_delay=config.boot_delay,
        timings=faults.exec_timings,
        ssh=config.info.ssh_proxy_enabled,
    )


def host_port(address: str, port: int) -> str:
    """ "127.0.0.2:9090", or "[::1]:9090" for IPv6."""
    if ipaddress.ip_address(address).version == 6:
        return f"[{address}]:{port}"
    return f"{address}:{port}"


class FakeHost:
    """A fake flintlockd Host on one address."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.faults = Faults()
        self.guests = make_guests(config, self.faults)
        self.store = VmStore(config.state_dir, self.guests, delete_delay=config.delete_delay)
        self.port = config.port
        self._server: grpc.aio.Server | None = None
        self._credentials = self._load_credentials(config.tls)

    @property
    def is_up(self) -> bool:
        return self._server is not None

    @property
    def target(self) -> str:
        return host_port(self.config.address, self.port)

    async def up(self) -> None:
        """Listen (again) on the address and port; the first `up` fixes a port 0."""
        if self._server is not None:
            return
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        microvms_pb2_grpc.add_MicroVMServicer_to_server(
            MicroVMService(self.store, self.faults, self.config.info), server
        )
        if self.config.info.exec_enabled:
            microvmexec_pb2_grpc.add_MicroVMExecServicer_to_server(
                ExecService(
                    self.store, self.guests, self.faults, agent_delay=self.config.agent_delay
                ),
                server,
            )
        if self.config.info.ssh_proxy_enabled:
            microvmsshproxy_pb2_grpc.add_MicroVMSSHProxyServicer_to_server(
                SSHProxyService(self.store, self.guests, agent_delay=self.config.agent_delay),
                server,
            )
        where = host_port(self.config.address, self.port)
        try:
            if self._credentials is None:
                port = server.add_insecure_port(where)
            else:
                port = server.add_secure_port(where, self._credentials)
        except RuntimeError as err:
            raise FakeHostError(f"binding {where}: {err}") from err
        if port == 0:
            raise FakeHostError(f"binding {where} failed")
        await server.start()
        self.port = port
        self._server = server
        log.info("fake flintlockd listening on %s", self.target)

    async def down(self) -> None:
        """Stop listening; in-flight RPCs end at once (their commands are killed)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(None)
            log.info("fake flintlockd on %s is down", self.target)

    async def close(self) -> None:
        await self.down()
        self.store.close()
        await self.guests.close()

    @staticmethod
    def _load_credentials(tls: TLSFiles | None) -> grpc.ServerCredentials | None:
        if tls is None:
            return None
        ca = tls.client_ca.read_bytes() if tls.client_ca is not None else None
        return grpc.ssl_server_credentials(
            [(tls.key.read_bytes(), tls.cert.read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def control_app(host: FakeHost) -> web.Application:
    """The control API (see the module docstring) over host."""

    async def body(request: web.Request) -> dict[str, Any]:
        if not request.can_read_body:
            return {}
        data = await request.json()
        if not isinstance(data, dict):
            raise ValueError("the body must be a JSON object")
        return data

    def status() -> dict[str, Any]:
        return {"up": host.is_up, "target": host.target}

    async def get_status(request: web.Request) -> dict[str, Any]:
        return status()

    async def post_down(request: web.Request) -> dict[str, Any]:
        await host.down()
        return status()

    async def post_up(request: web.Request) -> dict[str, Any]:
        await host.up()
        return status()

    async def post_slow_creates(request: web.Request) -> dict[str, Any]:
        data = await body(request)
        seconds = float(data.get("seconds", 0.0))
        if seconds < 0:
            raise ValueError("seconds must not be negative")
        host.faults.create_delay = seconds
        host.faults.create_delay_store_first = bool(data.get("store_first", True))
        return {"seconds": seconds}

    async def post_fail_creates(request: web.Request) -> dict[str, Any]:
        data = await body(request)
        code = status_code(str(data.get("code", "UNAVAILABLE")))
        times = int(data.get("times", 1))
        host.faults.create_failure = CreateFailure(code, str(data.get("message", "")))
        host.faults.create_failures_left = max(times, 0)
        return {"code": code.name, "times": host.faults.create_failures_left}

    async def post_cut(request: web.Request) -> dict[str, Any]:
        data = await body(request)
        after = data.get("after_chunks")
        cut = StreamCut(
            code=status_code(str(data.get("code", DEFAULT_CUT_CODE.name))),
            message=str(data.get("message", DEFAULT_CUT_MESSAGE)),
            after_chunks=None if after is None else max(int(after), 0),
        )
        host.faults.cut_next_exec = cut
        return {"code": cut.code.name, "message": cut.message, "after_chunks": cut.after_chunks}

    async def post_vm_state(request: web.Request) -> dict[str, Any]:
        data = await body(request)
        state = State.Value(str(data["state"]).upper())
        vm = host.store.set_state(str(data["uid"]), state)
        return {"vm": json_format.MessageToDict(vm)}

    async def get_vms(request: web.Request) -> dict[str, Any]:
        return {"vms": [json_format.MessageToDict(vm) for vm in host.store.list()]}

    async def get_execs(request: web.Request) -> dict[str, Any]:
        return {"execs": [json_format.MessageToDict(s) for s in host.faults.exec_history]}

    async def get_exec_session(request: web.Request) -> dict[str, Any]:
        index = int(request.match_info["index"])
        sessions = host.faults.exec_sessions
        if not 0 <= index < len(sessions):
            raise KeyError(f"no exec {index}: {len(sessions)} started")
        session = sessions[index]
        wait = float(request.query.get("wait_ended", "0"))
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await session.ended.wait()
        return {
            "ended": session.ended.is_set(),
            "stdin_bytes": session.stdin_bytes,
            "stdin": base64.b64encode(bytes(session.stdin)).decode(),
        }

    async def get_guests(request: web.Request) -> dict[str, Any]:
        return {"guests": host.guests.describe()}

    async def get_exec_timings(request: web.Request) -> dict[str, Any]:
        timings = [
            {"spawn_ms": t.spawn_seconds * 1000, "run_ms": t.run_seconds * 1000}
            for t in host.faults.exec_timings
        ]
        return {"timings": timings}

    def route(handler: Callable[[web.Request], Awaitable[dict[str, Any]]]) -> Handler:
        async def wrapped(request: web.Request) -> web.StreamResponse:
            try:
                return web.json_response(await handler(request))
            except VmNotFoundError as err:
                return web.json_response({"error": str(err)}, status=404)
            except (ValueError, KeyError, TypeError) as err:
                return web.json_response({"error": str(err)}, status=400)
            except FakeHostError as err:
                return web.json_response({"error": str(err)}, status=409)

        return wrapped

    app = web.Application()
    app.router.add_get("/status", route(get_status))
    app.router.add_post("/down", route(post_down))
    app.router.add_post("/up", route(post_up))
    app.router.add_post("/slow-creates", route(post_slow_creates))
    app.router.add_post("/fail-creates", route(post_fail_creates))
    app.router.add_post("/cut-next-exec-stream", route(post_cut))
    app.router.add_post("/vm-state", route(post_vm_state))
    app.router.add_get("/vms", route(get_vms))
    app.router.add_get("/execs", route(get_execs))
    app.router.add_get("/execs/{index}/session", route(get_exec_session))
    app.router.add_get("/exec-timings", route(get_exec_timings))
    app.router.add_get("/guests", route(get_guests))
    return app
