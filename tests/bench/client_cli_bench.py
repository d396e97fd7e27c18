"""The consumer's path timed end to end: `battery --help`, `battery run POOL -- true` on a warm
Pool, and 100 MiB of stdout through `battery run` (issue 25, item 7).

Every `battery` here is the console script of the built wheel (`src:battery-operator-client`)
installed in a clean venv, as a user runs it. `battery --help` needs no cluster; the rest runs
on the local stack (`batteryop.devstack.stack.Stack`: every deployable its own process, two
Hosts, the demo Pool of `batteryop.devstack.demo`). Before each timed run the benchmark waits
(by a watch) until the Pool has all its MicroVMs available again, so every run claims from a
warm Pool and none waits for a MicroVM to boot. Prints one JSON line per figure:

    {"bench": "battery_help", "runs": ..., "p50_ms": ..., "p99_ms": ...,
     "python_floor_p50_ms": ..., "imports_ms": {...}, "load_average_1m": ...}
    {"bench": "battery_run_true", "runs": ..., "p50_ms": ..., "p99_ms": ...,
     "phases_p50_ms": {"interpreter": ..., "import_cli": ..., "import_io": ...,
                       "client": ..., "claim": {...}, "exec": ..., "release": ..., "close": ...}}
    {"bench": "battery_run_stdout", "mib": 100, "seconds": ..., "mib_per_s": ...,
     "stream_seconds": ..., "stream_mib_per_s": ...}

Where `battery run` spends its time (`phases_p50_ms`) comes from a probe that does what the
command does, in the same venv, with each step timed: `interpreter` is `python -c pass`;
`import_cli` the import of `batteryop.client.cli` (what `--help` loads); `import_io` the
client's IO (asyncio, PyYAML, our HTTP over asyncio streams), which the command imports when it
makes its client; `import_grpc_on_thread` the exec transport (gRPC, protobuf), which `run`
imports on a thread meanwhile, overlapping `client` and `claim`; `client` reading the
kubeconfig and the CA; `claim` each API request of the claim by verb and resource, and
`wait_bound` the rest (the watch until the operator bound it, CL-001..CL-003, CC-003, which
the TokenRequest overlaps); `exec` the command through the Exec Agent (the gRPC channel's TLS
handshake, begun while the token came, every check of the agent, the command); `release` the
two deletes, side by side (CC-021); `close` the client's shutdown; `total` their sum, `wall`
the probe process from spawn to exit (so `wall - total - interpreter` is the interpreter's
start and exit around them). `imports_ms` is `python -X importtime` on the import of the
command's module, by top-level package (importtime itself adds to each). `stream_seconds` is
the 100 MiB run less the p50 of `true`: the stream alone.

The same path through the library with a kept client (issue 50, item 4): one process holds a
`batteryop.client.Client` (its API connections and the Exec Agent's gRPC channel kept from run
to run) and, on each line the benchmark writes, claims, runs `true` and releases; its runs
alternate with `battery run`'s, on the same warm Pool and load. This is the path's floor with
our libraries: the requests a claim needs (the Secret and the claim created, the watch until
it is usable, the token) and one exec on a channel already open, with no interpreter start,
import, kubeconfig read or TLS handshake:

    {"bench": "library_claim_to_exit", "runs": ..., "p50_ms": ..., "p99_ms": ...,
     "battery_run_p50_ms": ..., "battery_run_over_library_p50": ..., "load_average_1m": ...}

And the bare minimum as a command (issue 50, item 4, "the API calls and one exec with a kept
channel, scripted with the same libraries"): `BARE`, a script of our libraries run as its own
process in the same venv, in turns with the two above, which creates the claim, makes its
Secret and token beside the watch until Bound, runs the command on a channel dialled once,
writes its stdout and deletes the claim; the interpreter's start and the imports included, the
CLI's layers left out:

    {"bench": "bare_run_true", "runs": ..., "p50_ms": ..., "p99_ms": ...,
     "battery_run_over_bare_p50": ..., "battery_run_over_bare_p99": ..., ...}

`library_claim_to_exit` is from the call to `claim` to `true`'s exit code; the release after
it is not counted (`release_p50_ms`). `battery_run_stdout` adds the kept client's 100 MiB
(`kept_exec_mib_per_s`, the exec alone) and the command's share of it
(`stream_over_kept`: the command's stream rate over the kept client's) and the bare script's
100 MiB (`bare_mib_per_s`; `over_bare`, its seconds over the command's).

`battery shell` (issue 45) is typed into a pseudo-terminal, as a person uses it, on one claim
held throughout:

    {"bench": "shell_first_output", "guests": ..., "n": ..., "p50_ms": ..., "p99_ms": ...}
    {"bench": "shell_keystroke", "guests": ..., "n": ..., "p50_ms": ..., "p99_ms": ...}

- `shell_first_output`: from starting `battery shell CLAIM -t -- sh -c 'printf READY; exec
  cat'` to `READY` on the terminal: the command's start, the claim's reads, the key's grant
  over exec, ssh's start, its key exchange and login through the Exec Agent and flintlockd's
  SSH proxy, and the remote command's start. A login shell's prompt comes at the same point
  (its first output), so this is the time to the first prompt.
- `shell_keystroke`: in that session, one byte typed until the remote PTY's echo of it is on
  the terminal: the whole round trip through ssh, the agent and the guest, one at a time.

`battery cp` of one file in and out (issue 45), with the peak RSS of `battery` (its rusage) and
of the claim's Exec Agent (VmHWM, since the stack started):

    {"bench": "battery_cp", "mib": ..., "in_mib_per_s": ..., "out_mib_per_s": ...,
     "client_peak_rss_mib": {"in": ..., "out": ...}, "agent_peak_rss_mib": ...}

The fake flintlockd runs sandbox guests, or QEMU guests with BATTERYOP_BENCH_GUESTS=qemu.

BATTERYOP_BENCH=1: 200 `--help`, 50 `run -- true` and 50 through the kept client, 100 MiB, 20
shells, 500 keystrokes and 1 GiB through `cp`; otherwise a smoke pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import filecmp
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from bench.stats import FULL, latency_figures
from e2e.driver import cli, until

from batteryop.client.wheel_test import make_venv, pip_install, pyenv_python, the_wheel
from batteryop.devstack import demo
from batteryop.devstack.cluster import DEMO_NAMESPACE
from batteryop.devstack.stack import Stack, running
from batteryop.kube.client import KubeClient
from batteryop.kube.resources import CLAIMS, POOLS
from batteryop.testing.terminal import Terminal

HELP_RUNS = 200 if FULL else 10
RUN_RUNS = 50 if FULL else 3
PROBE_RUNS = 30 if FULL else 2
MIB = 100 if FULL else 10
SHELLS = 20 if FULL else 2
KEYSTROKES = 500 if FULL else 20
CP_MIB = 1024 if FULL else 16
GUESTS = os.environ.get("BATTERYOP_BENCH_GUESTS", "sandbox")
WARM = 3

ON_THE_STACK = pytest.mark.asyncio(loop_scope="module")
"""The async tests share the module's event loop, as the `stack` fixture does."""


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def wall_times(argv: Sequence[str | Path], runs: int) -> list[float]:
    """Seconds each of `runs` runs of `argv` took, start to exit, after two unrecorded ones."""
    seconds = []
    for i in range(runs + 2):
        started = time.perf_counter()
        subprocess.run([str(a) for a in argv], stdout=subprocess.DEVNULL, check=True, timeout=60)
        if i >= 2:
            seconds.append(time.perf_counter() - started)
    return seconds


