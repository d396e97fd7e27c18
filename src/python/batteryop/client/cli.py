"""The `battery` command: claim, exec, release, ls, and one-shot run, on the sync `Client`.

    battery claim POOL                 bind a claim, print its name, leave it held
    battery exec CLAIM -- CMD...       run CMD in the claim's MicroVM; exit with its exit code
    battery renew CLAIM                renew the claim's lease now
    battery release CLAIM              delete the claim (and its Secret)
    battery ls                         the namespace's claims
    battery run POOL -- CMD...         claim, run CMD, release; exit with CMD's exit code
    battery shell CLAIM [-- CMD...]    a terminal (or CMD on a PTY with -t) in the MicroVM
    battery run -it POOL -- CMD...     claim, run CMD on a PTY through ssh, release
    battery ssh-proxy CLAIM            an ssh ProxyCommand to the MicroVM's sshd

Arguments are parsed with click and progress is drawn with rich (both widely used, typed,
and small); the spinner shows on a terminal only, elsewhere each pending reason is one line on
stderr. Every failure is one line on stderr, `battery: error: <cause>`, and a non-zero exit:
1 for `claim`, `release` and `ls`; 125 for `exec` and `run`, whose other exit codes are the
remote command's own (`shell` and `run -t` exit with ssh's, 255 when ssh itself failed).
Ctrl-C exits 130; during `run` it releases the claim first (CC-005,
CC-021), and a second Ctrl-C while it does so only says so (CC-108). A claim waits for Bound
at most `--timeout` seconds (default 300) and fails at once on a Pool that does not exist
unless `--wait-for-pool` (CC-113). No token is ever printed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import signal
import stat
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

import click

from batteryop.api.times import format_time, parse_duration
from batteryop.client._exceptions import ClientError
from batteryop.client._models import Pending, Timeouts

if TYPE_CHECKING:
    from rich.console import Console

    from batteryop.client._sync import Claim, Client

EXIT_ERROR = 1
"""A `claim`, `release` or `ls` that failed."""
EXIT_EXEC_ERROR = 125
"""An `exec` or `run` that failed before the command's exit code came (as `docker run`)."""
EXIT_INTERRUPTED = 130

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


# Imported where used, not above: `battery --help` (and a failing argument) loads neither the
# client's IO (asyncio, PyYAML, gRPC: `_sync`) nor rich; see
# docs/dev/client-performance.md.


@functools.cache
def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _fail(message: str, code: int) -> NoReturn:
    # CC-109: one line, a non-zero exit
    click.echo(f"battery: error: {message}", err=True)
    sys.exit(code)


@contextlib.contextmanager
def _errors(code: int) -> Iterator[None]:
    """Client errors (and anything unexpected) become one line and an exit code."""
    try:
        yield
    except ClientError as e:
        _fail(str(e), code)
    except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
        raise
    except Exception as e:  # the CLI never shows a traceback
        _fail(f"unexpected {type(e).__name__}: {e}", code)


_OWN_PROCESS = False
"""Whether this process is the `battery` command's own (`main()` without `argv`), not another
program that runs the CLI: then the command may skip work that only a longer-lived process
needs (`_exit_now`), and import the exec transport on a thread of its own."""


def _import_exec_transport() -> None:
    with contextlib.suppress(ImportError):  # the client's own import raises it again
        importlib.import_module("batteryop.client._transport")


def _client(
    ctx: click.Context, bind_timeout: float | None = None, *, execs: bool = False
) -> Client:
    """The client of the global options; `bind_timeout` 0 waits for Bound without limit.

    For a command that `execs`, in the command's own process, the exec transport (gRPC,
    25-40 ms) is imported on a thread meanwhile: it is needed once the claim is Bound, and
    until then the client mostly waits on the network. The client takes it from there
    (Python's import lock makes it wait if the import is still under way)."""
    from batteryop.client._sync import Client
    from batteryop.client._threads import start_daemon

    if execs and _OWN_PROCESS:
        start_daemon(_import_exec_transport, "battery-import")

    opts = ctx.obj
    timeouts = Timeouts()
    if bind_timeout is not None:
        timeouts = Timeouts(bind=bind_timeout or None)
    return Client(
        namespace=opts["namespace"],
        kubeconfig=opts["kubeconfig"],
        context=opts["context"],
        serving_ca=opts["ca"],
        timeouts=timeouts,
    )


