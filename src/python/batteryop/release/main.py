"""The release tool, run by the Pants plugin `pants-plugins/batteryop_release` (and by hand):

    release-tool version --repo .                     # the version as JSON
    release-tool image --name battery-operator --pex amd64=a.pex --pex arm64=b.pex \\
        --version-json '<json>' --out dist/images/battery-operator
    release-tool manifests --image battery-operator=<layout> ... \\
        [--guest-image guest-kernel=<layout> ...] --version-json '<json>' --out dist/release
    release-tool guest-image --kind kernel|rootfs --arch amd64 --arch arm64 \\
        --version-json '<json>' --out dist/images/guest-kernel

`manifests` renders install.yaml with each image of ours pinned by tag and digest (DP-032),
writes the Manifests artifact (DP-030..DP-034) as an OCI layout, the Helm chart of the same
images as a chart archive and an OCI chart artifact (DP-115), and `samples.yaml`, the sample
Pool and a claim on it, the Pool naming the release's guest images pinned the same way (GI-030;
the chart's sample Pool names the same). `guest-image` builds the guest
kernel (`guest_kernel`) or root filesystem (`guest_rootfs`) image (GI-030). Every command prints
one JSON line on success; on failure one line naming the cause, exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Final

from batteryop.api import samples
from batteryop.manifests import chart as charts
from batteryop.manifests import render
from batteryop.release import chart, debs, flux, guest_kernel, guest_rootfs, images, oci
from batteryop.release.gomodules import GoModuleError
from batteryop.release.guest_agent import GuestAgentError
from batteryop.release.version import Version, VersionError, from_git

REGISTRY: Final = "ghcr.io/phoban01/battery-operator"
"""Where a release's images live: the operator at REGISTRY, every other image beside it."""
OPERATOR: Final = "battery-operator"
INSTALL_YAML_IMAGES: Final = {
    OPERATOR: "operator_image",
    "host-registry": "host_registry_image",
    "exec-agent": "exec_agent_image",
    "csr-approver": "csr_approver_image",
}
"""Image name → the `render()` argument that places it in install.yaml."""
GUEST_IMAGES_BY_NAME: Final = (guest_kernel.NAME, guest_rootfs.NAME)
"""The guest images the sample Pool names (`samples.GuestImages`' kernel, then root volume)."""
SAMPLES_FILE: Final = "samples.yaml"
SAMPLES_HEADER: Final = (
    "# battery-operator {tag}: a sample Pool on this release's guest images (by tag and digest\n"
    "# where the release built them) and a claim on it.\n"
    "# After install.yaml: kubectl apply -n <namespace> -f samples.yaml\n"
)
MANIFESTS_NAME: Final = "manifests"
CHART_NAME: Final = "chart"
"""The OCI chart artifact's layout folder in the release output (DP-115)."""


def image_repository(name: str, registry: str = REGISTRY) -> str:
    return registry if name == OPERATOR else f"{registry}/{name}"


def pinned(name: str, tag: str, digest: str, registry: str = REGISTRY) -> str:
    """`<repository>:<tag>@<digest>` (DP-032)."""
    return f"{image_repository(name, registry)}:{tag}@{digest}"


def _version(text: str) -> Version:
    try:
        return Version(**json.loads(text))
    except (TypeError, ValueError) as err:
        raise VersionError(f"--version-json: {err}") from None


def _pairs(values: Sequence[str], flag: str) -> dict[str, Path]:
    out = {}
    for value in values:
        key, sep, path = value.partition("=")
        if not sep or not key or not path:
            raise ValueError(f"{flag} must be <name>=<path>, not {value!r}")
        out[key] = Path(path)
    return out


def cmd_image(args: argparse.Namespace) -> dict[str, object]:
    version = _version(args.version_json)
    pexes = _pairs(args.pex, "--pex")
    unknown = sorted(set(pexes) - set(oci.GOARCH))
    if unknown:
        raise ValueError(f"--pex: architecture must be one of {sorted(oci.GOARCH)}: {unknown}")
    digest = images.build(args.name, pexes, version, args.out, work=args.work)
    sizes = {
        arch: oci.compressed_size(manifest)
        for arch, manifest in oci.platform_manifests(args.out, version.image_tag).items()
    }
    return {"name": args.name, "tag": version.image_tag, "digest": digest, "sizes": sizes}


