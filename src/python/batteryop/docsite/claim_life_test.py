"""The claim's life is read from the steps' code: what it says matches what the steps do."""

from batteryop.docsite.claim_life import battery_methods, claim_life_dot, effects
from batteryop.docsite.steps import read_steps


def _effects_by_name() -> dict[str, object]:
    steps = read_steps("claims")
    return {doc.name: effects(doc) for group in steps.values() for doc in group}


def test_each_step_shows_the_battery_calls_and_phases_its_code_makes() -> None:
    fx = _effects_by_name()
    bind, release, renew, pending = (
        fx[n] for n in ("bind.bind", "release.release", "renew.renew", "pending.pending")
    )
    assert "ClaimVM" in bind.battery_calls and bind.phases == ("Bound",)  # type: ignore[attr-defined]
    assert release.battery_calls == ("ReleaseVM",) and release.finalizer == ("remove",)  # type: ignore[attr-defined]
    assert "Released" in release.events  # type: ignore[attr-defined]
    assert renew.battery_calls == ("Heartbeat",) and renew.phases == ("Expired",)  # type: ignore[attr-defined]
    assert pending.phases == ("Pending",)  # type: ignore[attr-defined]
    assert fx["after_bind.after_bind"].runs == ("agent.agent_address", "host_ready.host_ready")  # type: ignore[attr-defined]


def test_battery_methods_carry_their_grpc_names() -> None:
    methods = battery_methods()
    assert methods["claim_vm"] == "ClaimVM" and methods["list_leases"] == "ListLeases"


def test_the_diagram_follows_the_chain_in_order() -> None:
    dot = claim_life_dot()
    names = [doc.name for group in read_steps("claims").values() for doc in group]
    positions = [dot.index(f" {name}</B>") for name in names]
    assert positions == sorted(positions)
    bind = [doc.function for doc in read_steps("claims")["CHAIN"]].index("bind")
    assert f"s{bind} -> phase_Bound" in dot
