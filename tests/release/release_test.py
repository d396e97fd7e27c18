"""The release end to end, from what `./pants package ::` built (the runtime packages of
this test): images, install.yaml pinned by digest, the Manifests artifact.

- every image is an OCI index of linux/amd64 and linux/arm64, non-root, without a shell, with
  the OCI labels (DP-103); sizes are printed;
- a second build of the operator image from the same inputs has the same digest (DP-104);
- the amd64 image's root filesystem runs each deployable's `--help` under chroot, and the
  operator's, run the same way against the test control plane, binds a claim;
- the arm64 image's root filesystem runs each deployable's `--help` the same way, its programs
  under QEMU's user-mode emulator (Debian's qemu-user-static), timed (DP-103);
- a real registry (Debian's docker-registry) on loopback takes every image and the Manifests
  artifact, and skopeo (a tool we did not write) pulls them back with unchanged digests;
- Flux's own OCI library (`github.com/fluxcd/pkg/oci`, what `flux pull artifact` calls) reads
  the Manifests artifact back from that registry, and refuses a plain image and a layer that is
  not a gzipped tarball; Flux's whole CLI does too when BATTERYOP_FLUX_CLI asks for it;
- install.yaml pins each image of ours by tag and digest (DP-032) and the test control plane
  accepts it;
- the Helm chart of the same images renders install.yaml with the pinned Helm, from its archive
  and, pushed as an OCI chart to the registry, from there (DP-115);
- the guest images (`src/images/guest:guest-kernel`, `:guest-rootfs`) round-trip through the
  registry too, and the release's sample Pool, `samples.yaml` and the chart's, names them by
  tag and digest (GI-034); the control plane accepts it. Their architectures are
  `[guest-images].architectures` (CI: amd64 only); with BATTERYOP_GUEST_ARM64=1 (the release
  check) both are required.

Where buildah is missing the images are not built and these tests skip, saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import tarfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from integration.stack import Stack, create_claim, ready_pool, wait_phase
from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient

from batteryop.api import names
from batteryop.manifests import render
from batteryop.release import chart, guest_kernel, guest_rootfs, images, main, oci
from batteryop.release import flux as artifact
from batteryop.release.version import Version
from batteryop.testing import certmanager, fluxcli, fluxoci, helmcli, oci_registry, qemu_user
from batteryop.testing.controlplane import ControlPlane, admin_client, install_crd
from batteryop.testing.fake_battery import FakeBattery
from batteryop.testing.localstack import (
    HOSTS,
    LocalStack,
    operator_kubeconfig,
    prepare_cluster,
    start_hosts,
)
from batteryop.testing.operator_runner import OperatorProcess

IMAGES = ("battery-operator", "exec-agent", "csr-approver", "host-registry")
GUEST_IMAGES = (guest_kernel.NAME, guest_rootfs.NAME)
IMAGE_DIR = Path("images")
RELEASE_DIR = Path("release")
OPERATOR_LIMIT = 60_000_000
"""The operator image's compressed size target, per architecture."""
SHELLS = ("bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash", "bin/dash", "usr/bin/dash")


@pytest.fixture(scope="module")
def layouts() -> dict[str, Path]:
    if not IMAGE_DIR.is_dir():
        pytest.skip(f"no images were built: {oci.MISSING_BUILDAH}")
    found = {name: IMAGE_DIR / name for name in IMAGES}
    missing = [n for n, p in found.items() if not (p / "index.json").is_file()]
    assert not missing, f"images not built: {missing}"
    return found


@pytest.fixture(scope="module")
def guest_layouts(layouts: dict[str, Path]) -> dict[str, Path]:
    found = {name: IMAGE_DIR / name for name in GUEST_IMAGES}
    missing = [n for n, p in found.items() if not (p / "index.json").is_file()]
    assert not missing, f"guest images not built: {missing}"
    return found


@pytest.fixture(scope="module")
def tag(layouts: dict[str, Path]) -> str:
    index = json.loads((layouts["battery-operator"] / "index.json").read_text())
    return str(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])


