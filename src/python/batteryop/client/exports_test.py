"""The public surface: a sorted `__all__`, every name reporting `batteryop.client` as home,
the same methods on the sync and async sides, and no kopf or deployable inside the wheel."""

from __future__ import annotations

import inspect
import types

import pytest

import batteryop.client
from batteryop.client import AsyncClaim, AsyncClient, Claim, Client


def test_all_is_sorted_and_every_public_name_is_exported_from_the_package() -> None:
    exported = batteryop.client.__all__
    assert exported == sorted(exported)
    public = {
        n
        for n, v in vars(batteryop.client).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert public - {"annotations"} == set(exported)
    for name in exported:
        assert getattr(batteryop.client, name).__module__ == "batteryop.client", name


def methods(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}


@pytest.mark.req("CC-100")
def test_the_sync_and_async_sides_have_the_same_names() -> None:
    assert methods(Client) - {"close", "namespace"} == methods(AsyncClient) - {"aclose"}
    assert methods(Claim) == methods(AsyncClaim) - {"observe", "start_holding"}


def test_the_sync_methods_take_the_async_ones_arguments() -> None:
    for sync_cls, async_cls in ((Client, AsyncClient), (Claim, AsyncClaim)):
        for name in ("claim", "attach", "exec", "exec_stream", "release"):
            if not hasattr(sync_cls, name):
                continue
            s = list(inspect.signature(getattr(sync_cls, name)).parameters)
            a = list(inspect.signature(getattr(async_cls, name)).parameters)
            assert s == a, (sync_cls.__name__, name)
