"""Reading the components' /metrics pages in tests: a sample's value by the key it is exposed
under, and a sum over labels. The pages have no watch: a test waits for one to show
something with `testing.polling.wait_until`.

A key is the sample as the text exposition writes it, `name` or `name{label="value",...}`
with the labels in the order the page writes them (prometheus_client: by label name).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


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