def image_config(layout: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    config = manifest["config"]
    assert isinstance(config, dict)
    return json.loads(oci.blob(layout, str(config["digest"])))  # type: ignore[no-any-return]


def layer_members(layout: Path, manifest: dict[str, Any]) -> Iterator[tarfile.TarInfo]:
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(oci.blob(layout, layer["digest"]))) as tar:
            yield from tar.getmembers()


@pytest.mark.req("DP-103")
@pytest.mark.parametrize("name", IMAGES)
def test_each_image_is_a_non_root_shell_free_index_of_amd64_and_arm64(
    layouts: dict[str, Path], tag: str, name: str
) -> None:
    layout = layouts[name]
    manifests = oci.platform_manifests(layout, tag)
    assert sorted(manifests) == ["amd64", "arm64"]
    sizes = {}
    for arch, manifest in manifests.items():
        config = image_config(layout, manifest)
        assert (config["architecture"], config["os"]) == (arch, "linux")
        assert config["config"]["User"] == "65532:65532"
        assert config["config"]["Entrypoint"] == [images.PYTHON, f"/app/{name}.pex"]
        labels = config["config"]["Labels"]
        assert labels["org.opencontainers.image.source"] == images.SOURCE_URL
        assert labels["org.opencontainers.image.version"] == tag
        assert len(labels["org.opencontainers.image.revision"]) == 40
        created = labels["org.opencontainers.image.created"]
        assert config["created"] == created
        datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ")
        names = {m.name.removeprefix("./") for m in layer_members(layout, manifest)}
        assert not names & set(SHELLS), f"{name}/{arch} ships a shell"
        assert f"app/{name}.pex" in names and "usr/bin/python3.11" in names
        assert "etc/ssl/certs/ca-certificates.crt" in names
        assert "usr/share/zoneinfo/Etc/UTC" in names
        sizes[arch] = oci.compressed_size(manifest)
    print(f"\n{name}:{tag}@{oci.index_digest(layout, tag)}")
    for arch, size in sorted(sizes.items()):
        print(f"  {arch}: {size / 1e6:.1f} MB compressed")
    if name == "battery-operator":
        assert max(sizes.values()) <= OPERATOR_LIMIT, sizes


@pytest.mark.req("DP-103")
def test_every_image_shares_its_architecture_s_base_layer(
    layouts: dict[str, Path], tag: str
) -> None:
    for arch in ("amd64", "arm64"):
        bases = {
            oci.platform_manifests(layout, tag)[arch]["layers"][0]["digest"]
            for layout in layouts.values()
        }
        assert len(bases) == 1, f"{arch}: {bases}"


@pytest.mark.req("DP-104")
def test_a_second_build_gives_the_same_digest(
    layouts: dict[str, Path], tag: str, tmp_path: Path
) -> None:
    layout = layouts["battery-operator"]
    labels = image_config(layout, oci.platform_manifests(layout, tag)["amd64"])["config"]["Labels"]
    created = datetime.strptime(
        labels["org.opencontainers.image.created"] + "+0000", "%Y-%m-%dT%H:%M:%SZ%z"
    )
    version = Version(
        python="",
        image_tag=tag,
        revision=labels["org.opencontainers.image.revision"],
        created=int(created.timestamp()),
    )
    pexes = {
        arch: Path("src.python.batteryop.release") / f"battery-operator-linux_{machine}.pex"
        for arch, machine in (("amd64", "x86_64"), ("arm64", "aarch64"))
    }
    started = time.monotonic()
    again = images.build("battery-operator", pexes, version, tmp_path / "again", work=tmp_path)
    first = oci.index_digest(layout, tag)
    print(f"\nfirst build:  {first}\nsecond build: {again} ({time.monotonic() - started:.0f} s)")
    assert again == first