def _stderr_may_be_terminal() -> bool:
    """False where rich's `Console.is_terminal` would be False for stderr, decided without
    importing rich (18-30 ms of a command's start): stderr is not a tty and none of the
    variables that make rich treat it as one (`TTY_COMPATIBLE`, `FORCE_COLOR`) is set. That is
    how scripts and CI runners call `battery`; on a terminal rich decides, as before."""
    try:
        if sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False
    return "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ


@contextlib.contextmanager
def _progress(pools: tuple[str, ...]) -> Iterator[Callable[[Pending], None]]:
    """A spinner on a terminal while a claim waits, else one line per new pending reason."""
    pool = " or ".join(pools)
    if _stderr_may_be_terminal() and _stderr().is_terminal:
        with _stderr().status(f"Waiting for a MicroVM from Pool {pool}...") as status:

            def update(p: Pending) -> None:
                what = "exhausted" if p.pool_exhausted else p.reason
                status.update(f"Waiting for a MicroVM from Pool {pool}: {what} ({p.message})")

            yield update
    else:

        def line(p: Pending) -> None:
            what = f"Pool {pool} is exhausted" if p.pool_exhausted else p.reason
            click.echo(f"battery: waiting: {what}: {p.message}", err=True)

        yield line


def _describe(claim: Claim, asked: str | None = None) -> str:
    """The bound claim in one line; a fallback Pool that served it is named (CC-116)."""
    # A claim is returned from its bind's write; the expiry the operator reads from battery
    # right after it may not be recorded yet (EA-013's grace).
    expires = (
        f"lease expires {format_time(claim.lease_expires_at)}"
        if claim.lease_expires_at
        else "lease expiry not read from battery yet"
    )
    via = f" of fallback Pool {claim.pool}" if asked is not None and claim.pool != asked else ""
    return (
        f"claim {claim.name}: Bound to MicroVM {claim.microvm_uid} on {claim.node_name}{via} "
        f"(agent {claim.agent_address or '-'}, {expires})"
    )


@click.group(context_settings=CONTEXT)
@click.option(
    "-n",
    "--namespace",
    envvar="BATTERY_NAMESPACE",
    default="default",
    show_default=True,
    help="Namespace of the claims and Pools [env BATTERY_NAMESPACE].",
)
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    help="kubeconfig file, or files joined by ':' merged as kubectl does [env KUBECONFIG].",
)
@click.option("--context", "kube_context", help="kubeconfig context (default: current).")
@click.option(
    "--ca",
    envvar="BATTERY_CA",
    type=click.Path(dir_okay=False),
    help=(
        "PEM CA that signs Exec Agent serving certificates [env BATTERY_CA]; default: the one "
        "the release publishes (ConfigMap battery-operator-system/flintlockd-ca)."
    ),
)
@click.pass_context
def cli(
    ctx: click.Context,
    namespace: str,
    kubeconfig: str | None,
    kube_context: str | None,
    ca: str | None,
) -> None:
    """Claim warm Firecracker MicroVMs from battery-operator Pools and run commands in them."""
    # CC-112: a list of files is merged by the library (first file wins per entry).
    ctx.obj = {"namespace": namespace, "kubeconfig": kubeconfig, "context": kube_context, "ca": ca}


_HOLDER = click.option(
    "--holder",
    envvar="BATTERY_HOLDER",
    default="default",
    show_default=True,
    help="ServiceAccount that holds the claim and may exec in it [env BATTERY_HOLDER].",
)
_TIMEOUT = click.option(  # CC-113
    "--timeout",
    type=click.FloatRange(min=0),
    default=Timeouts().bind,
    show_default=True,
    help="Seconds to wait for Bound before giving up (and deleting the claim); 0: no limit.",
)
_WAIT_FOR_POOL = click.option(  # CC-113
    "--wait-for-pool",
    is_flag=True,
    help="Wait (up to --timeout) for a Pool that does not exist yet, instead of failing.",
)


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a duration (e.g. 90s, 5m)") from None


