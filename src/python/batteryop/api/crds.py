"""The two CustomResourceDefinitions, loaded from the package's `crds/*.yaml` resources.

The YAML files are the single source of the CRDs: the Manifests embed them, the tests install
them into a real kube-apiserver, and nothing else writes a schema.

Requirements: RS-001 (Pool and MicroVMClaim, namespaced, in battery.liquidmetal-x.dev/v1alpha1),
RS-002 (no other kind).
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any, Final

import yaml

POOLS_FILE: Final = "pools.yaml"
CLAIMS_FILE: Final = "microvmclaims.yaml"
FILES: Final = (POOLS_FILE, CLAIMS_FILE)


def crd_text(filename: str) -> str:
    """The YAML text of one CRD file, as shipped."""
    if filename not in FILES:
        raise ValueError(f"no CRD file {filename!r}; there are {', '.join(FILES)}")
    return resources.files("batteryop.api").joinpath("crds", filename).read_text(encoding="utf-8")


@functools.cache
def _load(filename: str) -> dict[str, Any]:
    body = yaml.safe_load(crd_text(filename))
    if not isinstance(body, dict) or body.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"crds/{filename} does not hold a CustomResourceDefinition")
    return body


def pool_crd() -> dict[str, Any]:
    """The Pool CRD as a dict (a fresh copy the caller may change)."""
    return copy.deepcopy(_load(POOLS_FILE))


def claim_crd() -> dict[str, Any]:
    """The MicroVMClaim CRD as a dict (a fresh copy the caller may change)."""
    return copy.deepcopy(_load(CLAIMS_FILE))


def all_crds() -> list[dict[str, Any]]:
    """Both CRDs, Pool first."""
    return [pool_crd(), claim_crd()]


def manifest() -> str:
    """Both CRDs as one multi-document YAML stream, for install.yaml.

    Each file starts its document with `---`, so the files are simply joined.
    """
    return "".join(crd_text(f) for f in FILES)