def unpack_image(layout: Path, tag: str, arch: str, root: Path) -> tuple[list[str], dict[str, str]]:
    """The `arch` image's layers unpacked into `root`; the command (chroot as the image's
    user, then its entrypoint) and environment that run it as a runtime would. For a machine
    other than this one's, run the command under `qemu_user.command`."""
    manifest = oci.platform_manifests(layout, tag)[arch]
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(oci.blob(layout, layer["digest"]))) as tar:
            tar.extractall(root, filter="fully_trusted")
    config = image_config(layout, manifest)["config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    chroot = shutil.which("chroot") or "/usr/sbin/chroot"
    return [chroot, f"--userspec={config['User']}", str(root), *config["Entrypoint"]], env


OCI_DEFAULT_DEVICES = {
    "null": (1, 3),
    "zero": (1, 5),
    "full": (1, 7),
    "random": (1, 8),
    "urandom": (1, 9),
    "tty": (5, 0),
}
"""The character devices every OCI runtime gives a container's /dev (runtime-spec, "Default
Devices"). A bare chroot has none, and gRPC's core aborts without /dev/urandom."""


def add_runtime_devices(root: Path) -> None:
    """Make `root`'s /dev as a container runtime would, so a chroot runs like a container."""
    dev = root / "dev"
    dev.mkdir(exist_ok=True)
    for name, (major, minor) in OCI_DEFAULT_DEVICES.items():
        if not (dev / name).exists():
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
            (dev / name).chmod(0o666)


def image_user(command: list[str]) -> tuple[int, int]:
    """uid and gid of the `--userspec=uid:gid` in an `unpack_image` command."""
    spec = next(a for a in command if a.startswith("--userspec=")).split("=", 1)[1]
    uid, _, gid = spec.partition(":")
    return int(uid), int(gid or uid)


@pytest.mark.parametrize("name", IMAGES)
def test_the_amd64_root_filesystem_runs_the_deployable_help(
    layouts: dict[str, Path], tag: str, name: str, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    command, env = unpack_image(layouts[name], tag, "amd64", tmp_path / "root")
    proc = subprocess.run(
        [*command, "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("usage:"), proc.stdout[:500]


ARM64_TIMEOUT = 600
"""Seconds for one emulated `--help`: 22 to 40 s each measured on the shared 2-core machine at
a load average of 3 to 5 (TCG, 6 to 10 times amd64's), so this only stops a hang."""


@pytest.fixture(scope="module")
def _arm64_emulation() -> None:
    """Skips, saying why, where arm64 programs cannot run here: no qemu-aarch64-static (Debian's
    qemu-user-static), not root (chroot, and the namespace's map of users), or a kernel older
    than Linux 6.7 (no binfmt_misc of a user namespace's own)."""
    reason = qemu_user.unavailable("arm64")
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.req("DP-103")
@pytest.mark.usefixtures("_arm64_emulation")
@pytest.mark.parametrize("name", IMAGES)
def test_the_arm64_root_filesystem_runs_the_deployable_help_under_qemu_user(
    layouts: dict[str, Path], tag: str, name: str, tmp_path: Path
) -> None:
    """The arm64 image as an arm64 node would run it: its root filesystem, its entrypoint
    under chroot as the image's user, every aarch64 program of it (the image's Python, then
    the Python the PEX execs again after unzipping itself) run by qemu-aarch64-static through
    a binfmt_misc instance of the test's own (batteryop.testing.qemu_user: the host's
    binfmt_misc is not read or changed). No deployable has `--version`, so `--help`: each main
    module imports its dependencies first, so this loads the aarch64 native extensions (grpc's
    cygrpc, cryptography's, aiohttp's, PyYAML's, as it uses them) before argparse prints the
    usage. A PEX with another machine's wheels, or a Python that cannot start, fails here."""
    command, env = unpack_image(layouts[name], tag, "arm64", tmp_path / "root")
    # `env -i`: the image's environment for the chroot, not the helper's (a PYTHONPATH).
    emulated, helper_env = qemu_user.command(
        "arm64", ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *command, "--help"]
    )
    started = time.monotonic()
    proc = subprocess.Popen(
        emulated,
        env=helper_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # on a timeout the whole tree is killed, emulator included
    )
    try:
        out, err = proc.communicate(timeout=ARM64_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"arm64 {name} --help under qemu-user ran over {ARM64_TIMEOUT} s")
    elapsed = time.monotonic() - started
    print(f"\narm64 {name} --help under qemu-user: {elapsed:.1f} s")
    assert proc.returncode == 0, err[-2000:]
    assert out.startswith("usage:"), out[:500]


async def test_the_operator_image_binds_a_claim_against_the_control_plane(
    layouts: dict[str, Path], tag: str, controlplane: ControlPlane, tmp_path: Path
) -> None:
    """The operator as the release ships it: the amd64 image's root filesystem, its
    entrypoint run under chroot as the image's non-root user, against the test control plane
    (RBAC as install.yaml grants it, a ServiceAccount token) and the fake battery on
    loopback. It must make the demo Pool Ready and bind a claim."""
    if os.geteuid() != 0:
        pytest.skip("chroot needs root")
    root = tmp_path / "root"
    command, env = unpack_image(layouts["battery-operator"], tag, "amd64", root)
    add_runtime_devices(root)
    prepare_cluster(controlplane)
    # The kubeconfig inside the root filesystem, readable by the image's user only.
    inside = Path("/etc/battery-operator/kubeconfig")
    kubeconfig = root / inside.relative_to("/")
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    operator_kubeconfig(controlplane, kubeconfig)
    os.chown(kubeconfig, *image_user(command))
    namespace = "release-image"
    api = admin_client(controlplane)
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))
    async with contextlib.AsyncExitStack() as exit_stack:
        exit_stack.callback(api.close)
        flintlocks = await start_hosts(exit_stack, HOSTS)
        battery = await exit_stack.enter_async_context(
            FakeBattery.start(hosts={name: h.target for name, h in flintlocks.items()})
        )
        operator = await exit_stack.enter_async_context(
            OperatorProcess.start(
                kubeconfig=inside, battery_target=battery.target, command=(command, env)
            )
        )
        local = LocalStack(controlplane, battery, flintlocks, operator, kubeconfig, exit_stack)
        stack = Stack(local, api)
        await asyncio.to_thread(ready_pool, stack, namespace)
        create_claim(stack, namespace, "from-the-image")
        bound = await asyncio.to_thread(wait_phase, stack, namespace, "from-the-image", "Bound")
        assert bound["status"]["leaseID"] in {
            lease.lease_id for lease in battery.store.leases.values()
        }
        print(
            f"\noperator from the image bound {bound['metadata']['name']}: {bound['status']['leaseID']}"
        )


# --- a real registry on loopback -------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not oci_registry.have_registry():
        pytest.skip(oci_registry.MISSING_REGISTRY)
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is not installed (apt-get install skopeo)")
    with oci_registry.loopback_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address


def skopeo(*args: str) -> str:
    proc = subprocess.run(["skopeo", *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"skopeo {' '.join(args[:2])}: {proc.stderr[-1500:]}"
    return proc.stdout


def push_and_pull(layout: Path, tag: str, ref: str, back: Path) -> tuple[str, str]:
    """Push the layout's `tag` to `ref`, read the registry's manifest, pull it back."""
    skopeo(
        "copy", "--all", "--preserve-digests", "--dest-tls-verify=false",
        f"oci:{layout}:{tag}", f"docker://{ref}",
    )  # fmt: skip
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
        capture_output=True,
        check=True,
    ).stdout
    skopeo("copy", "--all", "--src-tls-verify=false", f"docker://{ref}", f"oci:{back}:{tag}")
    return "sha256:" + hashlib.sha256(raw).hexdigest(), oci.index_digest(back, tag)


@pytest.mark.req("DP-104")
@pytest.mark.parametrize("name", IMAGES + GUEST_IMAGES)
def test_an_image_round_trips_through_a_real_registry_unchanged(
    layouts: dict[str, Path],
    guest_layouts: dict[str, Path],
    tag: str,
    registry: str,
    name: str,
    tmp_path: Path,
) -> None:
    layout = {**layouts, **guest_layouts}[name]
    digest = oci.index_digest(layout, tag)
    ref = f"{registry}/{name}:{tag}"
    served, pulled = push_and_pull(layout, tag, ref, tmp_path / "back")
    print(f"\n{ref}: pushed {digest}, served {served}, pulled {pulled}")
    assert served == digest == pulled


@pytest.mark.req("DP-031", "DP-033", "DP-034")
def test_the_manifests_artifact_round_trips_through_a_real_registry(
    layouts: dict[str, Path], tag: str, registry: str, tmp_path: Path
) -> None:
    layout = RELEASE_DIR / main.MANIFESTS_NAME
    digest = oci.index_digest(layout, tag)
    ref = f"{registry}/manifests:{tag}"
    served, pulled = push_and_pull(layout, tag, ref, tmp_path / "back")
    assert served == digest == pulled
    manifest = json.loads(oci.blob(tmp_path / "back", pulled))
    assert manifest["config"]["mediaType"] == artifact.CONFIG_MEDIA_TYPE
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == artifact.LAYER_MEDIA_TYPE
    revision = manifest["annotations"][artifact.REVISION_ANNOTATION]
    assert revision.startswith(f"{tag}@sha1:") and len(revision.split(":")[-1]) == 40
    assert manifest["annotations"][artifact.SOURCE_ANNOTATION] == images.SOURCE_URL
    content = gzip.decompress(oci.blob(tmp_path / "back", layer["digest"]))
    with tarfile.open(fileobj=io.BytesIO(content)) as tar:
        assert tar.getnames() == [artifact.FILE_NAME]
        member = tar.extractfile(artifact.FILE_NAME)
        assert member is not None
        assert member.read() == (RELEASE_DIR / artifact.FILE_NAME).read_bytes()


# --- install.yaml ----------------------------------------------------------------------------


def containers(objects: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []):
            out[container["name"]] = container["image"]
    return out


@pytest.fixture(scope="module")
def install_objects(layouts: dict[str, Path]) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all((RELEASE_DIR / "install.yaml").read_text()) if o]


@pytest.mark.req("DP-032")
def test_install_yaml_pins_every_built_image_by_tag_and_digest(
    layouts: dict[str, Path], tag: str, install_objects: list[dict[str, Any]]
) -> None:
    images_in_yaml = containers(install_objects)
    digests = {name: oci.index_digest(layout, tag) for name, layout in layouts.items()}
    assert images_in_yaml[render.OPERATOR_CONTAINER] == main.pinned(
        "battery-operator", tag, digests["battery-operator"]
    )
    assert main.pinned("exec-agent", tag, digests["exec-agent"]) in images_in_yaml.values()
    assert images_in_yaml[render.BATTERY_CONTAINER] == render.BATTERY_IMAGE
    listed = (RELEASE_DIR / "digests.txt").read_text().splitlines()
    for name, digest in digests.items():
        assert main.pinned(name, tag, digest) in listed
    print("\n" + "\n".join(f"{name}: {image}" for name, image in sorted(images_in_yaml.items())))


def apply_strictly(dyn: DynamicClient, obj: dict[str, Any], namespace: str | None = None) -> None:
    """Server-side apply, refusing any field the API server does not know."""
    resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    dyn.server_side_apply(
        resource,
        body=obj,
        namespace=namespace,
        field_manager="batteryop-release-test",
        force_conflicts=True,
        query_params=[("fieldValidation", "Strict")],
    )


@pytest.mark.req("DP-032")
def test_the_control_plane_accepts_the_release_install_yaml(
    controlplane: ControlPlane, install_objects: list[dict[str, Any]]
) -> None:
    api = admin_client(controlplane)
    try:
        certmanager.install_crds(api)  # cert-manager first, as docs/install.md asks
        dyn = DynamicClient(api)
        for obj in install_objects:
            apply_strictly(dyn, obj)
            if obj["kind"] == "CustomResourceDefinition":
                install_crd(api, obj)
        deployment = k8s.AppsV1Api(api).read_namespaced_deployment(
            names.OPERATOR_DEPLOYMENT, names.OPERATOR_NAMESPACE
        )
        stored = {c.name: c.image for c in deployment.spec.template.spec.containers}
        assert (
            stored == {k: v for k, v in containers(install_objects).items() if k in stored}
            and "@sha256:" in stored[render.OPERATOR_CONTAINER]
        )
    finally:
        api.close()


# --- the sample Pool on the guest images ---------------------------------------------------


@pytest.fixture(scope="module")
def sample_objects(guest_layouts: dict[str, Path]) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all((RELEASE_DIR / main.SAMPLES_FILE).read_text()) if o]


