"""The release tool's `manifests`: which images it pins where, from OCI layouts on disk.

The layouts here are small artifacts written by `flux.write_layout` (the tool reads only each
layout's index); tests/release runs it through Pants on the images `./pants package` built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from batteryop.api import names, samples
from batteryop.release import flux, guest_kernel, guest_rootfs, main, oci

TAG = "v0.5.0"
VERSION = json.dumps(
    {"python": "0.5.0", "image_tag": TAG, "revision": "c" * 40, "created": 1_700_000_000}
)


def layout(root: Path, name: str) -> Path:
    """A layout holding one manifest tagged TAG, distinct per name."""
    out = root / name
    flux.write_layout(
        out,
        name.encode(),
        tag=TAG,
        source="https://example.invalid/repo",
        revision=f"{TAG}@sha1:{'c' * 40}",
        created="2023-11-14T22:13:20Z",
        mtime=1_700_000_000,
    )
    return out


def run_manifests(tmp_path: Path, images: list[str], guests: list[str]) -> dict[str, Any]:
    args = ["manifests", "--version-json", VERSION, "--out", str(tmp_path / "release")]
    for name in images:
        args += ["--image", f"{name}={layout(tmp_path / 'images', name)}"]
    for name in guests:
        args += ["--guest-image", f"{name}={layout(tmp_path / 'images', name)}"]
    return {"status": main.main(args), "out": tmp_path / "release"}


def read_objects(path: Path) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(path.read_text()) if o]


def sample_pool_images(pool: dict[str, Any]) -> tuple[str, str]:
    template = pool["spec"]["template"]
    return template["kernel"]["image"], template["rootVolume"]["containerSource"]


@pytest.mark.req("GI-034")
def test_samples_yaml_pins_the_release_s_guest_images_by_tag_and_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    guests = [guest_kernel.NAME, guest_rootfs.NAME]
    result = run_manifests(tmp_path, list(main.INSTALL_YAML_IMAGES), guests)
    assert result["status"] == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["unpinned"] == []
    digests = {n: oci.index_digest(tmp_path / "images" / n, TAG) for n in guests}
    pool, claim = read_objects(result["out"] / main.SAMPLES_FILE)
    assert pool["kind"] == names.POOL_KIND and claim["kind"] == names.CLAIM_KIND
    assert claim["spec"]["poolRef"]["name"] == pool["metadata"]["name"]
    assert sample_pool_images(pool) == (
        f"{main.REGISTRY}/guest-kernel:{TAG}@{digests[guest_kernel.NAME]}",
        f"{main.REGISTRY}/guest-rootfs:{TAG}@{digests[guest_rootfs.NAME]}",
    )
    listed = (result["out"] / "digests.txt").read_text().splitlines()
    assert all(main.pinned(n, TAG, d) in listed for n, d in digests.items())
    # The chart's sample Pool (off by default) names the same images.
    built = main.charts.build(
        app_version=TAG,
        source="https://example.invalid/repo",
        guests=main.guest_images(digests, TAG)[0],
        **main.install_images({"battery-operator": "sha256:" + "d" * 64}, TAG)[0],
    )
    template = built.files["templates/samples.yaml"]
    assert all(f"@{d}" in template for d in digests.values())


@pytest.mark.req("GI-034")
def test_guest_images_not_built_are_named_by_the_release_tag_and_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_manifests(tmp_path, ["battery-operator"], [guest_kernel.NAME])
    assert result["status"] == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert guest_rootfs.NAME in summary["unpinned"] and guest_kernel.NAME not in summary["unpinned"]
    pool, _ = read_objects(result["out"] / main.SAMPLES_FILE)
    kernel, rootfs = sample_pool_images(pool)
    assert kernel.startswith(f"{main.REGISTRY}/guest-kernel:{TAG}@sha256:")
    assert rootfs == f"{main.REGISTRY}/guest-rootfs:{TAG}"


def test_an_image_name_the_release_does_not_know_is_refused_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_manifests(tmp_path, ["battery-operator"], ["guest-initrd"])
    assert result["status"] == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("release-tool manifests: --image names one of")
    assert "['guest-initrd'] is neither" in err and "\n" not in err
    assert not (result["out"] / main.SAMPLES_FILE).exists()


def test_the_default_sample_pool_names_the_v0_4_1_guest_images() -> None:
    assert sample_pool_images(samples.sample_pool()) == (
        samples.GUEST_KERNEL_IMAGE,
        samples.GUEST_ROOTFS_IMAGE,
    )
    assert (
        samples.GuestImages(samples.GUEST_KERNEL_IMAGE, samples.GUEST_ROOTFS_IMAGE)
        == samples.V0_4_1
    )