def import_breakdown(python: Path, module: str, runs: int = 5) -> dict[str, float]:
    """`python -X importtime -c "import module"`: the median ms each top-level package's own
    modules took (self times summed by the first dotted part of each module's name), the
    eight largest, and their `total`."""
    per_run: dict[str, list[float]] = defaultdict(list)
    for _ in range(runs):
        done = subprocess.run(
            [str(python), "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        totals: dict[str, float] = defaultdict(float)
        for line in done.stderr.splitlines():
            fields = line.removeprefix("import time:").split("|")
            if len(fields) != 3 or not fields[0].strip().isdigit():
                continue  # the header, or not importtime's
            totals[fields[2].strip().split(".")[0]] += int(fields[0]) / 1000
        totals["total"] = sum(totals.values())
        for package, ms in totals.items():
            per_run[package].append(ms)
    medians = {p: round(statistics.median(v), 1) for p, v in per_run.items()}
    return dict(sorted(medians.items(), key=lambda kv: -kv[1])[:9])


def test_battery_help_wall_time(tmp_path: Path) -> None:
    python = pyenv_python("3.11") or Path(sys.executable)
    bin_dir = make_venv(python, tmp_path / "venv")
    installed = pip_install(bin_dir, the_wheel())
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    floor = wall_times([bin_dir / "python", "-c", "pass"], HELP_RUNS)
    helped = wall_times([bin_dir / "battery", "--help"], HELP_RUNS)
    print(
        json.dumps(
            {
                "bench": "battery_help",
                "runs": HELP_RUNS,
                **latency_figures(helped),
                "python_floor_p50_ms": round(statistics.median(floor) * 1000, 1),
                "imports_ms": import_breakdown(bin_dir / "python", "batteryop.client.cli"),
                "load_average_1m": load_average(),
            }
        )
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with running(tmp_path_factory.mktemp("devstack"), Path("."), guests=GUESTS) as up:
        yield up


async def warm(kube: KubeClient) -> None:
    """Until the demo Pool has every MicroVM available again (its size), by a watch."""

    def full(body: dict[str, Any] | None) -> bool:
        spec, status = (body or {}).get("spec") or {}, (body or {}).get("status") or {}
        return status.get("available", 0) >= spec.get("size", 1) and not status.get("leased")

    await until(kube, POOLS, demo.POOL, full, namespace=DEMO_NAMESPACE, what="the Pool warm")


async def battery(env: Mapping[str, str], *args: str) -> tuple[float, int, str]:
    """`battery args` (stdout counted, not kept): its seconds, stdout bytes and stderr."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        "battery",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )
    return await counted(process, started)


async def counted(process: asyncio.subprocess.Process, started: float) -> tuple[float, int, str]:
    """Read `process`'s stdout to its end (counted, not kept) and wait for it: its seconds since
    `started`, its stdout bytes and its stderr; it must exit 0."""
    assert process.stdout is not None and process.stderr is not None
    errors = asyncio.ensure_future(process.stderr.read())
    got = 0
    while chunk := await process.stdout.read(1024 * 1024):
        got += len(chunk)
    code = await process.wait()
    spent = time.perf_counter() - started
    err = (await errors).decode()
    assert code == 0, err[-3000:]
    return spent, got, err


CLAIM_RUN_RELEASE = r"""
def claim_run_release(client, pool, holder, argv, claimed=lambda: None):
    # Claim, run argv (stdout counted), release: perf_counter at the start and at each step's
    # end, and the stdout bytes; `claimed` is called once the claim is held.
    t0 = time.perf_counter()
    held = client.claim(pool, holder)
    t1 = time.perf_counter()
    claimed()
    got = [0]
    result = held.exec_stream(argv, stdout=lambda b: got.__setitem__(0, got[0] + len(b)),
                              stderr=lambda b: None)
    t2 = time.perf_counter()
    held.release()
    t3 = time.perf_counter()
    assert result.exit_code == 0, result
    return (t0, t1, t2, t3), got[0]
"""
"""What the probe and the kept client (the scripts below) each do for one run."""

PROBE = (
    r"""
import json, os, sys, threading, time
"""
    + CLAIM_RUN_RELEASE
    + r"""
t0 = time.perf_counter()
import batteryop.client.cli as cli  # what the console script imports first
t1 = time.perf_counter()
cli._OWN_PROCESS = True  # as main() sets it for the console script
from batteryop.client._sync import Client  # what `_client` imports for every command but --help
from batteryop.kube.client import KubeClient
t2 = time.perf_counter()
grpc_import = []

def import_grpc():  # as `_client` does for `run` and `exec`, timed
    started = time.perf_counter()
    cli._import_exec_transport()
    grpc_import.append(time.perf_counter() - started)

threading.Thread(target=import_grpc, daemon=True).start()

requests = []
_request = KubeClient._request

async def timed(self, verb, method, path, **kw):
    started = time.perf_counter()
    try:
        return await _request(self, verb, method, path, **kw)
    finally:
        parts = path.split("/")
        at = parts.index("namespaces") + 2 if "namespaces" in parts else len(parts) - 1
        what = "/".join(p for i, p in enumerate(parts) if i == at or (i == at + 2 and p))
        requests.append((f"{verb} {what}", time.perf_counter() - started))

KubeClient._request = timed
pool, holder, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
client = Client(namespace=os.environ["BATTERY_NAMESPACE"], kubeconfig=os.environ["KUBECONFIG"],
                serving_ca=os.environ["BATTERY_CA"])
claim_requests = []
(t3, t4, t5, t6), stdout_bytes = claim_run_release(
    client, pool, holder, argv, claimed=lambda: claim_requests.extend(requests))
client.close()
t7 = time.perf_counter()
ms = lambda s: round(s * 1000, 2)
claim = {}
for what, s in claim_requests:
    claim[what] = claim.get(what, 0) + ms(s)
# The TokenRequest runs beside the wait for Bound: the rest of the claim's time, less the
# requests made one after the other, is that wait (the token's share of it included).
claim["wait_bound"] = round(ms(t4 - t3) - sum(v for k, v in claim.items() if "token" not in k), 2)
print(json.dumps({"import_cli": ms(t1 - t0), "import_io": ms(t2 - t1), "client": ms(t3 - t2),
                  "claim": claim, "exec": ms(t5 - t4), "release": ms(t6 - t5),
                  "close": ms(t7 - t6), "total": ms(t7 - t0), "stdout_bytes": stdout_bytes,
                  "import_grpc_on_thread": ms(grpc_import[0])}))
"""
)


async def venv_script(
    stack: Stack, script: str, *argv: str, stdin: int, stderr: int | None = None
) -> asyncio.subprocess.Process:
    """`script` run by the client venv's Python with the stack's environment, given the demo
    Pool, the Holder and `argv`; its stdout a pipe."""
    env = stack.cli_env()
    return await asyncio.create_subprocess_exec(
        str(stack.venv / "bin" / "python"),
        "-c",
        script,
        demo.POOL,
        env["BATTERY_HOLDER"],
        *argv,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        env=env,
    )


async def probe(stack: Stack, *argv: str) -> dict[str, Any]:
    """The probe above, in the client venv with the stack's environment: its figures, and
    `wall`, the ms from its spawn to its exit."""
    started = time.perf_counter()
    process = await venv_script(
        stack, PROBE, *argv, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-3000:]
    figures: dict[str, Any] = json.loads(out.decode().splitlines()[-1])
    figures["wall"] = round((time.perf_counter() - started) * 1000, 2)
    return figures


KEPT = (
    r"""
import json, os, sys, time
from batteryop.client import Client
"""
    + CLAIM_RUN_RELEASE
    + r"""
pool, holder = sys.argv[1], sys.argv[2]
ms = lambda s: round(s * 1000, 2)
with Client(namespace=os.environ["BATTERY_NAMESPACE"], kubeconfig=os.environ["KUBECONFIG"],
            serving_ca=os.environ["BATTERY_CA"]) as client:
    print("ready", flush=True)
    for line in sys.stdin:
        (t0, t1, t2, t3), stdout_bytes = claim_run_release(client, pool, holder, line.split())
        print(json.dumps({"claim": ms(t1 - t0), "exec": ms(t2 - t1), "to_exit": ms(t2 - t0),
                          "release": ms(t3 - t2), "stdout_bytes": stdout_bytes}), flush=True)
"""
)


BARE = r"""
import asyncio, os, sys
from datetime import UTC, datetime

from batteryop.api import names
from batteryop.client import _core
from batteryop.client._exec import ExecRequest
from batteryop.client._transport import GrpcExecTransport
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import CLAIMS, SECRETS, SERVICEACCOUNTS

async def main(pool, holder, argv):
    ns = os.environ["BATTERY_NAMESPACE"]
    with open(os.environ["BATTERY_CA"], "rb") as f:
        grpc = GrpcExecTransport(f.read())
    async with KubeClient(KubeConfig.from_kubeconfig(os.environ["KUBECONFIG"])) as kube:
        created = await kube.create(CLAIMS, _core.claim_body(ns, pool, holder), ns)
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]

        async def token():
            secret = await kube.create(SECRETS, _core.exec_secret_body(name, uid, ns), ns)
            body = _core.token_request_body(
                names.exec_secret_name(name), secret["metadata"]["uid"], 600
            )
            answer = await kube.create(
                SERVICEACCOUNTS, body, ns, name=holder, subresource="token"
            )
            return secret["metadata"]["uid"], answer["status"]["token"]

        got = asyncio.ensure_future(token())
        claim = None
        async for _, obj in kube.watch(
            CLAIMS, ns, field_selector=f"metadata.name={name}",
            resource_version=created["metadata"]["resourceVersion"],
        ):
            claim = _core.parse_claim(obj)
            if _core.is_bound(claim, datetime.now(UTC)):
                break
        grpc.connect(claim.status.agent_address)
        secret_uid, bearer = await got
        out = sys.stdout.buffer.raw
        code = await grpc.run(
            claim.status.agent_address, bearer,
            ExecRequest(microvm_uid=claim.status.microvm_uid, argv=tuple(argv)),
            stdin=None, stdout=out.write, stderr=sys.stderr.buffer.raw.write,
            errors=lambda message: None,
        )
        await asyncio.gather(
            kube.delete(CLAIMS, name, ns, uid=uid),
            kube.delete(SECRETS, names.exec_secret_name(name), ns, uid=secret_uid),
        )
    await grpc.aclose()
    return code

sys.stdout.flush()
os._exit(asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:])))
"""
"""The bare minimum `battery run POOL -- argv` needs, as its own process with the same
libraries (issue 50, item 4): the kubeconfig read, the claim created, its Secret and token
beside the watch until it is Bound, one exec on a gRPC channel dialled once it is, its stdout
written to this process's, and the claim and Secret deleted together; then the process ends as
`battery` does (`os._exit`). What it leaves out is what the command adds: click and the CLI,
the sync client's loop thread, the Pool read that fails a missing Pool at once (CC-113), the
holding (renewals, CC-010), the error mapping and clean-ups on interrupts."""


async def bare(stack: Stack, *argv: str) -> tuple[float, int]:
    """BARE above, spawn to exit: its seconds and the bytes it wrote to stdout."""
    started = time.perf_counter()
    process = await venv_script(
        stack, BARE, *argv, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    spent, got, _ = await counted(process, started)
    return spent, got


class KeptClient:
    """The KEPT script above in the client venv: one `Client` for every run."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, stack: Stack) -> AsyncIterator[KeptClient]:
        process = await venv_script(stack, KEPT, stdin=asyncio.subprocess.PIPE)
        kept = cls(process)
        try:
            assert await kept._line() == "ready"
            yield kept
        finally:
            assert process.stdin is not None
            process.stdin.close()
            async with asyncio.timeout(60):
                assert await process.wait() == 0

    async def _line(self) -> str:
        assert self.process.stdout is not None
        async with asyncio.timeout(120):
            line = await self.process.stdout.readline()
        assert line, f"the kept client exited {await self.process.wait()}"
        return line.decode().strip()

    async def run(self, *argv: str) -> dict[str, Any]:
        """Claim, run `argv`, release: each step's ms (`to_exit`: claim to exit code)."""
        assert self.process.stdin is not None
        self.process.stdin.write((" ".join(argv) + "\n").encode())
        await self.process.stdin.drain()
        figures: dict[str, Any] = json.loads(await self._line())
        return figures