def pool_images(pool: dict[str, Any]) -> tuple[str, str]:
    template = pool["spec"]["template"]
    return template["kernel"]["image"], template["rootVolume"]["containerSource"]


@pytest.mark.req("GI-030", "GI-034")
def test_the_sample_pool_pins_the_release_s_guest_images_by_tag_and_digest(
    guest_layouts: dict[str, Path], tag: str, sample_objects: list[dict[str, Any]]
) -> None:
    digests = {name: oci.index_digest(layout, tag) for name, layout in guest_layouts.items()}
    (pool,) = (o for o in sample_objects if o["kind"] == names.POOL_KIND)
    assert pool_images(pool) == (
        main.pinned(guest_kernel.NAME, tag, digests[guest_kernel.NAME]),
        main.pinned(guest_rootfs.NAME, tag, digests[guest_rootfs.NAME]),
    )
    listed = (RELEASE_DIR / "digests.txt").read_text().splitlines()
    assert all(main.pinned(n, tag, d) in listed for n, d in digests.items())
    required = {"amd64", "arm64"} if os.environ.get("BATTERYOP_GUEST_ARM64") == "1" else {"amd64"}
    for name, layout in guest_layouts.items():
        manifests = oci.platform_manifests(layout, tag)
        assert required <= set(manifests), f"{name}: {sorted(manifests)}"
        sizes = ", ".join(
            f"{arch} {oci.compressed_size(m) / 1e6:.1f} MB" for arch, m in sorted(manifests.items())
        )
        print(f"\n{main.pinned(name, tag, digests[name])} ({sizes})")


