from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from batteryop.api import crds, names


def test_group_and_version() -> None:
    assert names.API_VERSION == "battery.liquidmetal-x.dev/v1alpha1"
    assert names.POOL_CRD_NAME == "pools.battery.liquidmetal-x.dev"
    assert names.CLAIM_CRD_NAME == "microvmclaims.battery.liquidmetal-x.dev"


def test_finalizer_names() -> None:
    assert names.CLAIM_FINALIZER == "battery.liquidmetal-x.dev/release"
    assert names.POOL_FINALIZER == "battery.liquidmetal-x.dev/pool"


def test_the_exec_secret_is_the_claim_name_with_exec() -> None:
    assert names.exec_secret_name("ci-42") == "ci-42-exec"
    assert names.EXEC_AGENT_AUDIENCE == "battery.liquidmetal-x.dev/exec-agent"


def test_the_claim_of_an_exec_secret_is_its_name_without_exec() -> None:
    assert names.claim_of_exec_secret(names.exec_secret_name("ci-42")) == "ci-42"
    assert names.claim_of_exec_secret("ci-42") is None
    assert names.claim_of_exec_secret("-exec") is None
    assert names.claim_of_exec_secret("a-exec-exec") == "a-exec"


def test_spiffe_ids() -> None:
    td = names.DEFAULT_TRUST_DOMAIN
    assert names.spiffe_host_id(td, "n1") == "spiffe://battery.liquidmetal-x.dev/flintlock/host/n1"
    assert (
        names.spiffe_exec_agent_id(td, "n1")
        == "spiffe://battery.liquidmetal-x.dev/flintlock/client/exec-agent/n1"
    )
    assert (
        names.spiffe_battery_client_id(td)
        == "spiffe://battery.liquidmetal-x.dev/flintlock/client/battery"
    )


def test_signer_names() -> None:
    assert names.SIGNERS == (
        "battery.liquidmetal-x.dev/flintlockd-serving",
        "battery.liquidmetal-x.dev/flintlockd-client",
        "battery.liquidmetal-x.dev/exec-agent-serving",
    )


def test_node_annotations_carry_the_prefix_the_admission_policy_allows() -> None:
    for value in (
        names.EXEC_AGENT_READY_ANNOTATION,
        names.EXEC_AGENT_REASON_ANNOTATION,
        names.EXEC_AGENT_MESSAGE_ANNOTATION,
        names.EXEC_AGENT_ADDRESS_ANNOTATION,
        names.FLINTLOCKD_ADDRESS_ANNOTATION,
        names.DRAIN_STARTED_ANNOTATION,
    ):
        assert value.startswith(names.PREFIX)


def test_drain_guard_name() -> None:
    assert names.drain_guard_name("host-1") == "exec-agent-drain-guard-host-1"


@pytest.mark.req("RS-001")
@pytest.mark.parametrize(
    ("crd", "kind", "plural", "singular", "short"),
    [
        (
            crds.pool_crd,
            names.POOL_KIND,
            names.POOL_PLURAL,
            names.POOL_SINGULAR,
            names.POOL_SHORT_NAMES,
        ),
        (
            crds.claim_crd,
            names.CLAIM_KIND,
            names.CLAIM_PLURAL,
            names.CLAIM_SINGULAR,
            names.CLAIM_SHORT_NAMES,
        ),
    ],
)
def test_the_crds_use_these_names(
    crd: Callable[[], dict[str, Any]],
    kind: str,
    plural: str,
    singular: str,
    short: tuple[str, ...],
) -> None:
    body = crd()
    spec = body["spec"]
    assert body["metadata"]["name"] == f"{plural}.{names.GROUP}"
    assert spec["group"] == names.GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": singular,
        "shortNames": list(short),
        "categories": [names.CATEGORY],
    }
    assert [v["name"] for v in spec["versions"]] == [names.VERSION]
