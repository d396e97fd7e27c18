"""Step `read_node`: the requester's Node, fresh from the API server, for a serving signer
(CT-010, CT-014: its addresses and its existence are checked). A client request needs none:
it is denied whatever its Node (CT-102). A missing Node is a fact (`NodeNotFound`), not an
error.
"""

from __future__ import annotations

from batteryop.csr_approver.checks import NodeFacts, requester_node
from batteryop.csr_approver.review.scope import ReviewScope
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import NODES


async def read_node(scope: ReviewScope) -> None:
    node_name = requester_node(scope.request)
    if not scope.serving or not isinstance(node_name, str):
        return
    try:
        scope.node = NodeFacts.from_object(await scope.deps.kube.get(NODES, node_name))
    except NotFoundError:
        scope.node = None