@pytest.mark.req("GI-034")
def test_the_control_plane_accepts_the_release_samples(
    controlplane: ControlPlane, sample_objects: list[dict[str, Any]]
) -> None:
    api = admin_client(controlplane)
    namespace = "release-samples"
    try:
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        dyn = DynamicClient(api)
        for obj in sample_objects:
            apply_strictly(dyn, obj, namespace)
        pool = dyn.resources.get(api_version=names.API_VERSION, kind=names.POOL_KIND).get(
            name=sample_objects[0]["metadata"]["name"], namespace=namespace
        )
        assert "@sha256:" in pool.spec.template.kernel.image
        assert "@sha256:" in pool.spec.template.rootVolume.containerSource
    finally:
        api.close()


@pytest.fixture(scope="module")
def flux_oci() -> Path:
    """Flux's OCI library (`github.com/fluxcd/pkg/oci`, what `flux pull artifact` calls) in a
    tiny command built from the pin in 3rdparty/go/fluxoci, once per pin (cached)."""
    started = time.monotonic()
    binary = fluxoci.fluxoci_binary()
    print(f"\nfluxoci ready in {time.monotonic() - started:.0f} s: {binary}")
    return binary


def push_artifact(layout: Path, tag: str, ref: str) -> None:
    skopeo(
        "copy", "--preserve-digests", "--dest-tls-verify=false",
        f"oci:{layout}:{tag}", f"docker://{ref}",
    )  # fmt: skip


