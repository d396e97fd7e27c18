"""cert-manager's own CRDs in the test control plane, so the API server judges install.yaml's
cert-manager objects by cert-manager's real schemas.

The release is pinned once, in `3rdparty/go/certmanager/go.mod` (and go.sum). `crd_files()`
fetches that module through the Go module proxy with `go mod download` (`gomodules.download`:
Go refuses a zip that does not match go.sum; CI starts with an empty module cache, so the first
call downloads it, about 4 MB) and returns the `cert-manager.io` CRDs its zip carries under
`deploy/crds`. `install_crds(api)` creates them in the API server (one already there is left
as it is) and waits, by watch, until each is Established.

Here no cert-manager controller runs: the objects are stored and validated, never acted on. On
the real node cert-manager's controllers do run and issue them (`testing.kubenode.addons`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from batteryop.release import gomodules
from batteryop.testing.controlplane import install_crd

MODULE = "github.com/cert-manager/cert-manager"
PINS = Path("3rdparty/go/certmanager")
CRD_DIR = "deploy/crds"
CRD_GLOB = "cert-manager.io_*.yaml"
"""Certificates, CertificateRequests, Issuers, ClusterIssuers (not the ACME kinds)."""


def module_dir() -> Path:
    """cert-manager's module source, at the pinned version, checked against go.sum."""
    return gomodules.download(gomodules.find_pins(PINS), [MODULE])[MODULE]


def crd_files() -> list[Path]:
    """The `cert-manager.io` CRD files of the pinned release, sorted by name."""
    files = sorted((module_dir() / CRD_DIR).glob(CRD_GLOB))
    if not files:
        raise gomodules.GoModuleError(f"{MODULE} has no {CRD_DIR}/{CRD_GLOB}")
    return files


def crds() -> list[dict[str, Any]]:
    """The CRD objects of `crd_files()`."""
    out = []
    for path in crd_files():
        out += [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    return out


def install_crds(api: k8s.ApiClient) -> list[str]:
    """Create cert-manager's CRDs and wait until each is Established; their names."""
    installed = []
    for crd in crds():
        install_crd(api, crd, timeout_seconds=60)
        installed.append(crd["metadata"]["name"])
    return installed
