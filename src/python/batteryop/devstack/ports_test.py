from __future__ import annotations

from collections.abc import Iterator

import pytest

from batteryop.devstack import stack
from batteryop.devstack.stack import Ports


def test_a_port_free_port_returns_again_is_not_handed_out_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the kernel may do: a port whose socket was closed comes back from the next bind.
    answers: Iterator[int] = iter([5000, 5000, 5000, 5001, 5000])
    monkeypatch.setattr(stack, "free_port", lambda host="127.0.0.1": next(answers))
    ports = Ports()
    assert ports.take() == 5000
    assert ports.take() == 5001
    assert ports.take("127.0.0.21") == 5000  # another address: its own ports