_WAIT_FOR_CAPACITY = click.option(  # CC-117
    "--wait-for-capacity",
    metavar="DURATION",
    callback=_duration,
    help="Have the claim itself fail if not Bound this long after it is made (e.g. 90s).",
)

_FALLBACK = click.option(  # CC-116
    "--fallback",
    metavar="POOL",
    multiple=True,
    help="A Pool to lease from when the ones before it cannot serve; repeat for more, in order.",
)


@cli.command(context_settings=CONTEXT)
@click.argument("pool")
@_HOLDER
@click.option("--name", help="Claim name (default: generated from the Pool's).")
@_TIMEOUT
@_WAIT_FOR_POOL
@_FALLBACK
@_WAIT_FOR_CAPACITY
@click.option("--hold", is_flag=True, help="Keep renewing in the foreground until interrupted.")
@click.pass_context
def claim(  # CC-102
    ctx: click.Context,
    pool: str,
    holder: str,
    name: str | None,
    timeout: float,
    wait_for_pool: bool,
    fallback: tuple[str, ...],
    wait_for_capacity: timedelta | None,
    hold: bool,
) -> None:
    """Bind a claim on POOL and print its name.

    The claim stays after the command ends; its lease expires unless something renews it
    (--hold, or a program using the library). `battery release NAME` ends it.
    """
    with _errors(EXIT_ERROR):
        client = _client(ctx, bind_timeout=timeout)
        try:
            with _progress((pool, *fallback)) as on_pending:
                held = client.claim(
                    pool,
                    holder,
                    name=name,
                    on_pending=on_pending,
                    wait_for_pool=wait_for_pool,
                    fallback_pools=fallback,
                    wait_for_capacity=wait_for_capacity,
                )
            click.echo(_describe(held, pool), err=True)
            click.echo(held.name)
            if hold:
                click.echo(f"battery: holding {held.name}; Ctrl-C stops renewing", err=True)
                with contextlib.suppress(KeyboardInterrupt):
                    lost = held.wait_lost()
                    if lost is not None:
                        _fail(str(lost), EXIT_ERROR)
        finally:
            client.close()


def _stdin_chunks() -> Iterator[bytes]:
    """Our stdin as it comes. Read from the descriptor, not `sys.stdin.buffer`: the read may
    still be waiting (on a terminal) when the remote command exits and we exit with it, and a
    thread blocked inside a buffered reader holds its lock, which interpreter shutdown needs."""
    fd = sys.stdin.fileno()
    while True:
        chunk = os.read(fd, 64 * 1024)
        if not chunk:
            return
        yield chunk


