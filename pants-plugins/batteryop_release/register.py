"""Pants targets for the release: `oci_image` and `release_manifests` (DP-030..DP-034).

`./pants package ::` builds them with the other packages:

- `oci_image(repository=..., binaries={"amd64": ":x", "arm64": ":y"})`: the deployable's
  multi-architecture image, an OCI layout in `dist/images/<repository>/`, built by the release
  tool (`src/python/batteryop/release:release-tool`, `batteryop.release.images`) from the
  per-architecture PEX files, with buildah and no emulation.
- the client distribution (`src:battery-operator-client`) gets its version from git: the
  release tool's `version` (a tag's version, or a development version after it).
- `guest_image(repository=..., kind="kernel"|"rootfs", architectures=[...])`: the guest
  kernel or root filesystem image (GI-030), an OCI layout in `dist/images/<repository>/`, built
  by the release tool's `guest-image` from the definition in `src/images/guest` (its
  `dependencies`) and the pinned sources of the shared third-party folder
  (`$BATTERYOP_THIRD_PARTY`, default `../shared/third_party` beside the build root). A kernel
  build takes many minutes of both cores; the release tool caches each kernel in
  `$BATTERYOP_CACHE/guest-kernel/` by its inputs, so a new release tool does not rebuild it.
  The architectures are the target's `architectures`, or else the `[guest-images]`
  `architectures` option (amd64 and arm64; CI's `pants.ci.toml` builds amd64 only, since an
  arm64 kernel's cold build does not fit its time: the release check builds both).
- `release_manifests(images=[...], guest_images=[...])`: `dist/release/install.yaml` with every
  image pinned by tag and digest, the Flux artifact as an OCI layout
  (`dist/release/manifests/`), the Helm chart of the same images
  (`dist/release/battery-operator-<version>.tgz`, and as an OCI chart in
  `dist/release/chart/`, DP-115), `dist/release/samples.yaml` (the sample Pool on the guest
  images, pinned the same way, and a claim) and `dist/release/digests.txt`.

The version comes from git (`release-tool version`, run once per Pants session, never cached
across sessions); the image builds are cached by Pants like any process, keyed on the PEX
files, the release tool (which carries the Debian package lock) and the version. Where
buildah is missing, both targets print one line saying so and build nothing.

This file runs inside Pants (Python 3.9); everything it runs is the release tool's own code.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from pants.backend.python.util_rules.interpreter_constraints import InterpreterConstraints
from pants.backend.python.util_rules.package_dists import SetupKwargs, SetupKwargsRequest
from pants.backend.python.util_rules.pex_environment import PythonExecutable
from pants.base.build_root import BuildRoot
from pants.core.goals.package import (
    BuiltPackage,
    BuiltPackageArtifact,
    EnvironmentAwarePackageRequest,
    PackageFieldSet,
)
from pants.core.util_rules.system_binaries import BinaryPathRequest, BinaryPaths
from pants.engine.addresses import UnparsedAddressInputs
from pants.engine.env_vars import EnvironmentVars, EnvironmentVarsRequest
from pants.engine.fs import (
    AddPrefix,
    Digest,
    MergeDigests,
    RemovePrefix,
)
from pants.engine.process import Process, ProcessCacheScope, ProcessResult
from pants.engine.rules import Get, MultiGet, collect_rules, rule
from pants.engine.target import (
    COMMON_TARGET_FIELDS,
    Dependencies,
    DictStringToStringField,
    HydratedSources,
    HydrateSourcesRequest,
    SourcesField,
    StringSequenceField,
    TransitiveTargets,
    TransitiveTargetsRequest,
    FieldSetsPerTarget,
    FieldSetsPerTargetRequest,
    SpecialCasedDependencies,
    StringField,
    Target,
    Targets,
)
from pants.engine.unions import UnionRule
from pants.option.option_types import StrListOption
from pants.option.subsystem import Subsystem
from pants.util.frozendict import FrozenDict
from pants.util.logging import LogLevel

logger = logging.getLogger(__name__)

RELEASE_TOOL = "src/python/batteryop/release:release-tool"
VERSIONED_DISTRIBUTIONS = ("src:battery-operator-client",)
PYTHON = ("CPython==3.11.*",)
MISSING_BUILDAH = (
    "buildah not found: images and the release manifests are skipped "
    "(install Debian's buildah: apt-get install buildah)"
)
PASSED_ENV = ("HOME", "PATH", "BATTERYOP_CACHE", "BATTERYOP_THIRD_PARTY", "SOURCE_DATE_EPOCH")


class ImageRepositoryField(StringField):
    alias = "repository"
    required = True
    help = "The image's name: `battery-operator` is the registry root, others sit beside it."


class ImageBinariesField(DictStringToStringField):
    alias = "binaries"
    required = True
    help = "Debian architecture (amd64, arm64) → the address of that architecture's pex_binary."


class OciImageTarget(Target):
    alias = "oci_image"
    core_fields = (*COMMON_TARGET_FIELDS, ImageRepositoryField, ImageBinariesField)
    help = "A deployable's multi-architecture OCI image (an OCI layout in dist/images/)."


class GuestImageKindField(StringField):
    alias = "kind"
    required = True
    valid_choices = ("kernel", "rootfs")
    help = "Which guest image: the kernel (boot/vmlinux) or the root filesystem."


class GuestImageArchitecturesField(StringSequenceField):
    alias = "architectures"
    default = None
    help = "The Debian architectures the index holds (default: `[guest-images].architectures`)."


class GuestImagesSubsystem(Subsystem):
    options_scope = "guest-images"
    help = "The guest images (`guest_image` targets)."

    architectures = StrListOption(
        default=["amd64", "arm64"],
        help=(
            "The Debian architectures a guest image holds unless its target says. A cold arm64 "
            "kernel build takes many minutes of two cores: CI (pants.ci.toml) builds amd64 only."
        ),
    )


class GuestImageTarget(Target):
    alias = "guest_image"
    core_fields = (
        *COMMON_TARGET_FIELDS,
        ImageRepositoryField,
        GuestImageKindField,
        GuestImageArchitecturesField,
        Dependencies,
    )
    help = "A guest kernel or root filesystem image (an OCI layout in dist/images/)."


class ReleaseImagesField(SpecialCasedDependencies):
    alias = "images"
    help = "The oci_image targets whose digests install.yaml pins."


class ReleaseGuestImagesField(SpecialCasedDependencies):
    alias = "guest_images"
    help = "The guest_image targets whose digests the sample Pool (samples.yaml, chart) pins."


class ReleaseManifestsTarget(Target):
    alias = "release_manifests"
    core_fields = (*COMMON_TARGET_FIELDS, ReleaseImagesField, ReleaseGuestImagesField)
    help = "install.yaml pinned by digest and the Flux artifact (dist/release/)."


@dataclass(frozen=True)
class OciImageFieldSet(PackageFieldSet):
    required_fields = (ImageRepositoryField, ImageBinariesField)
    repository: ImageRepositoryField
    binaries: ImageBinariesField


@dataclass(frozen=True)
class GuestImageFieldSet(PackageFieldSet):
    required_fields = (ImageRepositoryField, GuestImageKindField)
    repository: ImageRepositoryField
    kind: GuestImageKindField
    architectures: GuestImageArchitecturesField


@dataclass(frozen=True)
class ReleaseManifestsFieldSet(PackageFieldSet):
    required_fields = (ReleaseImagesField,)
    images: ReleaseImagesField
    guest_images: ReleaseGuestImagesField


@dataclass(frozen=True)
class ReleaseTool:
    """The release tool's PEX, the interpreter that runs it, and the process environment."""

    digest: Digest
    argv: tuple[str, ...]
    env: FrozenDict[str, str]
    buildah: bool


