"""The agent's check, at start, that its own identity names its own Host (EA-050).

The DaemonSet's Pod gets a service-account token bound to the Pod, and the API server puts the
Pod's Node into that identity (`names.NODE_NAME_EXTRA`). The agent asks who it is
(SelfSubjectReview) and refuses to start unless that identity names exactly `--host-node`: an
agent given another Host's name, or a token not bound to a Pod on this Host, never serves. The
admission policy (EA-051) relies on the same extra to confine the agent's Node writes.
"""

from __future__ import annotations

from collections.abc import Mapping

from batteryop.api import names
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import KubeError
from batteryop.kube.resources import SELF_SUBJECT_REVIEWS


class IdentityError(RuntimeError):
    """The agent's identity does not name its Host, or could not be checked."""

    def __init__(self, node_name: str, problem: str) -> None:
        super().__init__(f"identity check for Host {node_name}: {problem}")
        self.node_name = node_name
        self.problem = problem


async def check_identity(kube: KubeClient, node_name: str) -> str:
    """The agent's user name, once its identity is shown to name exactly `node_name` (EA-050)."""
    review = {"apiVersion": SELF_SUBJECT_REVIEWS.api_version, "kind": "SelfSubjectReview"}
    try:
        answer = await kube.create(SELF_SUBJECT_REVIEWS, review)
    except KubeError as e:
        raise IdentityError(node_name, f"the API server did not answer ({e.reason})") from e
    status = answer.get("status") or {}
    info = status.get("userInfo") or {}
    user = str(info.get("username") or "")
    extra = info.get("extra") or {}
    nodes = extra.get(names.NODE_NAME_EXTRA) if isinstance(extra, Mapping) else None
    if not nodes:
        raise IdentityError(node_name, f"{user or 'the agent'} names no Node")
    if list(nodes) != [node_name]:
        raise IdentityError(node_name, f"{user} names Node {', '.join(map(str, nodes))}")
    return user