def _sink(stream: Any) -> Callable[[bytes], None]:
    """Where the remote command's output goes: each chunk as it arrives (up to 1 MiB, EA-020)
    written whole to the descriptor under `stream` with `os.write`, not copied into its buffer
    and flushed chunk by chunk (whatever the buffer held is flushed first); through `stream`
    itself when it has no descriptor (a stand-in another program put in `sys.stdout`)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both of the last

        def through(data: bytes) -> None:
            stream.buffer.write(data)
            stream.buffer.flush()

        return through
    stream.flush()
    _widen_pipe(fd)

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return write


PIPE_BYTES = 1024 * 1024
"""What a pipe we write to is widened to: Linux's limit for an unprivileged process
(`/proc/sys/fs/pipe-max-size`), and the most the agent joins into one message (EA-020)."""


def _widen_pipe(fd: int) -> None:
    """Where `fd` is a pipe and Linux lets us, make it hold `PIPE_BYTES` instead of 64 KiB: a
    chunk is then written without waiting for the reader to drain the pipe 64 KiB at a time,
    and the reader takes it in one read (100 MiB: 7-90 ms less CPU for a Python reader, 3-20
    ms for us; docs/dev/client-performance.md). A pipe that cannot grow (another system, a
    per-user limit) stays as it is."""
    try:
        import fcntl
    except ImportError:  # Windows
        return
    if not hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux only
        return
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_BYTES:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def _run_in(held: Claim, command: tuple[str, ...], interactive: bool) -> int:
    result = held.exec_stream(
        list(command),
        stdin=_stdin_chunks() if interactive else None,
        stdout=_sink(sys.stdout),
        stderr=_sink(sys.stderr),
    )
    for message in result.errors:
        click.echo(f"battery: agent: {message}", err=True)
    return result.exit_code


_INTERACTIVE = click.option(
    "-i", "--interactive", is_flag=True, help="Send this command's stdin to the remote command."
)


_TTY = click.option(
    "-t", "--tty", is_flag=True, help="Run COMMAND on a PTY, through the MicroVM's sshd."
)


@cli.command(
    "exec",
    context_settings={**CONTEXT, "ignore_unknown_options": True},
)
@click.argument("claim_name", metavar="CLAIM")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@_INTERACTIVE
@click.pass_context
def exec_(ctx: click.Context, claim_name: str, command: tuple[str, ...], interactive: bool) -> None:
    # CC-103: stdin, stdout and stderr relayed; CC-107: the remote exit code is ours
    """Run COMMAND in the MicroVM of CLAIM; exit with its exit code (125: battery failed)."""
    with _errors(EXIT_EXEC_ERROR):
        client = _client(ctx, execs=True)
        try:
            held = client.attach(claim_name, hold=True)
            _warn_host_not_ready(held)
            code = _run_in(held, command, interactive)
            held.detach()
        finally:
            client.close()
    sys.exit(code)


def _warn_host_not_ready(held: Claim) -> None:
    """CC-013: say so when the claim's Host is not ready (the claim is still held)."""
    problem = held.host_not_ready
    if problem is not None:
        click.echo(f"battery: warning: {problem}", err=True)


def _remote(spec: str) -> tuple[str, str] | None:
    """`CLAIM:PATH` -> (CLAIM, PATH); a local path (no colon before any slash) -> None."""
    claim_name, colon, path = spec.partition(":")
    if not colon or "/" in claim_name or not claim_name:
        return None
    return claim_name, path


@cli.command(context_settings=CONTEXT)
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@click.pass_context
def cp(ctx: click.Context, source: str, target: str) -> None:  # CC-115
    """Copy a file or folder into a claim's MicroVM or out of it: CLAIM:PATH on one side, a
    local path or - (stdin/stdout) on the other."""
    inbound, outbound = _remote(target), _remote(source)
    if (inbound is None) == (outbound is None):
        _fail("name CLAIM:PATH on exactly one side: battery cp LOCAL CLAIM:PATH, or the reverse", 2)
    claim_name, path = inbound or outbound  # type: ignore[misc]
    if not path:
        _fail(f"no path after {claim_name}: (CLAIM:PATH)", 2)
    with _errors(EXIT_ERROR):
        client = _client(ctx, execs=True)
        try:
            held = client.attach(claim_name, hold=True)
            _warn_host_not_ready(held)
            if inbound is not None:
                held.put(path, sys.stdin.buffer if source == "-" else source)
            else:
                held.get(path, sys.stdout.buffer if target == "-" else target)
            held.detach()
        finally:
            client.close()


@cli.command(context_settings=CONTEXT)
@click.argument("claim_name", metavar="CLAIM")
@click.pass_context
def renew(ctx: click.Context, claim_name: str) -> None:
    """Renew CLAIM's lease now (CC-010), and print when it expires."""
    with _errors(EXIT_ERROR):
        client = _client(ctx)
        try:
            held = client.attach(claim_name, hold=False)
            _warn_host_not_ready(held)
            before = held.lease_expires_at
            held.renew()
            after = held.lease_expires_at
        finally:
            client.close()
    expires = format_time(after) if after else "-"
    moved = (
        ""
        if after is None or after != before
        else " (the operator has not written the new expiry yet)"
    )
    click.echo(f"claim {claim_name}: renewed; lease expires {expires}{moved}", err=True)


