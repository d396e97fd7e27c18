"""CT-005, CT-105: the CA certificates, without their keys, in the ConfigMap `flintlockd-ca`.

Keys `serving-ca.crt`, `client-ca.crt` and `exec-agent-serving-ca.crt` (CT-105) hold the CA
certificates re-encoded from the Secrets
(never the Secrets' bytes, so a key that strayed into `tls.crt` is not copied). A CA whose Secret
is missing or unusable is left out rather than published stale. The ConfigMap is created with
the managed-by label, and written only when its data differs.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import CONFIGMAPS

KEYS = (
    names.SERVING_CA_BUNDLE_KEY,
    names.CLIENT_CA_BUNDLE_KEY,
    names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY,
)
"""Every key the approver owns in the ConfigMap."""


def bundle(
    serving_pem: bytes | None, client_pem: bytes | None, exec_agent_serving_pem: bytes | None
) -> dict[str, str]:
    data: dict[str, str] = {}
    for key, pem in zip(KEYS, (serving_pem, client_pem, exec_agent_serving_pem), strict=True):
        if pem:
            data[key] = pem.decode()
    return data


async def publish(kube: KubeClient, namespace: str, name: str, data: dict[str, str]) -> bool:
    """Make the ConfigMap's keys (`KEYS`) `data` (a missing key removed); whether it wrote."""
    try:
        cm = await kube.get(CONFIGMAPS, name, namespace)
    except NotFoundError:
        body = {
            "metadata": {"name": name, "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY}},
            "data": data,
        }
        await kube.create(CONFIGMAPS, body, namespace)
        return True
    have = cm.get("data") or {}
    patch: dict[str, str | None] = {}
    for key in KEYS:
        if have.get(key) != data.get(key):
            patch[key] = data.get(key)
    if not patch:
        return False
    await kube.patch(CONFIGMAPS, name, {"data": patch}, namespace)
    return True