@dataclass(frozen=True)
class ReleaseVersion:
    json: str
    image_tag: str


async def _package(address_specs: tuple[str, ...], owner, origin: str) -> tuple[BuiltPackage, ...]:
    targets = await Get(
        Targets,
        UnparsedAddressInputs(address_specs, owning_address=owner, description_of_origin=origin),
    )
    field_sets = await Get(FieldSetsPerTarget, FieldSetsPerTargetRequest(PackageFieldSet, targets))
    return await MultiGet(
        Get(BuiltPackage, EnvironmentAwarePackageRequest(fs)) for fs in field_sets.field_sets
    )


@rule(desc="Prepare the release tool")
async def release_tool() -> ReleaseTool:
    (built,) = await _package((RELEASE_TOOL,), None, "the release plugin")
    python, buildah, env = await MultiGet(
        Get(PythonExecutable, InterpreterConstraints(PYTHON)),
        Get(
            BinaryPaths,
            BinaryPathRequest(
                binary_name="buildah", search_path=("/usr/bin", "/usr/local/bin", "/bin")
            ),
        ),
        Get(EnvironmentVars, EnvironmentVarsRequest(PASSED_ENV)),
    )
    (artifact,) = built.artifacts
    assert artifact.relpath is not None
    process_env = {k: v for k, v in env.items() if v}
    process_env.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
    if "HOME" in process_env:
        process_env.setdefault("PEX_ROOT", process_env["HOME"] + "/.cache/batteryop/pex_root")
    return ReleaseTool(
        digest=built.digest,
        argv=(python.path, artifact.relpath),
        env=FrozenDict(process_env),
        buildah=buildah.first_path is not None,
    )


