"""The Host configuration file, `/etc/battery/host.conf`: its keys, their defaults and their
rules, defined once for everything that writes or reads it.

A Host reads the file at boot (HI-050): one `KEY=value` per line, `#` comments, values
optionally in double quotes; it is parsed, never sourced, so nothing in it runs. A key the
Host does not know is skipped with a warning, an absent file means every default (HI-051), and
an invalid value is refused with the key and the rule named. The Cluster API templates write
the same file from a Host pool's settings (HP-010) and are stricter: an unknown key is refused
when the pool is rendered, so a typo never reaches a Host.

The file never holds a secret (HI-052): every key is a subnet, a device, a port, a UID or a
size.
"""

from batteryop.hostconf.keys import (
    DEFAULTS,
    KEYS,
    HostConfError,
    Key,
    check,
    defaults_file,
    entries,
    parse,
    render,
)

__all__ = [
    "DEFAULTS",
    "KEYS",
    "HostConfError",
    "Key",
    "check",
    "defaults_file",
    "entries",
    "parse",
    "render",
]
