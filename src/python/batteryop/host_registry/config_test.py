from __future__ import annotations

from pathlib import Path

import pytest

from batteryop.api import names
from batteryop.host_registry.config import ConfigError, parse
from batteryop.manifests import render


def test_the_manifests_flags_parse_to_the_pods_names() -> None:
    """The host-registry container of install.yaml starts with flags this parser accepts."""
    pod = render.pod_spec(operator_image="o", host_registry_image="r", battery_image="b")
    (container,) = (c for c in pod["containers"] if c["name"] == render.HOST_REGISTRY_CONTAINER)
    config = parse(container["args"])
    assert config.battery_config_file == Path(render.CONFIG_FILE)
    assert config.battery_tls_dir == Path(render.TLS_DIR)
    assert config.battery_process_name == "poolmgrd"
    assert config.battery_address == render.BATTERY_ADDRESS
    assert config.battery_config_map == names.BATTERY_CONFIG_MAP
    assert (config.settle_time, config.restart_window, config.drain_timeout) == (30, 60, 30)
    assert config.host_resync_interval == 30  # IN-105: the default, not a manifest flag
    battery = next(c for c in pod["containers"] if c["name"] == render.BATTERY_CONTAINER)
    # The restart finds battery by name and by its -config flag naming the same file.
    assert f"-config={config.battery_config_file}" in battery["args"]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--battery-address=192.0.2.1:50051"], "--battery-address"),
        (["--settle-time=-1s"], "--settle-time"),
        (["--restart-window=1d"], "--restart-window"),
        (["--battery-tls-dir=tls"], "--battery-tls-dir"),
        (["--log-format=xml"], "--log-format"),
        (["--host-resync-interval=0s"], "--host-resync-interval"),
    ],
)
def test_bad_flags_name_the_flag(args: list[str], flag: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(args)
    assert err.value.flag == flag
