"""admit: which Nodes are Hosts, at which address (`admission.admit_all`; IN-001..IN-004).

A report with an invalid address, an address not among its Node's InternalIPs or one another
Host's report names too is refused: logged, counted, and posted as a Warning Event on its
Node with the refusal as the reason, once per reason and detail (which names the address,
and the Node's InternalIPs or the other Node); it never reaches battery (IN-103, IN-108,
IN-109). A Host battery holds keeps its address against a newcomer (`held`).
"""

from __future__ import annotations

import logging

from batteryop.api import names
from batteryop.host_registry.admission import ADDRESS_REFUSALS, admit_all
from batteryop.host_registry.inventory.scope import RegistryScope
from batteryop.kube.events import WARNING

log = logging.getLogger("batteryop.host_registry.controller")


async def admit(scope: RegistryScope) -> None:
    """Admit every Node; report each refused address once."""
    state = scope.state
    scope.admissions = admit_all(state.nodes, held=state.applied)  # IN-108, IN-109
    _report_invalid(scope)
    scope.wanted = {n: a.address for n, a in scope.admissions.items() if a.address is not None}


def _report_invalid(scope: RegistryScope) -> None:
    state, admissions = scope.state, scope.admissions
    reported = state.reported_invalid
    for name in list(reported):
        a = admissions.get(name)
        if a is None or a.refusal not in ADDRESS_REFUSALS:
            del reported[name]
    for name, a in admissions.items():
        if a.refusal not in ADDRESS_REFUSALS:
            continue
        raw = (state.nodes[name]["metadata"].get("annotations") or {}).get(
            names.FLINTLOCKD_ADDRESS_ANNOTATION, ""
        )
        seen = f"{a.refusal}:{a.detail}"  # the detail names the address
        if reported.get(name) == seen:
            continue
        reported[name] = seen
        scope.deps.metrics.refused.inc()  # ignored, an Event, never in battery's config
        log.warning(
            "Refused Node report (%s): %s",
            a.refusal,
            a.detail,
            extra={"node": name, "address": raw, "reason": str(a.refusal)},
        )
        scope.deps.events.post(
            state.nodes[name],
            WARNING,
            str(a.refusal),
            f"Not a Host: the Exec Agent's report names flintlockd at {a.detail}",
            action="AdmitHost",
        )
