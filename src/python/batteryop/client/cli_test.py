"""The `battery` command without a cluster: help, usage errors, and one-line failures."""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from batteryop.client.cli import EXIT_ERROR, EXIT_EXEC_ERROR, PIPE_BYTES, _sink, main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    out, err = capsys.readouterr()
    code = ended.value.code
    return (code if isinstance(code, int) else 1), out, err


def python(*argv: str) -> subprocess.CompletedProcess[str]:
    """This interpreter, in a process of its own, with this process's import path."""
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for command in ("claim", "exec", "release", "ls", "run"):
        assert command in out


HEAVY = ("grpc", "google.protobuf", "rich", "yaml") + (
    ("asyncio",) if sys.version_info >= (3, 11) else ()  # 3.10: batteryop.api._compat needs it
)
"""What `battery --help` does not load: the client's IO, its progress display, its kubeconfig
parser (docs/dev/client-performance.md)."""


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["exec", "c1"]])
def test_help_and_usage_errors_load_none_of_the_client_s_io(argv: list[str]) -> None:
    probe = (
        "import sys\n"
        "from batteryop.client.cli import main\n"
        "try:\n"
        "    main(sys.argv[1:])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules], file=sys.__stderr__)\n"
    )
    done = python("-c", probe, *argv)
    assert done.stderr.splitlines()[-1] == "[]", done.stderr


@pytest.mark.parametrize(
    ("env", "spinner"),
    [({}, False), ({"FORCE_COLOR": "1"}, True), ({"TTY_COMPATIBLE": "1"}, True)],
)
def test_a_claim_s_progress_on_a_pipe_is_lines_without_rich(
    env: dict[str, str], spinner: bool
) -> None:
    """Off a terminal (stderr a pipe, as scripts and CI runners have it) `run` and `claim`
    report a waiting claim as lines, and deciding so does not import rich; where rich's own
    variables make a pipe a terminal, rich decides, and draws its spinner."""
    probe = (
        "import sys\n"
        "from batteryop.client import cli\n"
        "from batteryop.client._models import Pending\n"
        "with cli._progress(('p1',)) as update:\n"
        "    update(Pending(reason='PoolExhausted', message='all 2 leased'))\n"
        "print('rich' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **{k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")},
            "PYTHONPATH": os.pathsep.join(sys.path),
            **env,
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(spinner)]
    line = "battery: waiting: Pool p1 is exhausted: all 2 leased"
    assert (line in done.stderr.splitlines()) is not spinner, done.stderr


def test_the_package_loads_its_io_on_first_use_and_names_itself_home() -> None:
    probe = (
        "import sys, batteryop.client as c\n"
        "print('yaml' in sys.modules, 'grpc' in sys.modules)\n"
        "print(c.Client.__module__, c.GrpcExecTransport.__module__, c.ClientError.__module__)\n"
        "print('yaml' in sys.modules, 'grpc' in sys.modules, 'Client' in vars(c))\n"
        "print('aiohttp' in sys.modules)\n"
    )
    done = python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "False False",
        "batteryop.client batteryop.client batteryop.client",
        "True True True",
        # The API server is reached over the standard library's streams (`kube.http`): the
        # wheel does not bring aiohttp, whose import alone took 100-130 ms of `battery run`.
        "False",
    ]


@pytest.mark.req("CC-103")
def test_output_is_written_whole_to_the_descriptor_after_what_the_stream_held() -> None:
    """`run` and `exec` write each chunk of the remote command's output straight to our
    descriptor (a chunk bigger than a pipe holds included), after what was written through
    the Python stream before; a stand-in stream without a descriptor gets it through itself."""
    read_fd, write_fd = os.pipe()
    got = bytearray()
    reader = threading.Thread(target=lambda: got.extend(read_all(read_fd)))
    reader.start()
    with open(write_fd, "w", closefd=True) as stream:
        stream.write("before\n")
        sink = _sink(stream)
        big = bytes(range(256)) * 4096  # 1 MiB, 16 times a pipe's default capacity
        for chunk in (b"one\n", big, b"two\n"):
            sink(chunk)
    reader.join(30)
    assert bytes(got) == b"before\none\n" + big + b"two\n"
    if hasattr(fcntl, "F_GETPIPE_SZ"):  # Linux: the pipe was widened to take a chunk whole
        read_fd, write_fd = os.pipe()
        with open(read_fd, "rb"), open(write_fd, "wb") as stream:
            _sink(stream)
            assert fcntl.fcntl(write_fd, fcntl.F_GETPIPE_SZ) == PIPE_BYTES

    stand_in = io.TextIOWrapper(io.BytesIO())
    _sink(stand_in)(b"through the stream")
    assert stand_in.buffer.getvalue() == b"through the stream"  # type: ignore[attr-defined]


