"""CT-005: both CA certificates, without their keys, in the ConfigMap `flintlockd-ca`.

Keys `serving-ca.crt` and `client-ca.crt` hold the CA certificates re-encoded from the Secrets
(never the Secrets' bytes, so a key that strayed into `tls.crt` is not copied). A CA whose Secret
is missing or unusable is left out rather than published stale. The ConfigMap is created with
the managed-by label, and written only when its data differs.
"""

from __future__ import annotations

from batteryop.api import names
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import NotFoundError
from batteryop.kube.resources import CONFIGMAPS


def bundle(serving_pem: bytes | None, client_pem: bytes | None) -> dict[str, str]:
    data: dict[str, str] = {}
    if serving_pem:
        data[names.SERVING_CA_BUNDLE_KEY] = serving_pem.decode()
    if client_pem:
        data[names.CLIENT_CA_BUNDLE_KEY] = client_pem.decode()
    return data


async def publish(kube: KubeClient, namespace: str, name: str, data: dict[str, str]) -> bool:
    """Make the ConfigMap's two keys `data` (a missing key removed); whether it wrote."""
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
    for key in (names.SERVING_CA_BUNDLE_KEY, names.CLIENT_CA_BUNDLE_KEY):
        if have.get(key) != data.get(key):
            patch[key] = data.get(key)
    if not patch:
        return False
    await kube.patch(CONFIGMAPS, name, {"data": patch}, namespace)
    return True