async def _image_package(repository: str, result: ProcessResult, out: str) -> BuiltPackage:
    """The release tool's OCI layout in `out` as `dist/images/<repository>/`, summarised from
    the JSON line it printed last (tag, digest, compressed size per architecture)."""
    summary = json.loads(result.stdout.decode().strip().splitlines()[-1])
    sizes = ", ".join(f"{a} {s / 1e6:.1f} MB" for a, s in sorted(summary["sizes"].items()))
    line = f"{repository}:{summary['tag']}@{summary['digest']} (compressed: {sizes})"
    relpath = f"images/{repository}"
    digest = await Get(
        Digest, AddPrefix(await Get(Digest, RemovePrefix(result.output_digest, out)), relpath)
    )
    return BuiltPackage(digest, (BuiltPackageArtifact(relpath, (line,)),))


@rule(desc="Read the release version from git")
async def release_version(tool: ReleaseTool, build_root: BuildRoot) -> ReleaseVersion:
    result = await Get(
        ProcessResult,
        Process(
            argv=(*tool.argv, "version", "--repo", build_root.path),
            input_digest=tool.digest,
            env=tool.env,
            description="git: the release version",
            # Never reuse an answer from an earlier session: HEAD moves.
            cache_scope=ProcessCacheScope.PER_SESSION,
        ),
    )
    text = result.stdout.decode().strip()
    return ReleaseVersion(json=text, image_tag=json.loads(text)["image_tag"])


@rule(desc="Build a multi-architecture OCI image", level=LogLevel.DEBUG)
async def package_oci_image(field_set: OciImageFieldSet, tool: ReleaseTool) -> BuiltPackage:
    repository = field_set.repository.value
    if not tool.buildah:
        logger.warning(MISSING_BUILDAH)
        return BuiltPackage(await Get(Digest, MergeDigests(())), ())
    version = await Get(ReleaseVersion, ReleaseTool, tool)
    binaries = sorted((field_set.binaries.value or {}).items())
    built = await MultiGet(
        Get(
            BuiltPackage,
            EnvironmentAwarePackageRequest(fs),
        )
        for fs in (
            await Get(
                FieldSetsPerTarget,
                FieldSetsPerTargetRequest(
                    PackageFieldSet,
                    await Get(
                        Targets,
                        UnparsedAddressInputs(
                            [address for _, address in binaries],
                            owning_address=field_set.address,
                            description_of_origin=f"the `binaries` of {field_set.address}",
                        ),
                    ),
                ),
            )
        ).field_sets
    )
    pex_args = []
    for (arch, _), package in zip(binaries, built):  # noqa: B905 (Pants runs Python 3.9)
        (artifact,) = package.artifacts
        pex_args += ["--pex", f"{arch}={artifact.relpath}"]
    out = "out"
    result = await Get(
        ProcessResult,
        Process(
            argv=(
                *tool.argv, "image", "--name", repository, *pex_args,
                "--version-json", version.json, "--out", out, "--work", ".",
            ),  # fmt: skip
            input_digest=await Get(Digest, MergeDigests((tool.digest, *(p.digest for p in built)))),
            env=tool.env,
            output_directories=(out,),
            description=f"Build the {repository} image ({', '.join(a for a, _ in binaries)})",
            level=LogLevel.INFO,
        ),
    )
    return await _image_package(repository, result, out)


@rule(desc="Build a guest image", level=LogLevel.DEBUG)
async def package_guest_image(
    field_set: GuestImageFieldSet,
    tool: ReleaseTool,
    build_root: BuildRoot,
    subsystem: GuestImagesSubsystem,
) -> BuiltPackage:
    repository = field_set.repository.value
    if not tool.buildah:
        logger.warning(MISSING_BUILDAH)
        return BuiltPackage(await Get(Digest, MergeDigests(())), ())
    version = await Get(ReleaseVersion, ReleaseTool, tool)
    # The definition (src/images/guest) at the paths the release tool reads.
    transitive = await Get(TransitiveTargets, TransitiveTargetsRequest([field_set.address]))
    sources = await MultiGet(
        Get(HydratedSources, HydrateSourcesRequest(t[SourcesField]))
        for t in transitive.dependencies
        if t.has_field(SourcesField)
    )
    architectures = tuple(field_set.architectures.value or subsystem.architectures)
    env = dict(tool.env)
    env.setdefault("BATTERYOP_THIRD_PARTY", f"{build_root.path}/../shared/third_party")
    out = "out"
    result = await Get(
        ProcessResult,
        Process(
            argv=(
                *tool.argv, "guest-image", "--kind", field_set.kind.value or "",
                *(a for arch in architectures for a in ("--arch", arch)),
                "--version-json", version.json, "--out", out,
            ),  # fmt: skip
            input_digest=await Get(
                Digest, MergeDigests((tool.digest, *(s.snapshot.digest for s in sources)))
            ),
            env=FrozenDict(env),
            output_directories=(out,),
            description=f"Build the {repository} image ({', '.join(architectures)})",
            level=LogLevel.INFO,
        ),
    )
    return await _image_package(repository, result, out)