@pytest.mark.req("DP-031", "DP-033", "DP-034")
def test_fluxs_oci_library_reads_the_manifests_artifact_back(
    layouts: dict[str, Path], tag: str, registry: str, flux_oci: Path, tmp_path: Path
) -> None:
    layout = RELEASE_DIR / main.MANIFESTS_NAME
    repository = f"{registry}/manifests-fluxoci"
    push_artifact(layout, tag, f"{repository}:{tag}")
    out = tmp_path / "pulled"
    out.mkdir()
    pulled = fluxoci.pull(flux_oci, f"{repository}:{tag}", out)
    print(f"\n{pulled}")
    assert pulled.returncode == 0, pulled.error
    assert sorted(p.name for p in out.iterdir()) == [artifact.FILE_NAME]
    assert (out / artifact.FILE_NAME).read_bytes() == (
        RELEASE_DIR / artifact.FILE_NAME
    ).read_bytes()
    # The metadata as Flux's library reads it from the manifest's annotations (DP-034).
    manifest = json.loads(oci.blob(layout, oci.index_digest(layout, tag)))
    assert pulled.metadata is not None
    assert pulled.metadata["digest"] == f"{repository}@{oci.index_digest(layout, tag)}"
    assert pulled.metadata["source_url"] == images.SOURCE_URL
    assert (
        pulled.metadata["source_revision"] == manifest["annotations"][artifact.REVISION_ANNOTATION]
    )
    assert pulled.metadata["source_revision"].startswith(f"{tag}@sha1:")