GUEST_IMAGES: Final = {"kernel": guest_kernel, "rootfs": guest_rootfs}
"""`guest-image --kind` → the module whose `NAME` and `build_image` make it."""


def cmd_guest_image(args: argparse.Namespace) -> dict[str, object]:
    version = _version(args.version_json)
    unknown = sorted(set(args.arch) - set(oci.GOARCH))
    if unknown:
        raise ValueError(f"--arch must be among {sorted(oci.GOARCH)}: {unknown}")
    module = GUEST_IMAGES[args.kind]
    digest = module.build_image(sorted(set(args.arch)), args.out, version)
    sizes = {
        arch: oci.compressed_size(manifest)
        for arch, manifest in oci.platform_manifests(args.out, version.image_tag).items()
    }
    return {"name": module.NAME, "tag": version.image_tag, "digest": digest, "sizes": sizes}


def _references(
    names: Sequence[str], digests: dict[str, str], tag: str, registry: str
) -> tuple[dict[str, str], list[str]]:
    """Each image's reference, pinned where it was built, else by tag; and those left so."""
    refs: dict[str, str] = {}
    unpinned = []
    for name in names:
        if name in digests:
            refs[name] = pinned(name, tag, digests[name], registry)
        else:
            refs[name] = f"{image_repository(name, registry)}:{tag}"
            unpinned.append(name)
    return refs, unpinned


def install_images(
    digests: dict[str, str], tag: str, registry: str = REGISTRY
) -> tuple[dict[str, str], list[str]]:
    """The `render()` image arguments, every built image pinned; and the images left unpinned."""
    refs, unpinned = _references(list(INSTALL_YAML_IMAGES), digests, tag, registry)
    kwargs = {INSTALL_YAML_IMAGES[name]: ref for name, ref in refs.items()}
    if OPERATOR in unpinned:
        raise ValueError(f"the {OPERATOR} image was not built: install.yaml needs its digest")
    return kwargs, unpinned


def render_install_yaml(
    digests: dict[str, str], tag: str, registry: str = REGISTRY
) -> tuple[str, list[str]]:
    """install.yaml with every built image pinned; returns it and the images left unpinned."""
    kwargs, unpinned = install_images(digests, tag, registry)
    return render.to_yaml(render.render(**kwargs)), unpinned


def guest_images(
    digests: dict[str, str], tag: str, registry: str = REGISTRY
) -> tuple[samples.GuestImages, list[str]]:
    """The sample Pool's guest images, each built one pinned; and those left unpinned."""
    refs, unpinned = _references(GUEST_IMAGES_BY_NAME, digests, tag, registry)
    return samples.GuestImages(*(refs[name] for name in GUEST_IMAGES_BY_NAME)), unpinned


def render_samples(guests: samples.GuestImages, tag: str) -> str:
    """samples.yaml: the sample Pool on the release's guest images, and a claim on it."""
    objects = [samples.sample_pool(guests=guests), samples.sample_claim()]
    return SAMPLES_HEADER.format(tag=tag) + render.documents(objects)


def write_chart(
    out: Path,
    digests: dict[str, str],
    version: Version,
    registry: str = REGISTRY,
    guests: samples.GuestImages | None = None,
) -> tuple[str, str]:
    """The Helm chart of the same images as install.yaml (DP-115), its sample Pool on the
    release's guest images (`guests`, else those of `digests`): its archive in `out` and its
    OCI chart artifact in `out/chart`; returns the chart's version and the artifact's digest."""
    kwargs, _ = install_images(digests, version.image_tag, registry)
    if guests is None:
        guests, _ = guest_images(digests, version.image_tag, registry)
    built = charts.build(
        app_version=version.image_tag, source=images.SOURCE_URL, guests=guests, **kwargs
    )
    data = chart.archive(built, version.created)
    (out / chart.archive_name(built.version)).write_bytes(data)
    digest = chart.write_layout(
        out / CHART_NAME,
        built,
        data,
        revision=f"{version.image_tag}@sha1:{version.revision}",
        created=images.created_rfc3339(version.created),
    )
    return built.version, digest


