"""The Exec Agent serving CA a client trusts when it is given none (CC-114).

The release publishes it, without its key, in the ConfigMap `flintlockd-ca` of the operator's
namespace, under `exec-agent-serving-ca.crt` (CT-105), and install.yaml lets every
authenticated user read that one ConfigMap (CT-107), as Kubernetes publishes
`kube-root-ca.crt`: a kubeconfig is then all a consumer needs. A client reads it once, at its
first exec (or while a claim binds, for a command that will exec), and again only after a
lookup failed. `serving_ca` (`--ca`, `$BATTERY_CA`) overrides it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from batteryop.api import names
from batteryop.client._exceptions import ConfigError
from batteryop.client._exec import check_serving_ca
from batteryop.kube.client import KubeClient
from batteryop.kube.errors import KubeError, NotFoundError
from batteryop.kube.resources import CONFIGMAPS

GIVEN: Final = "serving_ca, --ca or $BATTERY_CA"
"""Where a client is given a CA: the library's argument, the command's option, its variable."""
KEY: Final = names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY


async def published_ca(kube: KubeClient, namespace: str = names.OPERATOR_NAMESPACE) -> bytes:
    """The published CA (PEM), or ConfigError saying in one line what was tried and why."""
    where = f"ConfigMap {namespace}/{names.CA_BUNDLE_CONFIG_MAP}"
    try:
        body = await kube.get(CONFIGMAPS, names.CA_BUNDLE_CONFIG_MAP, namespace)
    except NotFoundError:
        why = "does not exist (is battery-operator installed on this cluster?)"
    except KubeError as e:
        why = f"could not be read: {e}"
    else:
        pem = ((body.get("data") or {}).get(KEY) or "").encode()
        if pem.strip():
            return check_serving_ca(pem)
        why = (
            f"has no {KEY} yet (the CSR approver writes it once cert-manager has issued the "
            "Exec Agent serving CA)"
        )
    raise ConfigError(f"no Exec Agent CA: none was given ({GIVEN}), and {where} {why}")


class CaLookup:
    """The CA a client trusts: the one it was given (`known` from the start), else the published
    one, looked up once at a time; a failed lookup is tried again when next asked."""

    def __init__(self, kube: KubeClient, given: bytes | None) -> None:
        self._kube = kube
        self.known = given
        self._task: asyncio.Future[bytes] | None = None

    def _start(self) -> asyncio.Future[bytes]:
        """The lookup under way or done, started if there is none."""
        if self._task is None:
            self._task = asyncio.ensure_future(published_ca(self._kube))
            self._task.add_done_callback(self._done)
        return self._task

    def _done(self, task: asyncio.Future[bytes]) -> None:
        if task.cancelled() or task.exception() is not None:  # retrieved: no stray warning
            self._task = None
        else:
            self.known = task.result()

    async def get(self) -> bytes:
        """The CA, looked up if not known (ConfigError saying what was tried if it cannot be).
        Kept here, not only by `_done`: a lookup that finished just now may not have run its
        callbacks yet when this returns its result."""
        if self.known is None:
            self.known = await asyncio.shield(self._start())
        return self.known

    def then(self, known: Callable[[], None]) -> None:
        """Look the CA up without waiting; `known()` once it is, if it can be."""
        self._start().add_done_callback(lambda _: known() if self.known is not None else None)

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
