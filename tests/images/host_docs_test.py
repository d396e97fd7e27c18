"""The Hosts page's host.conf table is batteryop.hostconf's keys and defaults, in order."""

from __future__ import annotations

from pathlib import Path

from batteryop import hostconf


def test_the_hosts_page_lists_every_key_with_its_default() -> None:
    text = Path("docs/hosts.md").read_text()
    table = text.split("| Key | Default | Meaning |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1:4] for line in table.strip().splitlines()[1:]]
    found = [(key.strip().strip("`"), default.strip().strip("`")) for key, default, _ in rows]
    expected = [(k.name, k.default or "(empty)") for k in hostconf.KEYS.values()]
    assert found == expected
