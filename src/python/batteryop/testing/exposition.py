"""Reading the components' /metrics pages in tests: a sample's value by the key it is exposed
under, a sum over labels, and waiting for a page to show something.

A key is the sample as the text exposition writes it, `name` or `name{label="value",...}`
with the labels in the order the page writes them (prometheus_client: by label name). The pages have no watch, so a
wait reads the page again every POLL_SECONDS until its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from prometheus_client.parser import text_string_to_metric_families

POLL_SECONDS = 0.1


def samples(text: str) -> dict[str, float]:
    """Every sample of a text exposition by its key (prometheus_client writes no timestamps,
    so the value is what follows the key's last space)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            found[key] = float(value)
    return found


def value(text: str, key: str) -> float:
    """The sample `key`'s value, 0 when the page does not show it (a labelled counter appears
    only once it has counted)."""
    return samples(text).get(key, 0.0)


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels`."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


async def until(
    read: Callable[[], Awaitable[str]],
    done: Callable[[str], bool],
    within: float,
    what: str,
) -> str:
    """The first page `read()` gives for which `done(page)` holds; AssertionError naming
    `what`, with the last page, if none does within `within` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not done(page := await read()):
        assert loop.time() < deadline, f"not {what} within {within:.0f}s; metrics:\n{page}"
        await asyncio.sleep(POLL_SECONDS)
    return page
