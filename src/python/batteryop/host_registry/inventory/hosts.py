"""hosts: the Host calls to battery that more than one step makes, and what they record.

`learn_battery` reads battery's Host list (`ListHosts`) into the state; `put` and `remove`
add, update and remove one Host, recording the answer in `applied` and, IN-107, in `written`;
a refused RemoveHost is reported once per reason (IN-104); `lose_host_api` is the switch to
config and restart when battery turns out to answer `UNIMPLEMENTED` (IN-102, BA-108).
"""

from __future__ import annotations

import logging
from typing import Final

from batteryop.battery import configfile
from batteryop.battery.errors import (
    AlreadyExistsError,
    BatteryNotFoundError,
    PreconditionFailedError,
)
from batteryop.battery.models import HostTLS
from batteryop.host_registry.inventory.scope import RegistryScope
from batteryop.kube.events import WARNING

log = logging.getLogger("batteryop.host_registry.controller")

RETRY_SECONDS: Final = 5.0
"""How soon what battery refused or did not answer is tried again: a refused RemoveHost
(IN-104), a Host battery lost that it refused to add again, a Host list it did not answer
(IN-105), a settled change blocked meanwhile."""
REMOVE_REFUSED_EVENT_REASON: Final = "RemoveHostRefused"
"""The reason of the Warning Event on a leaving Host's Node when battery refuses RemoveHost."""


async def battery_hosts(scope: RegistryScope) -> dict[str, tuple[str, bool]]:
    """battery's Hosts: name -> (address, cordoned), the placeholder left out."""
    return {
        s.host.name: (s.host.address, s.host.cordoned)
        for s in await scope.deps.battery.list_hosts()
        if s.host.name != configfile.NO_HOSTS_NAME
    }


async def learn_battery(scope: RegistryScope) -> None:
    """What battery has becomes `applied` and `cordoned`."""
    hosts = await battery_hosts(scope)
    scope.state.applied = {n: a for n, (a, _) in hosts.items()}
    scope.state.cordoned = {n for n, (_, c) in hosts.items() if c}
    scope.deps.metrics.hosts.set(len(scope.state.applied))


def lose_host_api(scope: RegistryScope) -> None:
    # IN-102, BA-108: no host RPCs after all; config and restart from now on.
    log.info("battery answers UNIMPLEMENTED for host RPCs; restarting it instead")
    scope.state.host_api = False
    scope.deps.metrics.host_api.set(0)


def host_tls(scope: RegistryScope) -> HostTLS:
    """The TLS files battery dials every Host with (in its mount of the TLS Secret)."""
    files = configfile.host_tls(str(scope.deps.config.battery_tls_dir))
    return HostTLS(
        ca_file=files["ca_file"], cert_file=files["cert_file"], key_file=files["key_file"]
    )


async def put(scope: RegistryScope, name: str, address: str) -> str:
    """Make battery hold `name` at `address`: UpdateHost when it has it, else AddHost
    (UpdateHost if it turns out to have it after all). Recorded in `applied` and, IN-107,
    in `written`. The RPC used."""
    state, battery = scope.state, scope.deps.battery
    if name in state.applied:
        await battery.update_host(name, address, tls=host_tls(scope))
        rpc = "UpdateHost"
    else:
        try:
            await battery.add_host(name, address, tls=host_tls(scope))
            rpc = "AddHost"
        except AlreadyExistsError:
            await battery.update_host(name, address, tls=host_tls(scope))
            rpc = "UpdateHost"
    scope.deps.metrics.host_calls.labels(rpc, "ok").inc()
    state.applied[name] = address
    state.written[name] = address
    state.cordoned.discard(name)
    state.settler.applied({name})
    return rpc


async def remove(scope: RegistryScope, name: str, *, drained: bool) -> bool:
    """RemoveHost; true once battery no longer has `name` (recorded in `applied` and,
    IN-107, `written`). A refusal is reported (IN-104) and answers false."""
    state = scope.state
    try:
        await scope.deps.battery.remove_host(name)
    except BatteryNotFoundError:
        pass
    except PreconditionFailedError as e:
        scope.deps.metrics.host_calls.labels("RemoveHost", "refused").inc()
        report_refusal(scope, name, drained, str(e))
        return False
    scope.deps.metrics.host_calls.labels("RemoveHost", "ok").inc()
    state.applied.pop(name, None)
    state.written.pop(name, None)
    state.cordoned.discard(name)
    state.settler.applied({name})
    return True


def report_refusal(scope: RegistryScope, name: str, drained: bool, reason: str) -> None:
    """IN-104: a refused RemoveHost is logged and an Event on the Node once per reason;
    the removal is retried every RETRY_SECONDS (`schedule`)."""
    refusals = scope.state.refusals
    if refusals.get(name) == reason:
        log.debug("battery still refuses to remove Host %s: %s", name, reason)
        return
    refusals[name] = reason
    log.warning(
        "battery refused to remove Host %s (drained: %s): %s; retrying every %.0fs",
        name,
        drained,
        reason,
        RETRY_SECONDS,
        extra={"host": name},
    )
    node = scope.state.nodes.get(name)
    if node is not None:
        scope.deps.events.post(
            node,
            WARNING,
            REMOVE_REFUSED_EVENT_REASON,
            f"battery refused to remove Host {name}, retrying: {reason}",
            action="RemoveHost",
        )