@pytest.mark.req("DP-033")
def test_fluxs_oci_library_refuses_a_plain_image(
    layouts: dict[str, Path], tag: str, registry: str, flux_oci: Path, tmp_path: Path
) -> None:
    """The operator image is no Flux artifact: as pushed (an index of two images) and as its
    one amd64 image (an image config, layers of root filesystems), it is refused and nothing
    is extracted."""
    index_ref = f"{registry}/plain:{tag}"
    skopeo(
        "copy", "--all", "--dest-tls-verify=false",
        f"oci:{layouts['battery-operator']}:{tag}", f"docker://{index_ref}",
    )  # fmt: skip
    image_ref = f"{registry}/plain-amd64:{tag}"
    skopeo(
        "copy", "--override-arch", "amd64", "--override-os", "linux",
        "--src-tls-verify=false", "--dest-tls-verify=false",
        f"docker://{index_ref}", f"docker://{image_ref}",
    )  # fmt: skip
    for ref, cause in (
        (index_ref, "is an image index"),
        (image_ref, f'", want "{artifact.CONFIG_MEDIA_TYPE}"'),
    ):
        out = tmp_path / ref.rsplit("/", 1)[1].replace(":", "-")
        out.mkdir()
        pulled = fluxoci.pull(flux_oci, ref, out)
        print(f"\n{ref}: {pulled}")
        assert pulled.returncode == 1 and cause in pulled.error, pulled
        assert list(out.iterdir()) == []