def read_all(fd: int) -> bytes:
    with open(fd, "rb") as f:
        return f.read()


def test_a_client_imports_grpc_only_when_it_needs_its_own_exec_transport() -> None:
    """The client's IO does not import gRPC and protobuf: a client with a serving CA imports
    them for its first exec (or to connect ahead to a claim's agent, `_connect`), one given
    another transport never does."""
    probe = (
        "import asyncio, sys\n"
        "from batteryop.client._async import AsyncClient\n"
        "from batteryop.client._mock import MockExecTransport\n"
        "from batteryop.kube.config import KubeConfig\n"
        "config = KubeConfig('https://127.0.0.1:1', None)\n"
        "async def main():\n"
        "    mocked = AsyncClient(kube_config=config, exec_transport=MockExecTransport(print))\n"
        "    print('grpc' in sys.modules, type(await mocked._exec_transport()).__name__)\n"
        "    client = AsyncClient(kube_config=config, serving_ca=b'PEM')\n"
        "    client._connect('127.0.0.1:1')\n"
        "    print('grpc' in sys.modules, client._grpc)\n"
        "    print(type(await client._exec_transport()).__name__, 'grpc' in sys.modules)\n"
        "    await mocked.aclose()\n"
        "    await client.aclose()\n"
        "asyncio.run(main())\n"
    )
    done = python("-c", probe)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "False MockExecTransport",
        "False None",  # nothing imported to connect ahead
        "GrpcExecTransport True",
    ]


@pytest.mark.req("CC-109")
def test_the_command_flushes_its_output_and_keeps_its_exit_code_as_it_exits_at_once() -> None:
    """`battery` skips the interpreter's teardown (os._exit): nothing it wrote is lost, and the
    exit status is the one the command chose."""

    def battery(*argv: str) -> subprocess.CompletedProcess[str]:
        return python("-m", "batteryop.client.cli", *argv)

    helped = battery("--help")
    assert helped.returncode == 0
    assert helped.stdout.splitlines()[-1].split()[:2] == ["ssh-proxy", "Relay"]  # the last line
    usage = battery("exec", "c1")
    assert usage.returncode == 2
    assert usage.stderr.startswith("battery: error: ") and usage.stderr.count("\n") == 1


def test_a_usage_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["exec", "c1"], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("battery: error: ")


@pytest.mark.req("CC-117", "CC-109")
def test_a_wait_for_capacity_that_is_no_duration_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["run", "demo", "--wait-for-capacity", "soon", "--", "true"], capsys)
    assert (code, out) == (2, "")
    assert err == (
        "battery: error: Invalid value for '--wait-for-capacity': "
        "'soon' is not a duration (e.g. 90s, 5m)\n"
    )


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["ls"], EXIT_ERROR),
        (["release", "c1"], EXIT_ERROR),
        (["claim", "demo"], EXIT_ERROR),
        (["exec", "c1", "--", "true"], EXIT_EXEC_ERROR),
        (["run", "demo", "--", "true"], EXIT_EXEC_ERROR),
    ],
)
def test_an_unusable_kubeconfig_is_one_line_naming_it_not_a_traceback(
    argv: list[str], want: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.kubeconfig"
    code, out, err = run(["--kubeconfig", str(missing), *argv], capsys)
    assert code == want
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("battery: error: no usable Kubernetes configuration")
    assert "Traceback" not in err


def test_an_unreachable_api_server_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: secret-token-value}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    code, _, err = run(["--kubeconfig", str(config), "ls"], capsys)
    assert code == EXIT_ERROR
    assert err.count("\n") == 1, err
    assert "unreachable" in err
    assert "secret-token-value" not in err


def test_options_before_the_double_dash_are_battery_s_and_after_it_the_command_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--timeout` before `--` is parsed (a bad value is a usage error); after it, nothing is."""
    code, _, err = run(["run", "demo", "--timeout", "x", "--", "sh"], capsys)
    assert code == 2
    assert "--timeout" in err
    missing = tmp_path / "nope"
    code, _, err = run(
        ["--kubeconfig", str(missing), "run", "demo", "--", "ls", "--timeout"], capsys
    )
    assert code == EXIT_EXEC_ERROR
    assert err.startswith("battery: error: no usable Kubernetes configuration")


ONE_SIDE = "name CLAIM:PATH on exactly one side: battery cp LOCAL CLAIM:PATH, or the reverse"


@pytest.mark.req("CC-115", "CC-109")
def test_cp_names_a_claim_on_exactly_one_side() -> None:
    for argv, said in (
        (("a", "b"), ONE_SIDE),
        (("c1:/x", "c2:/y"), ONE_SIDE),
        (("c1:", "local"), "no path after c1: (CLAIM:PATH)"),
    ):
        done = python("-m", "batteryop.client.cli", "cp", *argv)
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"battery: error: {said}\n"
