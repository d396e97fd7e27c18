"""The claim workload every controller is measured by, whatever its claim resource.

`claim_bind_bench` runs it against our operator and `peers/peers_bench.py` against our operator
and agent-sandbox's controller in turn, through these same pieces, so both sides are timed,
counted and watched alike:

- `FirstSeen`: a watch on one namespace's claims recording, per claim, the monotonic time it
  was first seen in each state of interest (ready, bound, ...);
- `one_at_a_time`: claims created one after another, each waiting for the previous;
- `at_once`: claims created from 16 client threads at once, with what they cost (`Meter`:
  CPU seconds per process from /proc, the API server's `apiserver_request_total` per claim);
- the API server's own figures from its /metrics (`apiserver_requests`,
  `apiserver_request_means`).

Latency is always the moment the watch first saw the claim in that state minus the moment
its create request was sent.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.stats import cpu_seconds
from kubernetes import client as k8s
from kubernetes import watch

THREADS = 16
"""Client threads creating a burst's claims."""

Predicate = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Resource:
    """A namespaced custom resource: its API group, version and plural."""

    group: str
    version: str
    plural: str


class FirstSeen:
    """Per state in `states` (a name and a test of the object), per object name: the monotonic
    time a watch on `namespace`'s `resource` first saw the object in that state."""

    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        resource: Resource,
        states: Mapping[str, Predicate],
    ) -> None:
        self.seen: dict[str, dict[str, float]] = {state: {} for state in states}
        self._states = dict(states)
        self._resource = resource
        self._cond = threading.Condition()
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(api, namespace), daemon=True)
        self._thread.start()

    def _run(self, api: k8s.ApiClient, namespace: str) -> None:
        # A watch the API server ends or breaks (a loaded server does) is opened again; a new
        # watch starts with every object as it is, so no state is missed.
        while not self._stopped.is_set():
            try:
                self._follow(api, namespace)
            except Exception as e:  # any broken stream: watch again
                if self._stopped.is_set():
                    return  # `stop` broke it
                print(f"{type(self).__name__}: watch ended ({e!r}); watching again", flush=True)
                self._watch = watch.Watch()

    def _follow(self, api: k8s.ApiClient, namespace: str) -> None:
        custom = k8s.CustomObjectsApi(api)
        r = self._resource
        for event in self._watch.stream(
            custom.list_namespaced_custom_object,
            r.group,
            r.version,
            namespace,
            r.plural,
            timeout_seconds=600,
        ):
            obj = event["object"]
            reached = [state for state, test in self._states.items() if test(obj)]
            if reached:
                with self._cond:
                    now = time.monotonic()
                    for state in reached:
                        self.seen[state].setdefault(obj["metadata"]["name"], now)
                    self._cond.notify_all()

    def wait(self, names: list[str], timeout: float, state: str) -> None:
        """Until every one of `names` was seen in `state`; AssertionError after `timeout` s."""
        seen = self.seen[state]
        deadline = time.monotonic() + timeout
        with self._cond:
            while not all(n in seen for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [n for n in names if n not in seen]
                    raise AssertionError(f"{len(missing)} claims never {state}: {missing[:5]}")
                self._cond.wait(left)

    def since(self, sent_at: Mapping[str, float], state: str) -> list[float]:
        """Seconds from each claim's create to its first sight in `state`."""
        return [self.seen[state][name] - sent for name, sent in sent_at.items()]

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()


Create = Callable[[str], float]
"""Creates the claim of that name; returns the monotonic moment its create was sent."""


def one_at_a_time(
    create: Create, watcher: FirstSeen, names: list[str], state: str, timeout: float = 60
) -> dict[str, float]:
    """Each claim created once the previous one was seen in `state`; when each create was
    sent (`watcher.since` gives the latencies)."""
    sent_at = {}
    for name in names:
        sent_at[name] = create(name)
        watcher.wait([name], timeout, state)
    return sent_at


def prometheus_sums(
    text: str, metric: str, key: Callable[[dict[str, str]], str]
) -> dict[str, float]:
    """Sum of `metric`'s samples in Prometheus text, by `key(labels)`."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        labels_text, value = line[len(metric) + 1 :].rsplit("} ", 1)
        labels = dict(
            part.split("=", 1) for part in labels_text.replace('"', "").split(",") if "=" in part
        )
        sums[key(labels)] = sums.get(key(labels), 0.0) + float(value)
    return sums


def means_between(
    before: str, after: str, metric: str, key: Callable[[dict[str, str]], str]
) -> dict[str, tuple[float, float]]:
    """For a Prometheus histogram or summary `metric`, scraped twice: per `key(labels)`, the
    mean milliseconds of the observations made between the scrapes, and how many there were
    (keys with none are left out)."""

    def delta(suffix: str) -> dict[str, float]:
        then = prometheus_sums(before, metric + suffix, key)
        now = prometheus_sums(after, metric + suffix, key)
        return {k: v - then.get(k, 0.0) for k, v in now.items()}

    seconds, counts = delta("_sum"), delta("_count")
    return {k: (1000 * seconds[k] / n, n) for k, n in counts.items() if n > 0}


def apiserver_metrics(api: k8s.ApiClient) -> str:
    """The API server's /metrics, as Prometheus text."""
    response = api.rest_client.request("GET", f"{api.configuration.host}/metrics")
    return str(response.read().decode())


def request_kind(labels: dict[str, str]) -> str:
    """An API server request's kind, "VERB resource[/sub]"."""
    sub = labels.get("subresource")
    return f'{labels.get("verb")} {labels.get("resource")}' + (f"/{sub}" if sub else "")


def apiserver_requests(api: k8s.ApiClient) -> dict[str, float]:
    """apiserver_request_total from the API server's /metrics, keyed "VERB resource[/sub]"."""
    return prometheus_sums(apiserver_metrics(api), "apiserver_request_total", request_kind)


def apiserver_request_means(before: str, after: str, kinds: list[str]) -> dict[str, float]:
    """Mean milliseconds the API server spent on each request of `kinds` between two scrapes
    of its /metrics (its own apiserver_request_duration_seconds, so the client's and the
    network's share is not in it)."""
    means = means_between(before, after, "apiserver_request_duration_seconds", request_kind)
    return {f"{k} mean_ms": round(means[k][0], 1) for k in kinds if k in means}


def per_claim(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    """API requests per claim (of `n`) between two counts, by kind, and their total (the
    benchmark's own scrapes of /metrics left out)."""
    out = {
        key: (count - before.get(key, 0)) / n
        for key, count in sorted(after.items())
        if count > before.get(key, 0) and key != "GET metrics"
    }
    return {**out, "total": sum(out.values())}


def mean_of(dicts: list[dict[str, float]], ndigits: int) -> dict[str, float]:
    """Key by key, the mean of `dicts` (a missing key counts as 0), rounded."""
    keys = sorted({k for d in dicts for k in d})
    return {k: round(statistics.fmean(d.get(k, 0.0) for d in dicts), ndigits) for k in keys}


class Meter:
    """From its making on: CPU seconds of each process of `pids`, and the API server's
    requests per claim of `n`."""

    def __init__(self, api: k8s.ApiClient, pids: Mapping[str, int], n: int) -> None:
        self._api, self._pids, self._n = api, dict(pids), n
        self._cpu = {name: cpu_seconds(pid) for name, pid in self._pids.items()}
        self._requests = apiserver_requests(api)

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) - self._cpu[name] for name, pid in self._pids.items()}

    def requests(self) -> dict[str, float]:
        return per_claim(self._requests, apiserver_requests(self._api), self._n)


