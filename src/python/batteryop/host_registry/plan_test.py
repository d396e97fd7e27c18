from __future__ import annotations

import pytest

from batteryop.host_registry.plan import Settler, Window


@pytest.mark.req("IN-011")
def test_a_change_settles_only_after_holding_for_the_settle_time() -> None:
    s = Settler(30)
    s.observe({"a": "10.0.0.1:9090"}, {}, now=0)
    assert s.settled(29.9) == {}
    assert s.next_settles(10) == 30
    assert s.settled(30) == {"a": "10.0.0.1:9090"}


@pytest.mark.req("IN-011")
def test_a_flap_back_is_forgotten_and_a_new_address_starts_the_clock_again() -> None:
    s = Settler(30)
    s.observe({"a": "10.0.0.1:9090"}, {}, now=0)
    s.observe({}, {}, now=10)  # back to what battery has
    assert s.pending == {}
    s.observe({"a": "10.0.0.1:9090"}, {}, now=20)
    s.observe({"a": "10.0.0.2:9090"}, {}, now=40)
    assert s.settled(69) == {}
    assert s.settled(70) == {"a": "10.0.0.2:9090"}


@pytest.mark.req("IN-011", "IN-002")
def test_a_leaving_host_is_a_change_to_none() -> None:
    s = Settler(0)
    s.observe({}, {"a": "10.0.0.1:9090"}, now=5)
    assert s.settled(5) == {"a": None}
    s.applied({"a"})
    assert s.pending == {}


@pytest.mark.req("IN-012")
def test_the_window_opens_on_the_first_settled_change_and_acts_at_its_close() -> None:
    w = Window(60)
    assert not w.due(0, work=False)
    assert w.closes_at is None
    assert not w.due(10, work=True)
    assert w.closes_at == 70
    assert not w.due(69, work=True)
    assert w.due(70, work=True)
    assert w.closes_at is None


@pytest.mark.req("IN-012")
def test_a_window_closes_silently_when_everything_flapped_back() -> None:
    w = Window(60)
    assert not w.due(0, work=True)
    assert not w.due(60, work=False)
    assert w.closes_at is None
    assert not w.due(61, work=False)


def test_a_window_of_zero_applies_at_once() -> None:
    assert Window(0).due(5, work=True)
