"""`list_watch`: a list, then a watch from the list's resourceVersion, for as long as it runs.

Shared by the deployables that must follow objects themselves (the operator, the CSR approver).
The operator follows two things itself rather than through kopf, because it must know when
it has seen *all* of them: the battery config ConfigMap (one object, by name: the RBAC grants
nothing wider) and the Nodes. The Host set a Pool is placed on is the published Host names
resolved against the Nodes (PO-010, PO-011), and a Host set computed before the Nodes are
listed would be missing Hosts: a Pool reconciled then would be declared to battery on fewer
Hosts than it has. kopf's event handlers say nothing of when the first listing is complete;
`on_list` does.

Objects reach the callbacks without `metadata.managedFields` (`without_managed_fields`): no
follower reads it, and it was most of what a follower of many objects kept.

Every list replaces what the caller knows (`on_list` gets the whole set, so an object deleted
while the watch was down is noticed); the watch continues from the list's resourceVersion,
so nothing between the two is lost. A failed list or watch (410 Gone included) is retried
from a fresh list, with backoff from 1 s doubling to 30 s; so is any other error (a body that
does not parse, a callback that raises), logged with its traceback: the loop never ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from batteryop.api.backoff import Backoff
from batteryop.kube.client import KubeClient, Objects, WatchCursor
from batteryop.kube.errors import KubeError
from batteryop.kube.resources import Resource

log = logging.getLogger(__name__)

RETRY = (1.0, 30.0)
"""A failed list or watch is retried from a fresh list after 1 s, doubling to 30 s."""


async def list_watch(
    kube: KubeClient,
    res: Resource,
    *,
    on_list: Callable[[Objects], None],
    on_event: Callable[[str, dict[str, Any]], None],
    namespace: str | None = None,
    field_selector: str | None = None,
    on_error: Callable[[Exception], None] | None = None,
) -> None:
    """Feed `on_list` every complete list and `on_event` every watch event after it.

    `on_error`, if given, hears of every failure before the retry: until the next `on_list`,
    what the caller knows may be out of date (a caller that must not act on a stale set, such
    as the Exec Agent's drain guard, waits for that list)."""
    backoff = Backoff(*RETRY)
    while True:
        try:
            items = await kube.list(res, namespace, field_selector=field_selector, slim=True)
            on_list(items)
            backoff.reset()
            # A watch the server ends on its timeout is opened again from the newest version
            # seen, a bookmark's included: a quiet watch that kept its list's version would
            # find it compacted away (410 Gone) and list everything again.
            cursor = WatchCursor(items.resource_version)
            while True:
                async for kind, obj in kube.watch(
                    res,
                    namespace,
                    field_selector=field_selector,
                    resource_version=cursor.version or None,
                    on_bookmark=cursor.move,
                    slim=True,
                ):
                    cursor.move(str((obj.get("metadata") or {}).get("resourceVersion") or ""))
                    on_event(kind, obj)
        except KubeError as e:
            log.warning("List/watch of %s failed; listing again: %s", res.plural, e)
            _tell(on_error, e)
        except Exception as e:  # a bad body or a failing callback: never stop following
            log.exception("List/watch of %s failed; listing again", res.plural)
            _tell(on_error, e)
        await asyncio.sleep(backoff.next())


def _tell(on_error: Callable[[Exception], None] | None, error: Exception) -> None:
    if on_error is None:
        return
    try:
        on_error(error)
    except Exception:  # the loop must go on whatever the callback does
        log.exception("on_error callback failed")
