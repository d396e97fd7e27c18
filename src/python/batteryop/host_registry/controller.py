"""The host registry's controller: Nodes in, battery's Hosts and the published Host set out.

Inputs, followed by list and watch (`batteryop.kube.informer.list_watch`), never polled: the
Nodes, and the battery config ConfigMap (by name). Changes in this container's mounts of
battery's config and TLS files wake it through inotify (`filewatch`). Every input adds the one
key of a one-worker `WorkQueue`, so one reconcile runs at a time over the whole inventory:

1. Resume (once): read what battery has (`ListHosts`) and what the ConfigMap holds; finish a
   restart left pending (`restart-pending`); learn whether battery answers the host RPCs.
2. Admit every Node (`admission.admit_all`); a report with an invalid address, an address not
   among its Node's InternalIPs or one another Host's report names too gets a Warning Event on
   its Node (the refusal as its reason), once per address, and never reaches battery (IN-103,
   IN-108, IN-109).
3. Check battery's own Host list (IN-105), when due: at start, each time the connection to
   battery is made again (`_follow_connection`: battery restarted, or the channel dropped), and
   every `--host-resync-interval`. With the host RPCs, `written` is the record of the Hosts the
   registry put into battery (it follows every AddHost, UpdateHost and RemoveHost that
   succeeded, IN-107): a Host in it that battery lacks, whose Node is still a Host at that
   address, is added again at once; a Host battery holds that the registry removed, whose Node
   is not a Host, is removed again at once. Each repair is counted
   (`drift_repairs_total{action}`) and logged with the Host's name.
4. Cordon and uncordon Hosts battery has as their Nodes are cordoned (`HostAdmin.CordonHost`,
   `UncordonHost`), at once and without a restart (IN-100).
5. Settle (IN-011). Then either
   - battery answers `AddHost`/`RemoveHost` (battery after v0.4.0): apply each settled change
     with them, never restarting (IN-101); a renewed client certificate re-dials every Host
     with `UpdateHost` (ours); or
   - it answers `UNIMPLEMENTED` (v0.4.0, BA-108): IN-102, at the close of the restart window (IN-012)
     write every settled change to battery's config (IN-010, DP-004) and restart battery once
     (DP-006), together with a renewed client certificate (DP-007, DP-008).
   A Host leaving battery is drained first (IN-013): the Host set is published without it, and
   battery is changed only once no battery Pool names it or the drain timeout has passed. The
   drain timeout runs once per leave: a `RemoveHost` battery refuses (MicroVMs still on the
   Host) is retried every `RETRY_SECONDS` without waiting again, reported once per reason as a
   Warning Event on the Node and a log line, and the Host stays out of the Host set meanwhile
   (IN-104).
6. Write battery's config (the ConfigMap) again if it is not `written`: something reverted it
   (IN-014), or a host RPC changed the record (IN-107); no restart.
7. Publish the Host set (`names.HOSTS_ANNOTATION`): the Hosts battery has, as last read and
   changed since, whose Nodes are not cordoned and that are not on their way out, as
   `[{"name": ..., "address": ...}]` (IN-106). A joining Host is published only once battery
   has it; a Host battery lost stays published only if adding it again succeeded first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Set
from datetime import timedelta
from typing import Any, Final

from batteryop.api import names
from batteryop.battery import configfile
from batteryop.battery.errors import (
    AlreadyExistsError,
    BatteryError,
    BatteryUnavailableError,
    NotFoundError,
    PreconditionFailedError,
    UnimplementedError,
)
from batteryop.battery.models import HostTLS, PoolRef
from batteryop.battery.protocol import BatteryAPI
from batteryop.host_registry.admission import ADDRESS_REFUSALS, Admission, admit_all
from batteryop.host_registry.config import RegistryConfig
from batteryop.host_registry.filewatch import DirectoryWatch
from batteryop.host_registry.metrics import RegistryMetrics
from batteryop.host_registry.plan import Settler, Window
from batteryop.host_registry.restarter import Restarter
from batteryop.kube.client import KubeClient, Object, Objects
from batteryop.kube.events import WARNING, EventRecorder
from batteryop.kube.informer import list_watch
from batteryop.kube.resources import CONFIGMAPS, NODES
from batteryop.kube.workqueue import WorkQueue
from batteryop.obs.supervisor import Supervisor

log = logging.getLogger(__name__)

KEY: Final = "inventory"
DRAIN_CHECK_SECONDS: Final = 0.25
"""How often a drain asks battery which Pools still name a leaving Host: battery has no
watch of Pool specs, so this one wait polls battery, bounded by the drain timeout."""
RETRY_SECONDS: Final = 5.0
CORDON_REASON: Final = "Node cordoned"
REMOVE_REFUSED_EVENT_REASON: Final = "RemoveHostRefused"
"""The reason of the Warning Event on a leaving Host's Node when battery refuses RemoveHost."""
TASKS: Final = ("watch-nodes", "watch-battery-config", "follow-battery-connection")
"""The long-lived tasks, by the name the `Supervisor` and `/readyz` give them (DP-107); the
reconcile runs in the work queue, which retries it with backoff itself."""
CONNECTION_POOL: Final = PoolRef(namespace="batteryop-host-registry", name="_connection")
"""The Pool of the Events subscription that tells when battery's connection is made again: no
Kubernetes Pool has this name (`_` is not allowed), and battery streams nothing, and answers no
error, for a Pool it does not have (battery-api.md §3.3), so the stream carries only its state."""


