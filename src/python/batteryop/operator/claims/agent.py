"""agent address: where the Holder reaches the Exec Agent of its claim's Host
(CL-005, CL-006).

For a Bound claim, not being deleted: the Node named by `status.host.nodeName`, from the
cache (`deps.node`), publishes its Exec Agent's `host:port` in the Node report annotation
`names.EXEC_AGENT_ADDRESS_ANNOTATION`. Present: `host.agentAddress` is set to it and
AgentAvailable=True `AgentAddressPublished` (CL-005). Absent, empty, or no such Node: the
address is cleared, AgentAvailable=False `NoAgentAddress`, and the claim stays Bound (CL-006);
a Warning Event is posted when it becomes unavailable. No battery call. The runtime queues a
claim again when its Node's report changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batteryop.api import names
from batteryop.api.conditions import (
    ClaimConditionType,
    ClaimReason,
    ConditionStatus,
    EventType,
)
from batteryop.operator.claims.scope import ClaimScope


def node_annotations(node: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A Node body's annotations ({} for no Node or none)."""
    if node is None:
        return {}
    metadata = node.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


async def agent_address(scope: ClaimScope) -> None:
    """Mirror the Exec Agent address of a Bound claim's Host into its status."""
    node_name = scope.status.node_name
    if not scope.bound or not node_name:
        return
    node = scope.deps.node(node_name)
    address = node_annotations(node).get(names.EXEC_AGENT_ADDRESS_ANNOTATION)
    if isinstance(address, str) and address:
        scope.update(agent_address=address)  # CL-005
        scope.set_condition(
            ClaimConditionType.AGENT_AVAILABLE,
            True,
            ClaimReason.AGENT_ADDRESS_PUBLISHED,
            f"The Exec Agent of Node {node_name} is at {address}",
        )
        return
    if node is None:
        message = f"Node {node_name} does not exist, so no Exec Agent address is known"
    else:
        message = f"Node {node_name} publishes no Exec Agent address"
    before = scope.condition(ClaimConditionType.AGENT_AVAILABLE)
    scope.update(agent_address=None)  # CL-006: cleared; the claim stays Bound
    scope.set_condition(
        ClaimConditionType.AGENT_AVAILABLE, False, ClaimReason.NO_AGENT_ADDRESS, message
    )
    if before is None or before.status != ConditionStatus.FALSE:
        scope.event(EventType.WARNING, ClaimReason.NO_AGENT_ADDRESS, message)