@dataclass
class Burst:
    """A burst's claims, when each create was sent, and what it cost until all were seen."""

    sent_at: dict[str, float]
    latencies: list[float]
    claims_per_second: float
    create_requests_s: float
    """How long the 16 threads took to send every create."""
    cpu_seconds: dict[str, float]
    requests: dict[str, float]
    meter: Meter
    """Still counting, for figures taken later."""


def at_once(
    api: k8s.ApiClient,
    create: Create,
    watcher: FirstSeen,
    names: list[str],
    state: str,
    pids: Mapping[str, int],
    timeout: float = 120,
) -> Burst:
    """`names` created at once from `THREADS` client threads, until every one was seen in
    `state`: their latencies, claims per second from the first create to the last sight, and
    the CPU and API requests spent meanwhile."""
    meter = Meter(api, pids, len(names))
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=THREADS) as pool_exec:
        sent_at = dict(zip(names, pool_exec.map(create, names), strict=True))
    created_in = time.monotonic() - started
    watcher.wait(names, timeout, state)
    elapsed = max(watcher.seen[state][n] for n in names) - started
    cpu = meter.cpu()
    return Burst(
        sent_at=sent_at,
        latencies=watcher.since(sent_at, state),
        claims_per_second=len(names) / elapsed,
        create_requests_s=created_in,
        cpu_seconds=cpu,
        requests=meter.requests(),
        meter=meter,
    )