@rule(desc="Render install.yaml pinned by digest and the Manifests artifact", level=LogLevel.DEBUG)
async def package_release_manifests(
    field_set: ReleaseManifestsFieldSet, tool: ReleaseTool
) -> BuiltPackage:
    if not tool.buildah:
        logger.warning(MISSING_BUILDAH)
        return BuiltPackage(await Get(Digest, MergeDigests(())), ())
    version = await Get(ReleaseVersion, ReleaseTool, tool)
    targets, guest_targets = await MultiGet(
        Get(
            Targets,
            UnparsedAddressInputs(
                field.value or (),
                owning_address=field_set.address,
                description_of_origin=f"the `{field.alias}` of {field_set.address}",
            ),
        )
        for field in (field_set.images, field_set.guest_images)
    )
    images = [t for t in targets if t.has_field(ImageRepositoryField)]
    guests = [t for t in guest_targets if t.has_field(GuestImageKindField)]
    built = await MultiGet(
        *(
            Get(BuiltPackage, EnvironmentAwarePackageRequest(OciImageFieldSet.create(t)))
            for t in images
        ),
        *(
            Get(BuiltPackage, EnvironmentAwarePackageRequest(GuestImageFieldSet.create(t)))
            for t in guests
        ),
    )
    image_args = []
    flags = ["--image"] * len(images) + ["--guest-image"] * len(guests)
    for flag, target, package in zip(flags, [*images, *guests], built):  # noqa: B905
        (artifact,) = package.artifacts
        image_args += [flag, f"{target[ImageRepositoryField].value}={artifact.relpath}"]
    out = "release"
    result = await Get(
        ProcessResult,
        Process(
            argv=(
                *tool.argv,
                "manifests",
                *image_args,
                "--version-json",
                version.json,
                "--out",
                out,
            ),
            input_digest=await Get(Digest, MergeDigests((tool.digest, *(p.digest for p in built)))),
            env=tool.env,
            output_directories=(out,),
            description="Render install.yaml and the Manifests artifact",
        ),
    )
    summary = json.loads(result.stdout.decode().strip().splitlines()[-1])
    lines = [
        f"manifests:{summary['tag']}@{summary['manifests']}",
        f"chart:{summary['chart']} (battery-operator-<version>.tgz and chart/)",
        "samples.yaml: the sample Pool on the guest images, and a claim",
    ]
    if summary["unpinned"]:
        lines.append(f"not built, named by tag only: {', '.join(summary['unpinned'])}")
    return BuiltPackage(result.output_digest, (BuiltPackageArtifact(out, tuple(lines)),))


class VersionFromGitRequest(SetupKwargsRequest):
    """The client distribution's version comes from git (DP-106), not from its BUILD file."""

    @classmethod
    def is_applicable(cls, target: Target) -> bool:
        return target.address.spec in VERSIONED_DISTRIBUTIONS


@rule(desc="Version a distribution from git")
async def version_from_git(request: VersionFromGitRequest, tool: ReleaseTool) -> SetupKwargs:
    version = await Get(ReleaseVersion, ReleaseTool, tool)
    kwargs = {**request.explicit_kwargs, "version": json.loads(version.json)["python"]}
    return SetupKwargs(kwargs, address=request.target.address)


def target_types():
    return [OciImageTarget, GuestImageTarget, ReleaseManifestsTarget]


def rules():
    return [
        *collect_rules(),
        *GuestImagesSubsystem.rules(),
        UnionRule(PackageFieldSet, OciImageFieldSet),
        UnionRule(PackageFieldSet, GuestImageFieldSet),
        UnionRule(PackageFieldSet, ReleaseManifestsFieldSet),
        UnionRule(SetupKwargsRequest, VersionFromGitRequest),
    ]
