"""CSR create → signed certificate latency, and approvals per second in a burst.

The real kube-apiserver, the approver as its own process (its pex, production logging), and
requests made by the Exec Agent's identity (a token bound to a Pod on a Node, as in
`batteryop.testing.csr_approver_env`). One watch on the benchmark's requests records, per
request, the monotonic time it was first seen Approved and first seen with a certificate;
latency is the latter minus the moment its create request was sent.

- `sequential`: N requests one after the other (each waits for its certificate), per signer
  kind: `exec-serving` (exec-agent-serving, signed with the Exec Agents' own CA) and `serving`
  (flintlockd-serving); both read the Node and pins and are reviewed one at a time, pinned
  once. (Until CT-102 the first kind was `flintlockd-client`, reviewed in parallel with no Node
  read; the approver now denies those, so figures before and after are not comparable.)
- `burst`: B requests created at once, per signer kind; `approvals_per_second` is B over the
  time from the first create to the last Approved seen, `signed_per_second` likewise to the last
  certificate; latency figures are over the burst's requests.
- `api_server_floor`: first, before the approver starts, the same burst approved and given a
  certificate by the benchmark itself: the API server's pace for the approver's two writes on
  this machine, with no reads and no review.

`approver_usage`: the approver's CPU seconds and resident memory (now and peak, from /proc)
once started and warmed up, over `IDLE_SECONDS` at rest (60 s with BATTERYOP_BENCH=1), and
over each burst.

Prints one JSON object. BATTERYOP_BENCH=1 runs N=50 and B=100; otherwise N=5 and B=10 as a
smoke run that proves the benchmark works. Also printed: the approver's own mean time per
review (from its /metrics) and the machine's 1-minute load average, since the approver, the API
server and the benchmark share the machine's cores.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.stats import FULL, IDLE_SECONDS, Usage, cpu_seconds, latency_figures, memory_mb

from batteryop.api import names
from batteryop.api.conditions import CSRCondition
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.resources import CERTIFICATE_SIGNING_REQUESTS
from batteryop.testing.controlplane import ControlPlane
from batteryop.testing.csr_approver_env import (
    TRUST_DOMAIN,
    ApproverProcess,
    Cluster,
    condition,
    make_cluster,
)
from batteryop.testing.csrs import csr_body, ec_key, request_pem

N = 50 if FULL else 5
B = 100 if FULL else 10
LABEL = "bench.battery.liquidmetal-x.dev/run"
TIMEOUT = 120.0


class Seen:
    """First time each request was seen Approved, and with a certificate, on one watch."""

    def __init__(self) -> None:
        self.approved: dict[str, float] = {}
        self.signed: dict[str, float] = {}
        self._changed = asyncio.Condition()

    def record(self, obj: dict[str, Any]) -> None:
        name, now = obj["metadata"]["name"], time.monotonic()
        if condition(obj, CSRCondition.APPROVED):
            self.approved.setdefault(name, now)
        if (obj.get("status") or {}).get("certificate"):
            self.signed.setdefault(name, now)

    async def follow(self, kube: KubeClient, selector: str) -> None:
        items = await kube.list(CERTIFICATE_SIGNING_REQUESTS, label_selector=selector)
        rv = items.resource_version
        while True:
            async for _kind, obj in kube.watch(
                CERTIFICATE_SIGNING_REQUESTS, label_selector=selector, resource_version=rv
            ):
                rv = obj["metadata"]["resourceVersion"]
                self.record(obj)
                async with self._changed:
                    self._changed.notify_all()

    async def until_signed(self, names_: list[str]) -> None:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: all(n in self.signed for n in names_)), TIMEOUT
            )


@contextlib.asynccontextmanager
async def following(kube: KubeClient, selector: str) -> AsyncIterator[Seen]:
    seen = Seen()
    task = asyncio.create_task(seen.follow(kube, selector))
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


EXEC_SERVING = "exec-serving"
"""The kind of an exec-agent-serving request in the figures."""


class Requests:
    """Makes the benchmark's request bodies (fresh keys made ahead, outside the timing)."""

    def __init__(self, cluster: Cluster, node: str, run: str) -> None:
        self.cluster, self.node, self.run = cluster, node, run
        self.count = 0

    def body(self, kind: str) -> dict[str, Any]:
        self.count += 1
        if kind == EXEC_SERVING:
            signer = names.EXEC_AGENT_SERVING_SIGNER
            sans: tuple[str, ...] = (
                "10.50.0.1",
                names.spiffe_exec_agent_id(TRUST_DOMAIN, self.node),
            )
        else:
            signer = names.FLINTLOCKD_SERVING_SIGNER
            sans = ("10.50.0.1", names.spiffe_host_id(TRUST_DOMAIN, self.node))
        body = csr_body(
            f"bench-{self.run}-{kind}-{self.count}", signer, request_pem(ec_key(), sans)
        )
        body["metadata"]["labels"] = {LABEL: self.run}
        return body


async def sequential(
    agent: KubeClient, seen: Seen, requests: Requests, kind: str
) -> dict[str, float]:
    latencies = []
    for _ in range(N):
        body = requests.body(kind)
        sent = time.monotonic()
        await requests.cluster.create_csr(agent, body)
        name = body["metadata"]["name"]
        await seen.until_signed([name])
        latencies.append(seen.signed[name] - sent)
    return latency_figures(latencies)