def cmd_manifests(args: argparse.Namespace) -> dict[str, object]:
    version = _version(args.version_json)
    layouts = _pairs(args.image, "--image")
    guests = _pairs(args.guest_image, "--guest-image")
    unknown = sorted(set(layouts) - set(INSTALL_YAML_IMAGES)) + sorted(
        set(guests) - set(GUEST_IMAGES_BY_NAME)
    )
    if unknown:
        raise ValueError(
            f"--image names one of {sorted(INSTALL_YAML_IMAGES)} and --guest-image one of "
            f"{sorted(GUEST_IMAGES_BY_NAME)}: {unknown} is neither"
        )
    digests = {
        name: oci.index_digest(path, version.image_tag)
        for name, path in (*layouts.items(), *guests.items())
    }
    text, unpinned = render_install_yaml(digests, version.image_tag, args.registry)
    sample_guests, unpinned_guests = guest_images(digests, version.image_tag, args.registry)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / flux.FILE_NAME).write_text(text, encoding="utf-8")
    (args.out / SAMPLES_FILE).write_text(
        render_samples(sample_guests, version.image_tag), encoding="utf-8"
    )
    artifact = flux.write_layout(
        args.out / MANIFESTS_NAME,
        text.encode(),
        tag=version.image_tag,
        source=images.SOURCE_URL,
        revision=f"{version.image_tag}@sha1:{version.revision}",  # DP-034
        created=images.created_rfc3339(version.created),
        mtime=version.created,
    )
    lines = [
        f"{pinned(n, version.image_tag, d, args.registry)}" for n, d in sorted(digests.items())
    ]
    lines.append(
        f"{image_repository(MANIFESTS_NAME, args.registry)}:{version.image_tag}@{artifact}"
    )
    chart_version, chart_digest = write_chart(
        args.out, digests, version, args.registry, sample_guests
    )
    lines.append(
        f"{image_repository(chart.REPOSITORY, args.registry)}:{chart_version}@{chart_digest}"
    )
    (args.out / "digests.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {
        "tag": version.image_tag,
        "images": digests,
        "manifests": artifact,
        "chart": f"{chart_version}@{chart_digest}",
        "unpinned": unpinned + unpinned_guests,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release-tool", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ver = sub.add_parser("version", help="the release version of a git checkout, as JSON")
    ver.add_argument("--repo", type=Path, default=Path("."))
    img = sub.add_parser("image", help="build one deployable's multi-architecture image")
    img.add_argument("--name", required=True)
    img.add_argument("--pex", action="append", required=True, help="<arch>=<pex file>")
    img.add_argument("--version-json", required=True)
    img.add_argument("--out", type=Path, required=True)
    img.add_argument("--work", type=Path, help="scratch folder (default: the system's)")
    man = sub.add_parser("manifests", help="install.yaml pinned by digest, and the artifact")
    man.add_argument("--image", action="append", default=[], help="<name>=<OCI layout>")
    man.add_argument(
        "--guest-image",
        action="append",
        default=[],
        help="<guest-kernel|guest-rootfs>=<OCI layout>, pinned in the sample Pool",
    )
    man.add_argument("--version-json", required=True)
    man.add_argument("--registry", default=REGISTRY)
    man.add_argument("--out", type=Path, required=True)
    guest = sub.add_parser("guest-image", help="build the guest kernel or root filesystem image")
    guest.add_argument("--kind", choices=sorted(GUEST_IMAGES), required=True)
    guest.add_argument("--arch", action="append", required=True)
    guest.add_argument("--version-json", required=True)
    guest.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "version":
            result: dict[str, object] = asdict(from_git(args.repo))
        elif args.command == "image":
            result = cmd_image(args)
        elif args.command == "guest-image":
            result = cmd_guest_image(args)
        else:
            result = cmd_manifests(args)
    except (
        VersionError, debs.DebError, oci.OciError, ValueError, OSError,
        guest_kernel.KernelError, guest_rootfs.RootfsError, GuestAgentError, GoModuleError,
    ) as err:  # fmt: skip
        print(f"release-tool {args.command}: {err}", file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