@cli.command(context_settings=CONTEXT)
@click.argument("claim_name", metavar="CLAIM")
@click.pass_context
def release(ctx: click.Context, claim_name: str) -> None:  # CC-104
    """Delete CLAIM and its Secret (a claim already gone is not an error)."""
    with _errors(EXIT_ERROR):
        client = _client(ctx)
        try:
            existed = client.release(claim_name)
        finally:
            client.close()
    click.echo(f"claim {claim_name}: {'released' if existed else 'already gone'}", err=True)


@cli.command("ls", context_settings=CONTEXT)
@click.pass_context
def ls(ctx: click.Context) -> None:  # CC-105
    """List the namespace's claims."""
    with _errors(EXIT_ERROR):
        client = _client(ctx)
        try:
            claims = client.claims()
        finally:
            client.close()
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "POOL", "PHASE", "NODE", "MICROVM", "EXPIRES"):
        table.add_column(column, no_wrap=True)
    for c in claims:
        phase = f"{c.phase} (deleting)" if c.deleting else c.phase
        expires = format_time(c.lease_expires_at) if c.lease_expires_at else "-"
        table.add_row(c.name, c.pool, phase, c.node_name or "-", c.microvm_uid or "-", expires)
    Console(highlight=False, width=200 if not sys.stdout.isatty() else None).print(table)


@cli.command(context_settings={**CONTEXT, "ignore_unknown_options": True})
@click.argument("pool")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@_HOLDER
@_TIMEOUT
@_WAIT_FOR_POOL
@_FALLBACK
@_WAIT_FOR_CAPACITY
@_INTERACTIVE
@_TTY
@click.pass_context
def run(  # CC-106, CC-107, CC-108 (Ctrl-C releases first)
    ctx: click.Context,
    pool: str,
    command: tuple[str, ...],
    holder: str,
    timeout: float,
    wait_for_pool: bool,
    fallback: tuple[str, ...],
    wait_for_capacity: timedelta | None,
    interactive: bool,
    tty: bool,
) -> None:
    """Claim a MicroVM from POOL, run COMMAND in it, release it; exit with COMMAND's code.

    Ctrl-C (or SIGTERM) releases the claim before exiting; with -t, Ctrl-C goes to COMMAND.
    """
    if tty and not sys.stdin.isatty():
        _fail("-t needs a terminal on stdin", 2)
    if tty:
        with _errors(EXIT_EXEC_ERROR):
            _need_ssh()
    code = EXIT_EXEC_ERROR
    with _errors(EXIT_EXEC_ERROR):
        client = _client(ctx, bind_timeout=timeout, execs=True)
        try:
            with _progress((pool, *fallback)) as on_pending:
                held = client.claim(
                    pool,
                    holder,
                    on_pending=on_pending,
                    wait_for_pool=wait_for_pool,
                    fallback_pools=fallback,
                    wait_for_capacity=wait_for_capacity,
                )
            with held:  # CC-021: released on the way out, also on Ctrl-C
                click.echo(_describe(held, pool), err=True)
                if tty:
                    code = _shell_in(held, command, user="", tty=True)
                else:
                    code = _run_in(held, command, interactive)
        finally:
            client.close()
    sys.exit(code)


@cli.command(context_settings={**CONTEXT, "ignore_unknown_options": True})
@click.argument("claim_name", metavar="CLAIM")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--user",
    default="",
    help="Guest user to log in as (default: the one commands run as; root in our guest image).",
)
@click.option(
    "-t/-T",
    "--tty/--no-tty",
    default=None,
    help="Force a PTY for COMMAND (-t) or none (-T); default: a PTY for a shell on a terminal.",
)
@click.pass_context
def shell(  # CC-118
    ctx: click.Context, claim_name: str, command: tuple[str, ...], user: str, tty: bool | None
) -> None:
    """Open a shell (or run COMMAND) in the MicroVM of CLAIM through its sshd, with a PTY:
    window size and Ctrl-C reach the remote side. Exits with ssh's exit code."""
    with _errors(EXIT_EXEC_ERROR):
        _need_ssh()
        client = _client(ctx, execs=True)
        try:
            held = client.attach(claim_name, hold=True)
            _warn_host_not_ready(held)
            code = _shell_in(held, command, user=user, tty=tty)
            held.detach()
        finally:
            client.close()
    sys.exit(code)