@pytest.mark.req("DP-031", "DP-033")
def test_fluxs_oci_library_refuses_a_layer_that_is_not_a_gzipped_tarball(
    layouts: dict[str, Path],
    tag: str,
    registry: str,
    flux_oci: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Flux's media types on a layer holding install.yaml itself, not a gzipped tar of it:
    the library's extraction refuses it."""
    monkeypatch.setattr(artifact, "layer", lambda install_yaml, mtime: install_yaml)
    layout = tmp_path / "bare"
    artifact.write_layout(
        layout,
        (RELEASE_DIR / artifact.FILE_NAME).read_bytes(),
        tag=tag,
        source=images.SOURCE_URL,
        revision=f"{tag}@sha1:{'0' * 40}",
        created="2026-01-01T00:00:00Z",
        mtime=0,
    )
    ref = f"{registry}/manifests-bare:{tag}"
    push_artifact(layout, tag, ref)
    out = tmp_path / "pulled"
    out.mkdir()
    pulled = fluxoci.pull(flux_oci, ref, out)
    print(f"\n{pulled}")
    assert pulled.returncode == 1 and "gzip" in pulled.error, pulled
    assert not (out / artifact.FILE_NAME).exists()


@pytest.fixture(scope="module")
def flux_cli() -> Path:
    """Flux's CLI: BATTERYOP_FLUX_CLI names a binary, or is `build` to build it from the pin.

    Not built by default: its cold Go build took far more than the release tests' CI budget
    on the shared 2-core machine (see docs/releasing.md).
    """
    choice = os.environ.get(fluxcli.CHOICE, "")
    if not choice:
        pytest.skip(f"{fluxcli.CHOICE} is unset: set it to a flux binary, or to `build`")
    if choice != "build":
        return Path(choice)
    started = time.monotonic()
    binary = fluxcli.flux_binary()
    print(f"\nflux CLI ready in {time.monotonic() - started:.0f} s: {binary}")
    return binary


@pytest.mark.req("DP-031", "DP-033")
def test_flux_pull_artifact_accepts_the_manifests_artifact(
    layouts: dict[str, Path], tag: str, registry: str, flux_cli: Path, tmp_path: Path
) -> None:
    layout = RELEASE_DIR / main.MANIFESTS_NAME
    ref = f"{registry}/manifests-flux:{tag}"
    skopeo(
        "copy", "--preserve-digests", "--dest-tls-verify=false",
        f"oci:{layout}:{tag}", f"docker://{ref}",
    )  # fmt: skip
    out = tmp_path / "pulled"
    proc = subprocess.run(
        [str(flux_cli), "pull", "artifact", f"oci://{ref}", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [artifact.FILE_NAME]
    assert (out / artifact.FILE_NAME).read_bytes() == (
        RELEASE_DIR / artifact.FILE_NAME
    ).read_bytes()


# --- the Helm chart (DP-115) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> Path:
    return helmcli.ready_helm()


def canonical(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(o, sort_keys=True) for o in objects)


def helm_objects(helm: Path, *args: str) -> list[dict[str, Any]]:
    proc = helmcli.run(helm, "template", "battery-operator", *args)
    assert proc.returncode == 0, proc.stderr
    return [o for o in yaml.safe_load_all(proc.stdout) if o]


@pytest.mark.req("DP-115", "GI-034")
def test_the_release_chart_renders_the_release_install_yaml(
    layouts: dict[str, Path],
    helm: Path,
    install_objects: list[dict[str, Any]],
    sample_objects: list[dict[str, Any]],
) -> None:
    (archive,) = RELEASE_DIR.glob("battery-operator-*.tgz")
    print(f"\n{archive.name}: {archive.stat().st_size} bytes")
    assert canonical(helm_objects(helm, str(archive))) == canonical(install_objects)
    assert "@sha256:" in containers(helm_objects(helm, str(archive)))[render.OPERATOR_CONTAINER]
    # Its sample Pool, when turned on, is samples.yaml's, in the release's namespace.
    with_samples = helm_objects(helm, str(archive), "--set", "samples.enabled=true")
    (pool,) = (o for o in with_samples if o["kind"] == names.POOL_KIND)
    assert pool_images(pool) == pool_images(sample_objects[0])


@pytest.mark.req("DP-104", "DP-115")
def test_helm_renders_the_oci_chart_from_a_real_registry(
    layouts: dict[str, Path],
    registry: str,
    helm: Path,
    install_objects: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    layout = RELEASE_DIR / main.CHART_NAME
    index = json.loads((layout / "index.json").read_text())
    version = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
    repository = f"{registry}/{chart.REPOSITORY}"
    served, pulled = push_and_pull(layout, version, f"{repository}:{version}", tmp_path / "back")
    assert served == oci.index_digest(layout, version) == pulled
    listed = (RELEASE_DIR / "digests.txt").read_text().splitlines()
    assert f"{main.image_repository(chart.REPOSITORY)}:{version}@{served}" in listed
    got = helm_objects(helm, f"oci://{repository}", "--version", version, "--plain-http")
    assert canonical(got) == canonical(install_objects)
