"""The Host Image's files as the real Nodes run them (`parts`): containerd's config.toml with
this machine's changes only, and the kubelet's command line from the unit's drop-in."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from batteryop.testing.kubenode import parts
from batteryop.testing.kubenode.parts import CRI_IMAGES, CRI_RUNTIME


def image_config() -> dict:
    return tomllib.loads((parts.find_definition() / parts.CONTAINERD_CONFIG).read_text())


@pytest.mark.req("TD-118")
def test_containerd_runs_the_images_config_with_this_machines_changes_only(
    tmp_path: Path,
) -> None:
    image = image_config()
    config = parts.containerd_config(image, tmp_path, tmp_path / "net.d", tmp_path / "certs.d")
    # What a cluster of several Nodes on one machine needs: own folders and socket.
    assert config["root"] == str(tmp_path / "root") != image["root"]
    assert config["state"] == str(tmp_path / "state") != image["state"]
    assert config["grpc"]["address"] == str(tmp_path / "containerd.sock")
    # DEFINITION_ONLY: taken out, each with its reason.
    runtime = config["plugins"][CRI_RUNTIME]
    assert "enable_selinux" in image["plugins"][CRI_RUNTIME]
    assert "enable_selinux" not in runtime
    assert "SystemdCgroup" not in runtime["containerd"]["runtimes"]["runc"]["options"]
    assert "io.containerd.snapshotter.v1.devmapper" in image["plugins"]
    assert "io.containerd.snapshotter.v1.devmapper" not in config["plugins"]
    # Kept from the image: the version and the registry configuration's place (per Node).
    assert config["version"] == image["version"] == 3
    assert config["plugins"][CRI_IMAGES]["registry"]["config_path"] == str(tmp_path / "certs.d")
    assert runtime["restrict_oom_score_adj"] is True
    # The image's own file is not changed by the harness.
    assert image == image_config()


@pytest.mark.req("TD-118")
def test_the_config_written_reads_back_as_the_same_toml(tmp_path: Path) -> None:
    config = parts.containerd_config(image_config(), tmp_path, tmp_path / "n", tmp_path / "c")
    assert tomllib.loads(parts._toml(config)) == config


@pytest.mark.req("TD-118")
def test_the_kubelet_runs_the_units_command_line() -> None:
    line = parts.kubelet_exec_start(parts.find_definition())
    assert line.split() == [
        "$KUBELET_KUBECONFIG_ARGS",
        "$KUBELET_CONFIG_ARGS",
        "$KUBELET_KUBEADM_ARGS",
        "$KUBELET_EXTRA_ARGS",
        "$KUBELET_BATTERY_ARGS",
    ]
    # $KUBELET_BATTERY_ARGS comes from the drop-in's EnvironmentFile, which hostboot's
    # kubelet-config.sh writes on each Node before its kubelet starts.
    assert parts.kubelet_environment_files(parts.find_definition()) == ["/run/battery/kubelet.env"]


def test_a_drop_in_that_runs_another_program_is_refused(tmp_path: Path) -> None:
    drop_in = tmp_path / parts.KUBELET_DROP_IN
    drop_in.parent.mkdir(parents=True)
    drop_in.write_text("[Service]\nExecStart=\nExecStart=/usr/bin/sleep 1\n")
    with pytest.raises(ValueError, match="not the kubelet"):
        parts.kubelet_exec_start(tmp_path)


def test_every_file_the_nodes_do_not_run_is_one_of_the_images() -> None:
    definition = parts.find_definition()
    files = [key for key in parts.DEFINITION_ONLY if key.startswith(("usr/", "etc/"))]
    assert files
    assert all((definition / key).is_file() for key in files), files


def test_an_environment_file_is_read_as_systemd_reads_it(tmp_path: Path) -> None:
    env = tmp_path / "kubeadm-flags.env"
    env.write_text(
        "# kubeadm wrote this\n"
        'KUBELET_KUBEADM_ARGS="--hostname-override=batteryop-node-2 --node-ip=10.89.0.3"\n'
        "KUBELET_BATTERY_ARGS=--node-labels=a=b,c=d --system-reserved=cpu=0\n"
    )
    assert parts.read_env(env) == {
        "KUBELET_KUBEADM_ARGS": "--hostname-override=batteryop-node-2 --node-ip=10.89.0.3",
        "KUBELET_BATTERY_ARGS": "--node-labels=a=b,c=d --system-reserved=cpu=0",
    }
