"""`python -m batteryop.testing.fake_flintlock`: run one fake flintlockd Host (TD-010..012, TD-109).

Once both the gRPC endpoint and the control API listen, one line goes to stdout:
`{"event": "ready", "target": "127.0.0.2:NNNN", "control_url": "http://127.0.0.2:MMMM", ...}`.
Nothing else is written to stdout; logs go to stderr. SIGTERM or SIGINT stops it, and so does
the end of stdin with `--exit-on-stdin-eof` (so it dies with the test process that started it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from batteryop.testing.fake_flintlock.server import (
    FakeHost,
    HostConfig,
    TLSFiles,
    control_app,
    host_port,
)
from batteryop.testing.fake_flintlock.services import ServerInfoConfig
from batteryop.testing.processes import stdin_closed

log = logging.getLogger("fake-flintlockd")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="fake-flintlockd", description=__doc__.splitlines()[0])
    p.add_argument("--address", default="127.0.0.1", help="IP address to listen on")
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: any free port)")
    p.add_argument("--control-port", type=int, default=0, help="control API port (0: any)")
    p.add_argument("--state-dir", type=Path, help="MicroVM sandboxes (default: a temp dir)")
    p.add_argument("--tls-cert", type=Path, help="serving certificate (PEM); TLS when set")
    p.add_argument("--tls-key", type=Path, help="serving key (PEM)")
    p.add_argument("--tls-client-ca", type=Path, help="require client certs signed by this CA")
    p.add_argument("--version", default="v0.16.0", help="version ServerInfo reports")
    p.add_argument("--disable-exec", action="store_true", help="do not serve MicroVMExec")
    p.add_argument(
        "--enable-ssh-proxy-api",
        action="store_true",
        help="serve MicroVMSSHProxy (off by default, as in flintlockd); sandboxes get an sshd",
    )
    p.add_argument(
        "--no-server-info", action="store_true", help="ServerInfo is UNIMPLEMENTED (< v0.15.0)"
    )
    p.add_argument("--boot-delay", type=float, default=0.0, help="seconds PENDING -> CREATED")
    p.add_argument("--delete-delay", type=float, default=0.0, help="seconds DELETING -> gone")
    p.add_argument(
        "--agent-delay", type=float, default=0.0, help="seconds after CREATED before exec works"
    )
    p.add_argument(
        "--guests",
        choices=("sandbox", "qemu"),
        default="sandbox",
        help="what runs a MicroVM: a sandbox folder here (default) or a QEMU guest whose "
        "guest agent runs each command",
    )
    p.add_argument("--exit-on-stdin-eof", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        p.error("--tls-cert and --tls-key go together")
    if args.tls_client_ca is not None and args.tls_cert is None:
        p.error("--tls-client-ca needs --tls-cert and --tls-key")
    return args


async def serve(args: argparse.Namespace) -> None:
    own_state_dir = args.state_dir is None
    state_dir = (
        Path(tempfile.mkdtemp(prefix="fake-flintlockd-")) if own_state_dir else args.state_dir
    )
    state_dir.mkdir(parents=True, exist_ok=True)
    tls = None
    if args.tls_cert is not None:
        tls = TLSFiles(cert=args.tls_cert, key=args.tls_key, client_ca=args.tls_client_ca)
    config = HostConfig(
        address=args.address,
        port=args.port,
        state_dir=state_dir,
        tls=tls,
        info=ServerInfoConfig(
            version=args.version,
            exec_enabled=not args.disable_exec,
            ssh_proxy_enabled=args.enable_ssh_proxy_api,
            enabled=not args.no_server_info,
        ),
        boot_delay=args.boot_delay,
        delete_delay=args.delete_delay,
        agent_delay=args.agent_delay,
        guests=args.guests,
    )
    host = FakeHost(config)
    runner = web.AppRunner(control_app(host), access_log=None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = None
    try:
        await host.up()
        await runner.setup()
        site = web.TCPSite(runner, args.address, args.control_port)
        await site.start()
        control_port = runner.addresses[0][1]
        ready = {
            "event": "ready",
            "target": host.target,
            "control_url": f"http://{host_port(args.address, control_port)}",
            "tls": tls is not None,
            "mtls": tls is not None and tls.client_ca is not None,
            "pid": os.getpid(),
        }
        print(json.dumps(ready), flush=True)
        if args.exit_on_stdin_eof:
            watcher = asyncio.create_task(stdin_closed())
            watcher.add_done_callback(lambda _: stop.set())
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        await host.close()
        await runner.cleanup()
        if own_state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()
