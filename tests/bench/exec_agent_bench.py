"""Exec round trip through the Exec Agent, and its stdout throughput.

Client -> agent (TLS, bearer token) -> TokenReview and a fresh claim read on the real API
server -> fake flintlockd (mutual TLS) -> the command really runs -> exit code back. Every call
passes the whole authorization. Prints one JSON line per figure:

    {"bench": "exec_roundtrip_true", "runs": 200, "p50_ms": ..., "p99_ms": ...,
     "phases_p50_ms": {"token_review": ..., "claim_read": ..., "flintlockd_open": ..., "exec": ...}}
    {"bench": "exec_stdout_throughput", "mib": 100, "seconds": ..., "mib_per_s": ...}

The phases say where the time goes: the API server (token_review, claim_read), flintlockd
accepting the stream (flintlockd_open), and the command from start to exit status (exec).
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from pathlib import Path

import grpc
import grpc.aio
from bench.stats import FULL, latency_figures

from battery_protos.flintlock.services.microvmexec.v1alpha1 import microvmexec_pb2
from batteryop.testing.controlplane import ControlPlane, admin_client
from batteryop.testing.exec_agent import (
    FLINTLOCKD_ADDRESS,
    Holders,
    Pki,
    agent_kube_config,
    make_pki,
    prepare_cluster,
    run_exec,
    running_agent,
)
from batteryop.testing.fake_flintlock import FakeFlintlockd

RUNS = 200 if FULL else 20
WARM = 10
MIB = 100 if FULL else 10


async def test_exec_round_trip_and_throughput(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cluster = prepare_cluster(controlplane)
    pki = make_pki(tmp_path / "pki")
    api = admin_client(cluster)
    try:
        async with (
            FakeFlintlockd.start(address=FLINTLOCKD_ADDRESS, tls=pki.flintlockd_tls) as fl,
            running_agent(pki, agent_kube_config(cluster), fl.target) as agent,
            agent.channel() as channel,
        ):
            holding = await Holders(api, namespace, fl, pki).hold()
            true = microvmexec_pb2.ExecStart(uid=holding.microvm_uid, cmd="true")
            for _ in range(WARM):
                await run_exec(channel, holding.metadata, true)
            agent.phases.clear()
            seconds = []
            for _ in range(RUNS):
                started = time.perf_counter()
                responses = await run_exec(channel, holding.metadata, true)
                seconds.append(time.perf_counter() - started)
                assert responses[-1].exit_code == 0
            by_phase: dict[str, list[float]] = defaultdict(list)
            for phase, spent in agent.phases:
                by_phase[phase.value].append(spent * 1000)
            print(
                json.dumps(
                    {
                        "bench": "exec_roundtrip_true",
                        "runs": RUNS,
                        **latency_figures(seconds, ndigits=2),
                        "phases_p50_ms": {
                            k: round(statistics.median(v), 2) for k, v in by_phase.items()
                        },
                    }
                )
            )

            size = MIB * 1024 * 1024
            big = microvmexec_pb2.ExecStart(
                uid=holding.microvm_uid, cmd=f"head -c {size} /dev/zero", shell=True
            )
            started = time.perf_counter()
            responses = await run_exec(channel, holding.metadata, big)
            spent = time.perf_counter() - started
            got = sum(len(r.stdout) for r in responses if r.WhichOneof("payload") == "stdout")
            assert got == size
            assert responses[-1].exit_code == 0
            print(
                json.dumps(
                    {
                        "bench": "exec_stdout_throughput",
                        "mib": MIB,
                        "seconds": round(spent, 3),
                        "mib_per_s": round(MIB / spent, 1),
                    }
                )
            )
            await print_baseline(pki, fl, holding.microvm_uid, size)
    finally:
        api.close()


async def print_baseline(pki: Pki, fl: FakeFlintlockd, uid: str, size: int) -> None:
    """The same two figures straight to the fake flintlockd (mutual TLS, no agent, no checks):
    the floor the agent adds to."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.serving_ca.cert_pem,
        private_key=pki.files["flintlockd_key_file"].read_bytes(),
        certificate_chain=pki.files["flintlockd_cert_file"].read_bytes(),
    )
    async with grpc.aio.secure_channel(fl.target, credentials) as channel:
        true = microvmexec_pb2.ExecStart(uid=uid, cmd="true")
        for _ in range(WARM):
            await run_exec(channel, (), true)
        seconds = []
        for _ in range(RUNS):
            started = time.perf_counter()
            await run_exec(channel, (), true)
            seconds.append(time.perf_counter() - started)
        big = microvmexec_pb2.ExecStart(uid=uid, cmd=f"head -c {size} /dev/zero", shell=True)
        started = time.perf_counter()
        await run_exec(channel, (), big)
        spent = time.perf_counter() - started
    print(
        json.dumps(
            {
                "bench": "flintlockd_direct_baseline",
                "runs": RUNS,
                **latency_figures(seconds, ndigits=2),
                "mib_per_s": round(MIB / spent, 1),
            }
        )
    )
