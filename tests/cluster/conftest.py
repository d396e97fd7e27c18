"""The real node, one per test module (the harness holds a machine-wide lock)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from batteryop.testing.kubenode import binaries
from batteryop.testing.kubenode.node import KubeNode


@pytest.fixture(scope="module")
def node(request: pytest.FixtureRequest) -> Iterator[KubeNode]:
    """The cluster, with as many Nodes as the module's `NODES` says (1 by default)."""
    if os.geteuid() != 0:
        pytest.skip("the real node needs root (namespaces, cgroups, nftables)")
    missing = binaries.missing_tools()
    if missing:
        pytest.skip(f"the real node needs Debian's {', '.join(missing)}")
    started = time.monotonic()
    with KubeNode.start(nodes=getattr(request.module, "NODES", 1)) as running:
        print(
            f"\nreal node ({len(running.members)} Nodes): binaries ready in "
            f"{running.timings['build']:.1f} s, another run's lock held it "
            f"{running.timings['lock']:.1f} s, cluster up in {running.timings['start']:.1f} s "
            f"(total {time.monotonic() - started:.1f} s; "
            + ", ".join(
                f"{k} {v:.1f} s" for k, v in running.timings.items() if k.startswith("join")
            )
            + ")"
        )
        yield running
    # __exit__ raised if the machine was not put back (TD-113)