class BatteryNotReadyError(RuntimeError):
    """battery does not answer yet; the reconcile is retried."""


def certificate_digest(path: Any) -> str | None:
    """Hex SHA-256 of the client certificate file, None while it does not exist."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None


def published_entries(configmap: Mapping[str, Any] | None) -> dict[str, str]:
    """The Hosts (name -> address) of the published annotation; names without one are left
    out (an address is needed to write them back)."""
    annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
    try:
        items = json.loads(annotations.get(names.HOSTS_ANNOTATION) or "[]")
    except json.JSONDecodeError:
        return {}
    out: dict[str, str] = {}
    for item in items if isinstance(items, list) else []:
        if (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("address"), str)
            and item["address"]
        ):
            out[item["name"]] = item["address"]
    return out


def publication(hosts: Mapping[str, str]) -> str:
    """The Host set annotation's value: sorted, so the same set gives the same bytes."""
    return json.dumps([{"name": n, "address": hosts[n]} for n in sorted(hosts)])


class Registry:
    """One host registry: run `run(stop)`; `ready` once it has resumed."""

    def __init__(
        self,
        config: RegistryConfig,
        kube: KubeClient,
        battery: BatteryAPI,
        *,
        events: EventRecorder,
        metrics: RegistryMetrics,
        restarter: Restarter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._kube = kube
        self._battery = battery
        self._events = events
        self._metrics = metrics
        self._clock = clock
        self.restarter = restarter or Restarter(
            process_name=config.battery_process_name,
            config_file=str(config.battery_config_file),
            timeout=config.restart_timeout,
        )
        self.nodes: dict[str, Object] = {}
        self.configmap: Object | None = None
        self._nodes_listed = False
        self._configmap_listed = False
        self.settler = Settler(config.settle_time)
        self.window = Window(config.restart_window)
        self.applied: dict[str, str] = {}
        """Hosts battery has: name -> address."""
        self.cordoned: set[str] = set()
        """Hosts cordoned in battery."""
        self.written: dict[str, str] = {}
        """Hosts in the config text the registry last wrote (or found). With the host RPCs, the
        Hosts the registry put into battery: it follows every AddHost, UpdateHost and RemoveHost
        that succeeded (IN-107), and battery's Host list is checked against it (IN-105)."""
        self.next_check_at: float | None = None
        """IN-105: when battery's Host list is read again (monotonic); set at resume."""
        self._check_trigger = "start"
        """What made the next check due: start, reconnect, periodic or retry (a metric label)."""
        self.host_api: bool | None = None
        self.recorded_digest: str | None = None
        self._reported_invalid: dict[str, str] = {}
        self.resumed = False
        self.queue: WorkQueue[str] = WorkQueue(
            self._reconcile, name="host-registry", workers=1, backoff_max=10.0
        )
        self._watch = DirectoryWatch(
            [config.battery_config_file.parent, config.battery_tls_dir],
            on_change=lambda: self.queue.add(KEY),
        )
        self.drain_deadlines: dict[str, float] = {}
        """IN-013: leaving Hosts -> when their drain times out (set when the drain starts)."""
        self._refusals: dict[str, str] = {}
        """Leaving Hosts -> battery's last reason for refusing RemoveHost, reported once."""
        self.published_at: dict[str, float] = {}
        """When each Host was first published (monotonic), for the benchmark and logs."""
        self.supervisor = Supervisor()
        """Runs `TASKS` (DP-107): `supervisor.checks()` belong in `/readyz`."""
        for task in TASKS:
            self.supervisor.add(task)

    @property
    def ready(self) -> bool:
        return self.resumed

    # -- inputs ---------------------------------------------------------------------------

    def _on_node_list(self, items: Objects) -> None:
        self.nodes = {}
        for node in items:
            self._keep_node(node)
        self._nodes_listed = True
        self.queue.add(KEY)

    def _keep_node(self, node: Object) -> None:
        node.setdefault("apiVersion", NODES.api_version)
        node.setdefault("kind", "Node")  # list items carry neither; Events need both
        self.nodes[str(node["metadata"]["name"])] = node

    def _on_node_event(self, kind: str, node: Object) -> None:
        if kind == "DELETED":
            self.nodes.pop(str(node["metadata"]["name"]), None)
        elif kind in ("ADDED", "MODIFIED"):
            self._keep_node(node)
        self.queue.add(KEY)

    def _on_configmap_list(self, items: Objects) -> None:
        self.configmap = items[0] if items else None
        self._configmap_listed = True
        self.queue.add(KEY)

    def _on_configmap_event(self, kind: str, cm: Object) -> None:
        self.configmap = None if kind == "DELETED" else cm
        self.queue.add(KEY)

    async def run(self, stop: asyncio.Event) -> None:
        self._watch.start()
        await self.queue.start()
        loops = (self._watch_nodes, self._watch_battery_config, self._follow_connection)
        for name, loop in zip(TASKS, loops, strict=True):
            self.supervisor.start(name, loop)
        try:
            await stop.wait()
        finally:
            await self.supervisor.stop()
            await self.queue.stop()
            self._watch.close()
            await self._events.drain(timeout=2.0)

    async def _watch_nodes(self) -> None:
        await list_watch(
            self._kube, NODES, on_list=self._on_node_list, on_event=self._on_node_event
        )

    async def _watch_battery_config(self) -> None:
        """The battery config ConfigMap, by name (RBAC allows nothing wider)."""
        await list_watch(
            self._kube,
            CONFIGMAPS,
            namespace=self.config.namespace,
            field_selector=f"metadata.name={self.config.battery_config_map}",
            on_list=self._on_configmap_list,
            on_event=self._on_configmap_event,
        )

    def request_check(self, trigger: str) -> None:
        """IN-105: read battery's Host list again at the next reconcile, now."""
        self._check_trigger = trigger
        self.next_check_at = self._clock()
        self.queue.add(KEY)

    async def _follow_connection(self) -> None:
        """IN-105: each time the connection to battery is made (again), check its Host list.

        battery does not event Host changes, and a restarted battery may come back with fewer
        Hosts than it had (a lost database, a stale config file). An Events subscription knows
        when its stream is open again after battery went away (`EventStream.generation`); its
        Pool (`CONNECTION_POOL`) has no events, so battery replays nothing to it."""
        stream = self._battery.events(CONNECTION_POOL)
        seen = 0
        try:
            while True:
                await stream.wait_subscribed()
                if stream.generation != seen:
                    seen = stream.generation
                    log.debug("Connected to battery; checking its Hosts", extra={"streams": seen})
                    self.request_check("reconnect")
                await stream.wait_unsubscribed()
        finally:
            await stream.aclose()

    # -- the reconcile --------------------------------------------------------------------

    async def _reconcile(self, _: str) -> float | None:
        if not (self._nodes_listed and self._configmap_listed):
            return None
        if self.configmap is None:
            log.warning(
                "ConfigMap %s/%s is missing; waiting for it",
                self.config.namespace,
                self.config.battery_config_map,
            )
            return None
        if not self.resumed:
            await self._resume()
        now = self._clock()
        admissions = admit_all(self.nodes, held=self.applied)  # IN-108, IN-109
        self._report_invalid(admissions)
        wanted = {n: a.address for n, a in admissions.items() if a.address is not None}
        if self.next_check_at is not None and now >= self.next_check_at:
            await self._check_battery(wanted)
        self.settler.observe(wanted, self.applied, now)
        await self._sync_cordons(admissions)
        settled = self.settler.settled(now)
        digest = certificate_digest(self.config.client_certificate)
        renewed = digest is not None and digest != self.recorded_digest
        if self.host_api:
            if settled:
                await self._apply_with_api(settled, admissions)
            if renewed and self.host_api:
                await self._redial_with_api(digest)
        if not self.host_api and self.window.due(now, work=bool(settled) or renewed):
            # IN-012: everything settled by the window's close goes in this one restart.
            await self._apply_with_restart(self.settler.settled(self._clock()), admissions)
        await self._write_back()  # IN-014, IN-107
        # IN-013, IN-104: a Host whose leave has settled stays out of the Host set while battery still
        # has it (draining, or its removal refused); it comes back only if its Node does.
        leaving = self._leaving()
        self._forget_leaves(keep=leaving)
        await self._publish(admissions, excluding=leaving)
        self._metrics.pending.set(len(self.settler.pending))
        return self._next_wake()

    def _leaving(self) -> set[str]:
        """Hosts battery has whose leave has settled; with the host RPCs also those the
        registry removed that battery holds again, until they are removed again (IN-105)."""
        leaving = {
            n
            for n, a in self.settler.settled(self._clock()).items()
            if a is None and n in self.applied
        }
        if self.host_api:
            leaving |= set(self.applied) - set(self.written)
        return leaving

    def _forget_leaves(self, keep: Set[str]) -> None:
        for name in set(self.drain_deadlines) - set(keep):
            del self.drain_deadlines[name]
        for name in set(self._refusals) - set(keep):
            del self._refusals[name]

    def _next_wake(self) -> float | None:
        now = self._clock()
        times = [t for t in (self.settler.next_settles(now), self.window.closes_at) if t]
        if self.settler.pending and not times:
            times.append(now + RETRY_SECONDS)  # settled but blocked (e.g. a refused removal)
        if self.next_check_at is not None:
            times.append(self.next_check_at)  # IN-105
        return max(0.0, min(times) - now) if times else None

    # -- 1. resume ------------------------------------------------------------------------

    async def _battery_hosts(self) -> dict[str, tuple[str, bool]]:
        """battery's Hosts: name -> (address, cordoned), the placeholder left out."""
        return {
            s.host.name: (s.host.address, s.host.cordoned)
            for s in await self._battery.list_hosts()
            if s.host.name != configfile.NO_HOSTS_NAME
        }

    async def _learn_battery(self) -> None:
        hosts = await self._battery_hosts()
        self.applied = {n: a for n, (a, _) in hosts.items()}
        self.cordoned = {n for n, (_, c) in hosts.items() if c}
        self._metrics.hosts.set(len(self.applied))

    async def _probe_host_api(self) -> bool:
        """IN-101, IN-102: whether battery answers the host RPCs (GetHost of the placeholder's
        name: NOT_FOUND where it does, UNIMPLEMENTED in v0.4.0, BA-108)."""
        try:
            await self._battery.get_host(configfile.NO_HOSTS_NAME)
        except UnimplementedError:
            return False
        except BatteryUnavailableError:
            raise
        except BatteryError:
            pass  # NotFound and the like: the RPC exists
        return True

    async def _resume(self) -> None:
        try:
            await self._learn_battery()
            self.host_api = await self._probe_host_api()
        except BatteryUnavailableError as e:
            raise BatteryNotReadyError(f"battery does not answer yet: {e}") from None
        self._metrics.host_api.set(1 if self.host_api else 0)
        cm = self.configmap or {}
        text = (cm.get("data") or {}).get(configfile_key(self.config), "")
        try:
            self.written = configfile.hosts_of(text) if text else {}
        except configfile.ConfigFileError as e:
            log.warning("battery's config does not parse; it is written again: %s", e)
            self.written = {}
        if not self.written and not self.host_api:
            # IN-014: a reverted file, but the Hosts were recorded; battery's own list first.
            self.written = dict(self.applied) or published_entries(cm)
        if self.host_api:
            # IN-107: what battery holds at start counts as put there by the registry, so a
            # Host whose Node left meanwhile leaves by settling and draining, as any other.
            for name, address in self.applied.items():
                self.written.setdefault(name, address)
        self._check_trigger = "start"
        self.next_check_at = self._clock()
        annotations = (cm.get("metadata") or {}).get("annotations") or {}
        self.recorded_digest = annotations.get(names.CLIENT_CERTIFICATE_SHA256_ANNOTATION)
        if self.recorded_digest is None:
            # Nothing recorded: battery started with whatever the mount held; record that.
            self.recorded_digest = certificate_digest(self.config.client_certificate)
            await self._patch_annotations(
                {names.CLIENT_CERTIFICATE_SHA256_ANNOTATION: self.recorded_digest}
            )
        pending = annotations.get(names.RESTART_PENDING_ANNOTATION) == "true"
        if pending and not self.host_api and self.applied != self.written:
            log.info("Finishing a restart left pending", extra={"hosts": sorted(self.written)})
            await self._write_back()
            await self._restart(self.written)
        elif pending:
            await self._patch_annotations({names.RESTART_PENDING_ANNOTATION: None})
        self.resumed = True
        log.info(
            "Resumed",
            extra={"hosts": sorted(self.applied), "host_api": self.host_api},
        )

    # -- 2. admission events --------------------------------------------------------------

    def _report_invalid(self, admissions: Mapping[str, Admission]) -> None:
        """IN-103, IN-108, IN-109: a refused address is logged and posted as a Warning Event on
        its Node, with the refusal as the reason, once per reason and detail (which names the
        address, and the Node's InternalIPs or the other Node)."""
        for name in list(self._reported_invalid):
            a = admissions.get(name)
            if a is None or a.refusal not in ADDRESS_REFUSALS:
                del self._reported_invalid[name]
        for name, a in admissions.items():
            if a.refusal not in ADDRESS_REFUSALS:
                continue
            raw = (self.nodes[name]["metadata"].get("annotations") or {}).get(
                names.FLINTLOCKD_ADDRESS_ANNOTATION, ""
            )
            seen = f"{a.refusal}:{a.detail}"  # the detail names the address
            if self._reported_invalid.get(name) == seen:
                continue
            self._reported_invalid[name] = seen
            self._metrics.refused.inc()  # ignored, an Event, never in battery's config
            log.warning(
                "Refused Node report (%s): %s",
                a.refusal,
                a.detail,
                extra={"node": name, "address": raw, "reason": str(a.refusal)},
            )
            self._events.post(
                self.nodes[name],
                WARNING,
                str(a.refusal),
                f"Not a Host: the Exec Agent's report names flintlockd at {a.detail}",
                action="AdmitHost",
            )

    # -- 3. battery's own Host list -------------------------------------------------------

    async def _check_battery(self, wanted: Mapping[str, str]) -> None:
        """IN-105: read battery's Host list again; with the host RPCs, repair what drifted from
        `written`. The next check is one `--host-resync-interval` later, or `RETRY_SECONDS`
        when battery did not answer or refused a repair."""
        trigger = self._check_trigger
        try:
            await self._learn_battery()
        except BatteryUnavailableError as e:
            log.info("battery does not answer; its Hosts are checked again later: %s", e)
            self.next_check_at = self._clock() + RETRY_SECONDS
            return
        self._metrics.host_checks.labels(trigger).inc()
        retry = await self._repair(wanted) if self.host_api else False
        self._metrics.hosts.set(len(self.applied))
        self._check_trigger = "retry" if retry else "periodic"
        wait = RETRY_SECONDS if retry else self.config.host_resync_interval
        self.next_check_at = self._clock() + wait

    async def _repair(self, wanted: Mapping[str, str]) -> bool:
        """IN-105: add again the Hosts battery lost, remove again the Hosts it holds that the
        registry removed. True when a repair failed and is to be tried again soon."""
        retry = False
        for name in sorted(set(self.written) - set(self.applied)):
            address = self.written[name]
            if wanted.get(name) != address:
                # Not a Host at that address any more: battery lost what was leaving anyway, or
                # a new address settles first (IN-011).
                del self.written[name]
                continue
            log.warning(
                "battery lost Host %s; adding it again",
                name,
                extra={"host": name, "address": address},
            )
            try:
                await self._put(name, address)
            except UnimplementedError:
                self._lose_host_api()
                return False
            except BatteryUnavailableError:
                raise
            except BatteryError as e:
                self._metrics.host_calls.labels("AddHost", "error").inc()
                log.warning(
                    "battery refused to add Host %s again: %s; trying again in %.0fs",
                    name,
                    e,
                    RETRY_SECONDS,
                    extra={"host": name},
                )
                retry = True
                continue
            self._metrics.drift_repairs.labels("add").inc()
            log.info("Added Host to battery again", extra={"host": name, "address": address})
        for name in sorted(set(self.applied) - set(self.written)):
            if name in wanted:
                self.written[name] = self.applied[name]  # put there by someone: adopted
                continue
            log.warning(
                "battery holds Host %s, which the registry removed; removing it again",
                name,
                extra={"host": name},
            )
            try:
                removed = await self._remove(name, drained=False)
            except UnimplementedError:
                self._lose_host_api()
                return False
            if not removed:
                retry = True
                continue
            self._metrics.drift_repairs.labels("remove").inc()
            log.info("Removed Host from battery again", extra={"host": name})
        return retry

    # -- 4. cordons -----------------------------------------------------------------------

    async def _sync_cordons(self, admissions: Mapping[str, Admission]) -> None:
        for name in sorted(self.applied):
            a = admissions.get(name)
            if a is None or not a.is_host:
                continue  # leaving: settle decides, not the cordon
            try:
                if a.cordoned and name not in self.cordoned:
                    # IN-100: cordoned in battery, no restart.
                    await self._battery.cordon_host(name, reason=CORDON_REASON)
                    self.cordoned.add(name)
                    self._metrics.host_calls.labels("CordonHost", "ok").inc()
                    log.info("Cordoned Host in battery", extra={"host": name})
                elif not a.cordoned and name in self.cordoned:
                    await self._battery.uncordon_host(name)
                    self.cordoned.discard(name)
                    self._metrics.host_calls.labels("UncordonHost", "ok").inc()
                    log.info("Uncordoned Host in battery", extra={"host": name})
            except PreconditionFailedError as e:
                log.warning("battery does not know Host %s: %s", name, e)

    # -- 6. write back --------------------------------------------------------------------

    def _config_text(self, hosts: Mapping[str, str]) -> str:
        return configfile.render_text(
            hosts,
            api_address=self.config.battery_address,
            metrics_address=self.config.battery_metrics_address,
            tls_dir=str(self.config.battery_tls_dir),
        )

    async def _write_back(self) -> None:
        """IN-014: the ConfigMap holds what the registry wrote, or it is written again."""
        want = self._config_text(self.written)
        data = (self.configmap or {}).get("data") or {}
        if data.get(configfile_key(self.config)) == want:
            return
        log.info("Wrote back battery's config", extra={"hosts": sorted(self.written)})
        self.configmap = await self._kube.patch(
            CONFIGMAPS,
            self.config.battery_config_map,
            {"data": {configfile_key(self.config): want}},
            self.config.namespace,
        )

    async def _patch_annotations(self, annotations: Mapping[str, str | None]) -> None:
        self.configmap = await self._kube.patch(
            CONFIGMAPS,
            self.config.battery_config_map,
            {"metadata": {"annotations": dict(annotations)}},
            self.config.namespace,
        )

    # -- 5. apply -------------------------------------------------------------------------

    async def _drain(self, leaving: set[str], admissions: Mapping[str, Admission]) -> bool:
        """IN-013: publish the Hosts that stay, then wait until no battery Pool names a
        leaving Host, or the drain timeout. True when drained.

        The timeout runs from the first drain of each Host: a retried removal waits no more."""
        await self._publish(admissions, excluding=leaving)
        now = self._clock()
        deadline = max(
            self.drain_deadlines.setdefault(n, now + self.config.drain_timeout) for n in leaving
        )
        while True:
            pools = await self._battery.list_pools()
            named = {h for p in pools for h in p.spec.flintlock_hosts} & leaving
            if not named:
                return True
            if self._clock() >= deadline:
                log.warning(
                    "Drain timed out; Pools still name leaving Hosts",
                    extra={"hosts": sorted(named)},
                )
                return False
            await asyncio.sleep(DRAIN_CHECK_SECONDS)

    def _tls(self) -> HostTLS:
        files = configfile.host_tls(str(self.config.battery_tls_dir))
        return HostTLS(
            ca_file=files["ca_file"], cert_file=files["cert_file"], key_file=files["key_file"]
        )

    async def _apply_with_api(
        self, settled: Mapping[str, str | None], admissions: Mapping[str, Admission]
    ) -> None:
        """AddHost / UpdateHost / RemoveHost, never a restart (IN-101)."""
        leaving = {n for n, a in settled.items() if a is None and n in self.applied}
        try:
            for name, address in sorted(settled.items()):
                if address is None:
                    continue
                rpc = await self._put(name, address)
                log.info(
                    "Added Host to battery" if rpc == "AddHost" else "Updated Host in battery",
                    extra={"host": name, "address": address},
                )
            if leaving:
                drained = await self._drain(leaving, admissions)
                for name in sorted(leaving):
                    if await self._remove(name, drained=drained):
                        log.info("Removed Host from battery", extra={"host": name})
        except UnimplementedError:
            self._lose_host_api()
        self._metrics.hosts.set(len(self.applied))

    def _lose_host_api(self) -> None:
        # IN-102, BA-108: no host RPCs after all; config and restart from now on.
        log.info("battery answers UNIMPLEMENTED for host RPCs; restarting it instead")
        self.host_api = False
        self._metrics.host_api.set(0)

    async def _put(self, name: str, address: str) -> str:
        """Make battery hold `name` at `address`: UpdateHost when it has it, else AddHost
        (UpdateHost if it turns out to have it after all). Recorded in `applied` and, IN-107,
        in `written`. The RPC used."""
        if name in self.applied:
            await self._battery.update_host(name, address, tls=self._tls())
            rpc = "UpdateHost"
        else:
            try:
                await self._battery.add_host(name, address, tls=self._tls())
                rpc = "AddHost"
            except AlreadyExistsError:
                await self._battery.update_host(name, address, tls=self._tls())
                rpc = "UpdateHost"
        self._metrics.host_calls.labels(rpc, "ok").inc()
        self.applied[name] = address
        self.written[name] = address
        self.cordoned.discard(name)
        self.settler.applied({name})
        return rpc

    async def _remove(self, name: str, *, drained: bool) -> bool:
        """RemoveHost; true once battery no longer has `name` (recorded in `applied` and,
        IN-107, `written`). A refusal is reported (IN-104) and answers false."""
        try:
            await self._battery.remove_host(name)
        except NotFoundError:
            pass
        except PreconditionFailedError as e:
            self._metrics.host_calls.labels("RemoveHost", "refused").inc()
            self._report_refusal(name, drained, str(e))
            return False
        self._metrics.host_calls.labels("RemoveHost", "ok").inc()
        self.applied.pop(name, None)
        self.written.pop(name, None)
        self.cordoned.discard(name)
        self.settler.applied({name})
        return True

    def _report_refusal(self, name: str, drained: bool, reason: str) -> None:
        """IN-104: a refused RemoveHost is logged and an Event on the Node once per reason;
        the removal is retried every RETRY_SECONDS (`_next_wake`)."""
        if self._refusals.get(name) == reason:
            log.debug("battery still refuses to remove Host %s: %s", name, reason)
            return
        self._refusals[name] = reason
        log.warning(
            "battery refused to remove Host %s (drained: %s): %s; retrying every %.0fs",
            name,
            drained,
            reason,
            RETRY_SECONDS,
            extra={"host": name},
        )
        node = self.nodes.get(name)
        if node is not None:
            self._events.post(
                node,
                WARNING,
                REMOVE_REFUSED_EVENT_REASON,
                f"battery refused to remove Host {name}, retrying: {reason}",
                action="RemoveHost",
            )

    async def _redial_with_api(self, digest: str | None) -> None:
        """A renewed client certificate: `UpdateHost` makes battery read the files again."""
        for name in sorted(self.applied):
            try:
                await self._battery.update_host(name, self.applied[name], tls=self._tls())
            except UnimplementedError:
                self.host_api = False
                return
        self.recorded_digest = digest
        await self._patch_annotations({names.CLIENT_CERTIFICATE_SHA256_ANNOTATION: digest})

    async def _apply_with_restart(
        self, settled: Mapping[str, str | None], admissions: Mapping[str, Admission]
    ) -> None:
        """IN-010, IN-013, DP-006..008: one config write and one restart for the window."""
        new = dict(self.applied)
        for name, address in settled.items():
            if address is None:
                new.pop(name, None)
            else:
                new[name] = address
        leaving = set(self.applied) - set(new)
        if leaving:
            await self._drain(leaving, admissions)
        self.written = new
        await self._write_back()
        await self._restart(new)
        self.settler.applied(set(settled))

    async def _restart(self, hosts: Mapping[str, str]) -> None:
        text = self._config_text(hosts)
        await self._patch_annotations({names.RESTART_PENDING_ANNOTATION: "true"})
        await self._mount_shows(text)  # DP-006 (1)
        digest = certificate_digest(self.config.client_certificate)  # DP-007: what we see
        expected = set(hosts)

        async def answered(within: float) -> None:
            await self._wait_battery_has(expected, within)

        took = await self.restarter.restart(answered)
        self._metrics.restarts.inc()
        self._metrics.restart_seconds.observe(took)
        await self._learn_battery()
        self.recorded_digest = digest
        await self._patch_annotations(
            {
                names.RESTART_PENDING_ANNOTATION: None,
                names.CLIENT_CERTIFICATE_SHA256_ANNOTATION: digest,
            }
        )
        log.info(
            "Restarted battery",
            extra={"hosts": sorted(hosts), "seconds": round(took, 3)},
        )

    async def _mount_shows(self, text: str) -> None:
        """Wait until this container's mount of the ConfigMap shows `text` (inotify)."""
        path = self.config.battery_config_file
        deadline = self._clock() + self.config.restart_timeout
        while True:
            generation = self._watch.generation
            try:
                if path.read_text(encoding="utf-8") == text:
                    return
            except OSError:
                pass
            remaining = deadline - self._clock()
            if remaining <= 0 or not await self._watch.changed_after(generation, remaining):
                raise TimeoutError(f"{path} did not show the new config in time")

    async def _wait_battery_has(self, expected: set[str], within: float) -> None:
        deadline = self._clock() + within
        while True:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise TimeoutError
            try:
                have = await self._battery_hosts()
                if set(have) == expected:
                    return
                await asyncio.sleep(min(0.1, remaining))  # the old process's last answers
            except BatteryUnavailableError:
                await self._wait_connected(remaining)

    async def _wait_connected(self, within: float) -> None:
        wait = getattr(self._battery, "wait_connected", None)
        if wait is None:
            await asyncio.sleep(min(0.1, within))
            return
        try:
            await wait(timedelta(seconds=max(0.01, within)))
        except BatteryUnavailableError:
            pass

    # -- 7. publish -----------------------------------------------------------------------

    async def _publish(
        self, admissions: Mapping[str, Admission], excluding: Set[str] = frozenset()
    ) -> None:
        hosts = {
            n: a
            for n, a in self.applied.items()
            if n not in excluding and not (n in admissions and admissions[n].cordoned)
        }
        value = publication(hosts)
        annotations = ((self.configmap or {}).get("metadata") or {}).get("annotations") or {}
        self._metrics.published.set(len(hosts))
        if annotations.get(names.HOSTS_ANNOTATION) == value:
            return
        now = self._clock()
        for name in hosts:
            self.published_at.setdefault(name, now)
        for name in set(self.published_at) - set(hosts):
            del self.published_at[name]
        await self._patch_annotations({names.HOSTS_ANNOTATION: value})
        log.info("Published Host set", extra={"hosts": sorted(hosts)})


def configfile_key(config: RegistryConfig) -> str:
    """The ConfigMap key of battery's config: the file's name in the mount."""
    return config.battery_config_file.name
