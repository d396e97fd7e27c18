"""The kubelet's labels and system reserve on a Host."""

from __future__ import annotations

import json

import pytest

from batteryop import hostconf
from batteryop.api import names
from batteryop.hostimage import kubelet_env
from batteryop.hostimage.kubelet_env import Capacity

VERSIONS = {"FIRECRACKER_VERSION": "v1.16.1", "CLOUD_HYPERVISOR_VERSION": "v48.0"}
DIGEST = "0123456789abcdef" * 4


def status(digest: object) -> str:
    return json.dumps({"status": {"booted": {"image": {"imageDigest": digest}}}})


@pytest.mark.req("HI-060", "HI-074")
def test_the_labels_name_the_host_the_image_and_each_hypervisor() -> None:
    assert kubelet_env.labels(VERSIONS, status(f"sha256:{DIGEST}")) == {
        names.HOST_LABEL: "true",
        names.HOST_IMAGE_LABEL: DIGEST[:32],
        names.FIRECRACKER_LABEL: "v1.16.1",
        names.CLOUD_HYPERVISOR_LABEL: "v48.0",
    }


@pytest.mark.req("HI-060")
@pytest.mark.parametrize(
    "bootc", ["", "not json", status(None), status("sha256:short"), json.dumps({"status": {}})]
)
def test_an_unknown_image_is_labelled_unknown(bootc: str) -> None:
    assert kubelet_env.image_digest_label(bootc) == "unknown"


@pytest.mark.req("HI-061")
@pytest.mark.parametrize(
    ("cpus", "memory", "reserved"),
    [
        (64, 262_144, {"cpu": "62", "memory": "258048Mi"}),
        (2, 4096, {"cpu": "0", "memory": "0Mi"}),
        (1, 1024, {"cpu": "0", "memory": "0Mi"}),  # never below zero
    ],
)
def test_everything_beyond_the_host_reserve_is_system_reserved(
    cpus: int, memory: int, reserved: dict[str, str]
) -> None:
    assert kubelet_env.system_reserved(hostconf.DEFAULTS, Capacity(cpus, memory)) == reserved


def test_memory_is_read_from_meminfo_in_mib() -> None:
    assert kubelet_env.memory_mb("MemFree: 1 kB\nMemTotal:       16384000 kB\n") == 16000
    with pytest.raises(ValueError, match="MemTotal"):
        kubelet_env.memory_mb("MemFree: 1 kB\n")


@pytest.mark.req("HI-060", "HI-061")
def test_kubelet_env_is_one_line_of_arguments() -> None:
    text = kubelet_env.render(
        {"HOST_RESERVE_VCPU": "4", "HOST_RESERVE_MEMORY_MB": "8192"},
        VERSIONS,
        status(f"sha256:{DIGEST}"),
        Capacity(96, 393_216),
    )
    line = text.splitlines()[-1]
    assert line == (
        "KUBELET_BATTERY_ARGS=--node-labels="
        f"{names.HOST_LABEL}=true,{names.HOST_IMAGE_LABEL}={DIGEST[:32]},"
        f"{names.FIRECRACKER_LABEL}=v1.16.1,{names.CLOUD_HYPERVISOR_LABEL}=v48.0"
        " --system-reserved=cpu=92,memory=385024Mi"
    )
