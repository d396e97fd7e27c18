"""host ready: the Exec Agent's report on the claim's Host, mirrored as HostReady
(CL-050, CL-051, CL-052, CL-053, CL-105).

For a Bound claim, not being deleted, from the Node named by `status.host.nodeName` (cache,
`deps.node`) and its report annotations (`names.EXEC_AGENT_READY_ANNOTATION`, `..._REASON_...`,
`..._MESSAGE_...`):

- CL-050: the report says ready -> HostReady=True with the report's reason and message.
- CL-051: the report says not ready -> HostReady=False with the report's reason and message;
  the claim stays Bound (the client library is what tells the Holder).
- CL-052: no such Node -> HostReady=False `NodeNotFound`; a Node without a report (no ready
  annotation) -> HostReady=False `NoNodeReport`.
- CL-105: the Node's own Ready condition is there and not True (its kubelet reports it not
  ready, or stopped reporting and the node lifecycle controller made it Unknown) ->
  HostReady=False `NodeNotReady`, with the condition's reason and message, whatever the Exec
  Agent's report says: an agent still running on a Host whose kubelet or container runtime
  died cannot vouch for it.
- CL-053: how the report is read. Only the value `"true"` counts as ready (`"True"`, `"yes"`,
  `""` are not). A reason the CRD would refuse (empty, not CamelCase, too long) is replaced by
  `Ready` or `HostNotReady`. The message is cut to the CRD's 32768 characters. HostReady never
  changes the phase.

A Warning Event is posted when the Host goes not ready, a Normal one when it is ready again,
both with the condition's reason. No battery call.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.api.conditions import (
    MAX_MESSAGE_LENGTH,
    ClaimConditionType,
    ClaimReason,
    ConditionStatus,
    EventType,
    NodeReadiness,
    is_valid_reason,
    node_readiness,
)
from batteryop.operator.claims.agent import node_annotations
from batteryop.operator.claims.scope import ClaimScope


def host_report(
    node_name: str,
    node_found: bool,
    annotations: dict[str, str],
    readiness: NodeReadiness | None = None,
) -> tuple[bool, str, str]:
    """HostReady's status, reason and message for a Node, its annotations and its own Ready
    condition."""
    if not node_found:
        return False, ClaimReason.NODE_NOT_FOUND, f"Node {node_name} does not exist"  # CL-052
    if readiness is not None and not readiness.ready:  # CL-105
        said = f" ({readiness.reason}: {readiness.message})" if readiness.reason else ""
        message = f"Node {node_name} is not Ready: its Ready condition is {readiness.status}{said}"
        return False, ClaimReason.NODE_NOT_READY, message[:MAX_MESSAGE_LENGTH]
    ready = annotations.get(names.EXEC_AGENT_READY_ANNOTATION)
    if ready is None:
        return (  # CL-052
            False,
            ClaimReason.NO_NODE_REPORT,
            f"Node {node_name} carries no Exec Agent report",
        )
    is_ready = ready == names.EXEC_AGENT_READY_TRUE  # CL-053: only "true"
    reason = annotations.get(names.EXEC_AGENT_REASON_ANNOTATION, "")
    if not is_valid_reason(reason):
        reason = ClaimReason.READY if is_ready else ClaimReason.HOST_NOT_READY  # CL-053
    message = annotations.get(names.EXEC_AGENT_MESSAGE_ANNOTATION, "")
    return is_ready, reason, message[:MAX_MESSAGE_LENGTH]  # CL-050, CL-051; CL-053: cut


async def host_ready(scope: ClaimScope) -> None:
    """Mirror the Node report of a Bound claim's Host as HostReady."""
    node_name = scope.status.node_name
    if not scope.bound or not node_name:
        return
    node = scope.deps.node(node_name)
    annotations = {
        key: value for key, value in node_annotations(node).items() if isinstance(value, str)
    }
    ready, reason, message = host_report(
        node_name, node is not None, annotations, node_readiness(node)
    )
    before = scope.condition(ClaimConditionType.HOST_READY)
    scope.set_condition(ClaimConditionType.HOST_READY, ready, reason, message)
    if not ready and (before is None or before.status != ConditionStatus.FALSE):
        scope.event(EventType.WARNING, reason, message or f"Node {node_name} is not ready")
    elif ready and before is not None and before.status == ConditionStatus.FALSE:
        scope.event(EventType.NORMAL, reason, message or f"Node {node_name} is ready")