def median_phases(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per phase (and per claim request) the median over `runs`, in ms."""
    out: dict[str, Any] = {}
    keys = ("import_cli", "import_io", "client", "exec", "release", "close", "total", "wall")
    for key in (*keys, "import_grpc_on_thread"):
        out[key] = round(statistics.median(r[key] for r in runs), 2)
    claim_keys = {k for r in runs for k in r["claim"]}
    out["claim"] = {
        k: round(statistics.median(r["claim"].get(k, 0.0) for r in runs), 2)
        for k in sorted(claim_keys)
    }
    return out


@ON_THE_STACK
async def test_battery_run_on_a_warm_pool_and_its_stdout(stack: Stack) -> None:
    env = stack.cli_env()
    async with stack.kube() as kube:
        await demo.apply_pool(kube)
        for _ in range(WARM):
            await warm(kube)
            await battery(env, "run", demo.POOL, "--", "true")
        seconds = []
        phases = []
        bare_seconds: list[float] = []
        kept_runs: list[dict[str, Any]] = []
        async with KeptClient.start(stack) as kept:
            for _ in range(WARM):
                await warm(kube)
                await kept.run("true")
            # The command, the kept client and the probe in turns: the same load on each.
            for i in range(RUN_RUNS):
                await warm(kube)
                spent, _, _ = await battery(env, "run", demo.POOL, "--", "true")
                seconds.append(spent)
                await warm(kube)
                kept_runs.append(await kept.run("true"))
                await warm(kube)
                bare_seconds.append((await bare(stack, "true"))[0])
                if i < PROBE_RUNS:
                    await warm(kube)
                    phases.append(await probe(stack, "true"))
            size = MIB * 1024 * 1024
            await warm(kube)
            kept_stdout = await kept.run("head", "-c", str(size), "/dev/zero")
            assert kept_stdout["stdout_bytes"] == size
        load = load_average()
        floor = wall_times([stack.venv / "bin" / "python", "-c", "pass"], 10)
        print(
            json.dumps(
                {
                    "bench": "battery_run_true",
                    "runs": RUN_RUNS,
                    **latency_figures(seconds),
                    "phases_p50_ms": {
                        "interpreter": round(statistics.median(floor) * 1000, 2),
                        **median_phases(phases),
                    },
                    "probe_runs": PROBE_RUNS,
                    "load_average_1m": load,
                }
            )
        )
        run, bare_run = latency_figures(seconds, 3), latency_figures(bare_seconds, 3)
        print(
            json.dumps(
                {
                    "bench": "bare_run_true",
                    "runs": RUN_RUNS,
                    **latency_figures(bare_seconds),
                    "battery_run_p50_ms": round(run["p50_ms"], 1),
                    "battery_run_over_bare_p50": round(run["p50_ms"] / bare_run["p50_ms"], 2),
                    "battery_run_over_bare_p99": round(run["p99_ms"] / bare_run["p99_ms"], 2),
                    "load_average_1m": load,
                }
            )
        )
        to_exit = [r["to_exit"] / 1000 for r in kept_runs]
        print(
            json.dumps(
                {
                    "bench": "library_claim_to_exit",
                    "runs": RUN_RUNS,
                    **latency_figures(to_exit),
                    "claim_p50_ms": round(statistics.median(r["claim"] for r in kept_runs), 2),
                    "exec_p50_ms": round(statistics.median(r["exec"] for r in kept_runs), 2),
                    "release_p50_ms": round(statistics.median(r["release"] for r in kept_runs), 2),
                    "battery_run_p50_ms": round(statistics.median(seconds) * 1000, 1),
                    "battery_run_over_library_p50": round(
                        statistics.median(seconds) / statistics.median(to_exit), 2
                    ),
                    "load_average_1m": load,
                }
            )
        )

        await warm(kube)
        spent, got, _ = await battery(
            env, "run", demo.POOL, "--", "head", "-c", str(size), "/dev/zero"
        )
        assert got == size
        await warm(kube)
        library = await probe(stack, "head", "-c", str(size), "/dev/zero")
        assert library["stdout_bytes"] == size
        await warm(kube)
        bare_spent, bare_got = await bare(stack, "head", "-c", str(size), "/dev/zero")
        assert bare_got == size
        stream = spent - statistics.median(seconds)
        print(
            json.dumps(
                {
                    "bench": "battery_run_stdout",
                    "mib": MIB,
                    "seconds": round(spent, 3),
                    "mib_per_s": round(MIB / spent, 1),
                    "stream_seconds": round(stream, 3),
                    "stream_mib_per_s": round(MIB / stream, 1) if stream > 0 else None,
                    "library_exec_ms": library["exec"],
                    "library_exec_mib_per_s": round(MIB / (library["exec"] / 1000), 1),
                    "kept_exec_mib_per_s": round(MIB / (kept_stdout["exec"] / 1000), 1),
                    "stream_over_kept": (
                        round(kept_stdout["exec"] / 1000 / stream, 2) if stream > 0 else None
                    ),
                    "bare_seconds": round(bare_spent, 3),
                    "bare_mib_per_s": round(MIB / bare_spent, 1),
                    "over_bare": round(bare_spent / spent, 2),
                    "load_average_1m": load_average(),
                }
            )
        )


async def typed(terminal: Terminal, key: bytes) -> float:
    """Seconds from typing `key` to its echo on the terminal."""
    seen = len(terminal.output)
    started = time.perf_counter()
    terminal.type(key)
    async with asyncio.timeout(30):
        while key not in terminal.output[seen:]:
            terminal.changed.clear()
            await terminal.changed.wait()
    return time.perf_counter() - started


@ON_THE_STACK
async def test_a_shell_opens_and_echoes_keystrokes(stack: Stack) -> None:
    async with stack.kube() as kube:
        await demo.apply_pool(kube)
    code, out, err = await cli(stack, "claim", demo.POOL)
    assert code == 0, err
    name = out.strip()
    opened: list[float] = []
    keystrokes: list[float] = []
    try:
        for i in range(SHELLS):
            started = time.perf_counter()
            terminal = Terminal(
                f"battery shell {name} -t -- sh -c 'printf READY; exec cat'", stack.cli_env()
            )
            try:
                await terminal.wait_for("READY", 120)
                opened.append(time.perf_counter() - started)
                if i == 0:
                    for _ in range(KEYSTROKES):
                        keystrokes.append(await typed(terminal, b"k"))
                terminal.type(b"\n\x04")  # end the line, then ^D: cat sees the end of its input
                assert await terminal.exited(30) == 0, terminal.text
            finally:
                terminal.close()
    finally:
        await cli(stack, "release", name)
    load = [round(x, 1) for x in os.getloadavg()]
    for bench, samples in (("shell_first_output", opened), ("shell_keystroke", keystrokes)):
        figures = {"bench": bench, "guests": GUESTS, **latency_figures(samples)}
        figures["loadavg_1_5_15"] = load
        print()
        print(json.dumps(figures))
    assert len(opened) == SHELLS and len(keystrokes) == KEYSTROKES


def peak_rss_mib(pid: int) -> float:
    """A running process's peak resident set (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise AssertionError(f"no VmHWM for {pid}")


def timed_battery(env: Mapping[str, str], *args: str) -> tuple[float, float]:
    """`battery args`: its seconds and its peak RSS in MiB (its own rusage, from wait4)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        ["battery", *args], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(env)
    )
    _, status, usage = os.wait4(process.pid, 0)
    spent = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stderr is not None
    assert process.returncode == 0, process.stderr.read().decode()
    return spent, round(usage.ru_maxrss / 1024, 1)


@ON_THE_STACK
async def test_battery_cp_of_one_file_in_and_out(stack: Stack, tmp_path: Path) -> None:
    async with stack.kube() as kube:
        await demo.apply_pool(kube)
    code, out, err = await cli(stack, "claim", demo.POOL)
    assert code == 0, err
    name = out.strip()
    try:
        big = tmp_path / "big"
        with big.open("wb") as f:  # not all zeros: nothing on the way may shrink it
            block = os.urandom(1024 * 1024)
            for _ in range(CP_MIB):
                f.write(block)
        env = stack.cli_env()
        seconds_in, rss_in = await asyncio.to_thread(
            timed_battery, env, "cp", str(big), f"{name}:big"
        )
        back = tmp_path / "back"
        seconds_out, rss_out = await asyncio.to_thread(
            timed_battery, env, "cp", f"{name}:big", str(back)
        )
        assert back.stat().st_size == big.stat().st_size
        async with stack.kube() as kube:
            node = (await kube.get(CLAIMS, name, DEMO_NAMESPACE))["status"]["host"]["nodeName"]
        agent = peak_rss_mib(stack.running(f"exec-agent-{node}").popen.pid)
    finally:
        await cli(stack, "release", name)
    figures = {
        "bench": "battery_cp",
        "guests": GUESTS,
        "mib": CP_MIB,
        "in_mib_per_s": round(CP_MIB / seconds_in, 1),
        "out_mib_per_s": round(CP_MIB / seconds_out, 1),
        "client_peak_rss_mib": {"in": rss_in, "out": rss_out},
        "agent_peak_rss_mib": agent,
        "loadavg_1_5_15": [round(x, 1) for x in os.getloadavg()],
    }
    print()
    print(json.dumps(figures))
    assert filecmp.cmp(big, back, shallow=False)