def _need_ssh() -> None:
    """Fail before anything is claimed or read when there is no ssh to run (CC-118)."""
    from batteryop.client._shell import find_ssh

    find_ssh()


def _shell_in(held: Claim, command: tuple[str, ...], *, user: str, tty: bool | None) -> int:
    """ssh into `held`'s MicroVM through a `_shell.Session`, our own SIGINT ignored meanwhile
    (on a PTY the terminal sends Ctrl-C to the remote side as a byte; without one, ssh gets
    the signal and ends the remote command); ssh's exit code."""
    import subprocess

    from batteryop.client._shell import Session

    with Session(held, user=user) as session:
        before = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            code = subprocess.call(session.ssh_argv(command, tty=tty))
        finally:
            signal.signal(signal.SIGINT, before)
        session.wait(5.0)
        if session.error is not None and code == 255:
            raise session.error
    return code


@cli.command("ssh-proxy", context_settings=CONTEXT)
@click.argument("claim_name", metavar="CLAIM")
@click.pass_context
def ssh_proxy(ctx: click.Context, claim_name: str) -> None:  # CC-118
    """Relay stdin and stdout to the sshd of CLAIM's MicroVM, for ssh, scp or sftp:
    ssh -o ProxyCommand='battery ssh-proxy %n' root@CLAIM (with your key in the guest)."""
    with _errors(EXIT_EXEC_ERROR):
        client = _client(ctx, execs=True)
        try:
            held = client.attach(claim_name, hold=True)
            held.proxy_ssh(_stdin_chunks(), _sink(sys.stdout))
            held.detach()
        finally:
            client.close()


def _interrupt(signum: int, frame: object) -> None:
    """The first Ctrl-C (or SIGTERM) stops the command, and the clean-up (releasing a claim)
    begins; from then on a signal only says that it is under way (CC-108)."""
    signal.signal(signal.SIGINT, _patience)
    signal.signal(signal.SIGTERM, _patience)
    raise KeyboardInterrupt


def _patience(signum: int, frame: object) -> None:
    click.echo("battery: interrupted; cleaning up, please wait", err=True)


def main(argv: list[str] | None = None) -> None:
    """The console script: run the CLI; Ctrl-C and SIGTERM end it with 130 after clean-up.

    Without `argv` (the `battery` command, `python -m`) this process is ours: once the command
    has ended (its claim released, its client closed), its output is flushed and the process
    exits at once, skipping the interpreter's teardown of gRPC and asyncio (50-170 ms when the
    client still used aiohttp, a third of `battery run`; docs/dev/client-performance.md). With
    `argv` (another program running the CLI) it raises SystemExit as usual."""
    if argv is not None:
        _main(argv)
    global _OWN_PROCESS
    _OWN_PROCESS = True
    try:
        _main(None)
    except SystemExit as e:
        _exit_now(e.code)


def _main(argv: list[str] | None) -> NoReturn:
    before = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cli.main(args=argv, prog_name="battery", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        _fail(e.format_message(), e.exit_code if e.exit_code != 1 else 2)
    except (KeyboardInterrupt, click.exceptions.Abort):
        click.echo("battery: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        for sig, handler in before.items():  # main() may run inside another program
            signal.signal(sig, handler)
    sys.exit(0)


def _exit_now(code: object) -> NoReturn:
    """End the process with SystemExit's `code` as the interpreter would (None: 0, a message:
    printed, 1), its output flushed first (120 if that fails, as the interpreter does)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120
    os._exit(status)


if __name__ == "__main__":
    main()