async def burst(agent: KubeClient, seen: Seen, requests: Requests, kind: str) -> dict[str, float]:
    bodies = [requests.body(kind) for _ in range(B)]
    sent: dict[str, float] = {}

    async def create(body: dict[str, Any]) -> None:
        sent[body["metadata"]["name"]] = time.monotonic()
        await requests.cluster.create_csr(agent, body)

    start = time.monotonic()
    await asyncio.gather(*(create(b) for b in bodies))
    made = list(sent)
    await seen.until_signed(made)
    last_approved = max(seen.approved[n] for n in made)
    last_signed = max(seen.signed[n] for n in made)
    figures: dict[str, float] = latency_figures(seen.signed[n] - sent[n] for n in made)
    figures["approvals_per_second"] = round(B / (last_approved - start), 1)
    figures["signed_per_second"] = round(B / (last_signed - start), 1)
    return figures


async def api_server_floor(
    kube: KubeClient, agent: KubeClient, seen: Seen, requests: Requests, cluster: Cluster
) -> dict[str, float]:
    """Before the approver starts: B exec-serving requests created at once, each then approved and
    given a certificate by the benchmark itself (the approver's two writes, without its reads
    or review), so the API server's own pace on this machine is known."""
    bodies = [requests.body(EXEC_SERVING) for _ in range(B)]
    cert = base64.b64encode(
        cluster.exec_serving_ca.issue(requests.node, server=True).cert_pem
    ).decode()
    sent: dict[str, float] = {}

    async def one(body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        sent[name] = time.monotonic()
        created = await requests.cluster.create_csr(agent, body)
        obj = await kube.get(CERTIFICATE_SIGNING_REQUESTS, created)
        obj.setdefault("status", {})["conditions"] = [
            {"type": "Approved", "status": "True", "reason": "Floor", "message": "bench"}
        ]
        obj = await kube.replace(CERTIFICATE_SIGNING_REQUESTS, name, obj, subresource="approval")
        obj["status"]["certificate"] = cert
        await kube.replace(CERTIFICATE_SIGNING_REQUESTS, name, obj, subresource="status")

    start = time.monotonic()
    await asyncio.gather(*(one(b) for b in bodies))
    made = list(sent)
    await seen.until_signed(made)
    figures: dict[str, float] = latency_figures(seen.signed[n] - sent[n] for n in made)
    figures["approvals_per_second"] = round(B / (max(seen.approved[n] for n in made) - start), 1)
    figures["signed_per_second"] = round(B / (max(seen.signed[n] for n in made) - start), 1)
    return figures


def review_figures(metrics: str) -> dict[str, float]:
    """The approver's own time per review (read to write done), from its /metrics page."""
    values: dict[str, float] = {}
    for line in metrics.splitlines():
        for key in ("review_duration_seconds_sum", "review_duration_seconds_count"):
            if line.startswith(f"battery_csr_approver_{key} "):
                values[key] = float(line.split()[-1])
    count = values.get("review_duration_seconds_count", 0.0)
    mean = values.get("review_duration_seconds_sum", 0.0) / count if count else 0.0
    return {"reviews": count, "mean_review_ms": round(mean * 1000, 1)}


async def test_csr_create_to_certificate(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    run = uuid.uuid4().hex[:6]
    kubeconfig = controlplane.write_kubeconfig(tmp_path / "approver.kubeconfig")
    async with KubeClient(KubeConfig.from_dict(controlplane.kubeconfig())) as kube:
        cluster = await make_cluster(controlplane, kube, namespace)
        try:
            node = await cluster.node("bench-host", "10.50.0.1")
            args = [
                f"--kubeconfig={kubeconfig}",
                f"--trust-domain={TRUST_DOMAIN}",
                f"--namespace={namespace}",
                "--exec-agent-service-account=exec-agent",
                "--log-format=json",
                "--log-level=info",
            ]
            requests = Requests(cluster, node, run)
            result: dict[str, Any] = {"bench": "csr_approver", "n": N, "burst": B}
            async with (
                cluster.client_as(node) as agent,
                following(kube, f"{LABEL}={run}") as seen,
            ):
                result["api_server_floor"] = await api_server_floor(
                    kube, agent, seen, requests, cluster
                )
            with ApproverProcess.start(args) as proc:
                async with (
                    cluster.client_as(node) as agent,
                    following(kube, f"{LABEL}={run}") as seen,
                ):
                    # Warm-up: the approver is up, has listed, loaded both CAs, pinned the address.
                    for kind in (EXEC_SERVING, "serving"):
                        body = requests.body(kind)
                        await cluster.create_csr(agent, body)
                        await seen.until_signed([body["metadata"]["name"]])
                    pid = proc.popen.pid
                    usage: dict[str, Any] = {
                        "started": {"cpu_s": round(cpu_seconds(pid), 2), **memory_mb(pid)}
                    }
                    # At rest: nothing to do but keep its watches open (the wait is the figure).
                    meter = Usage(pid)
                    await asyncio.sleep(IDLE_SECONDS)
                    usage[f"idle_{IDLE_SECONDS:.0f}s"] = meter.figures()
                    for kind in (EXEC_SERVING, "serving"):
                        result[f"sequential_{kind}"] = await sequential(agent, seen, requests, kind)
                    for kind in (EXEC_SERVING, "serving"):
                        meter = Usage(pid)
                        result[f"burst_{kind}"] = await burst(agent, seen, requests, kind)
                        usage[f"burst_{kind}"] = meter.figures()
                    result["approver_usage"] = usage
                assert proc.popen.poll() is None, proc.logs()[-4000:]
                _, metrics = await asyncio.to_thread(proc.get, "/metrics", proc.metrics_port)
                result["approver"] = review_figures(metrics)
            result["load_average_1m"] = round(os.getloadavg()[0], 2)
        finally:
            await cluster.cleanup()
    print()
    print(json.dumps(result))
    assert result[f"sequential_{EXEC_SERVING}"]["n"] == N
    assert result["burst_serving"]["n"] == B
