from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from batteryop.api import names
from batteryop.exec_agent import memory
from batteryop.exec_agent.config import (
    AgentConfigError,
    is_address_of_this_host,
    parse,
    split_endpoint,
)
from batteryop.obs.flags import env_name

FILES = [
    "--tls-cert-file=/etc/agent/tls.crt",
    "--tls-key-file=/etc/agent/tls.key",
    "--flintlockd-ca-file=/etc/agent/serving-ca.crt",
    "--flintlockd-cert-file=/etc/agent/client.crt",
    "--flintlockd-key-file=/etc/agent/client.key",
]


def test_defaults_come_from_the_names_and_the_downward_api() -> None:
    config = parse(FILES, {"NODE_NAME": "host-a", "HOST_IP": "127.0.0.5"})
    assert config.node_name == "host-a"
    assert config.address == "127.0.0.5"
    assert config.port == names.EXEC_AGENT_PORT
    assert config.flintlockd == f"127.0.0.5:{names.FLINTLOCKD_PORT}"
    assert config.token_audience == names.EXEC_AGENT_AUDIENCE
    assert config.call_timeout == timedelta(seconds=10)
    assert config.exec_open_timeout == timedelta(seconds=10)
    assert config.listen_target == f"127.0.0.5:{names.EXEC_AGENT_PORT}"


@pytest.mark.req("EA-040", "EA-041")
def test_the_drain_guard_lives_in_the_pods_namespace_and_holds_an_hour_by_default() -> None:
    env = {"NODE_NAME": "host-a", "HOST_IP": "127.0.0.5", "POD_NAMESPACE": "agents"}
    config = parse(FILES, env)
    assert config.guard_namespace == "agents"
    assert config.guard_image == names.DRAIN_GUARD_IMAGE == "registry.k8s.io/pause:3.10"
    assert config.drain_timeout == timedelta(hours=1)
    assert config.drain_guard_linger == timedelta(minutes=1)  # EA-042
    image = f"--guard-image={names.DRAIN_GUARD_IMAGE}"
    argv = [*FILES, "--guard-namespace=other", image, "--drain-timeout=5m"]
    config = parse([*argv, "--drain-guard-linger=0s"], env)
    assert (config.guard_namespace, config.guard_image) == ("other", names.DRAIN_GUARD_IMAGE)
    assert config.drain_timeout == timedelta(minutes=5)
    assert config.drain_guard_linger == timedelta(0)


@pytest.mark.req("EA-111")
def test_bad_drain_guard_settings_are_refused_naming_their_flags() -> None:
    env = {"HOST_IP": "127.0.0.5"}
    bad = [
        "--guard-namespace=Not_A_Namespace",
        "--guard-image=example.test/pause:1",
        "--drain-timeout=0s",
        "--drain-guard-linger=-1s",
    ]
    with pytest.raises(AgentConfigError) as caught:
        parse([*FILES, f"--host-node={'.'.join(['a' * 60] * 4)}", *bad], env)
    problems = "\n".join(caught.value.problems)
    assert "--guard-namespace: 'Not_A_Namespace' is not a namespace name" in problems
    # EA-110: the admission policy admits the pinned image only, so the agent refuses another.
    assert (
        f"--guard-image: 'example.test/pause:1' is not {names.DRAIN_GUARD_IMAGE}, the one image"
        in problems
    )
    assert "--drain-timeout: must be greater than zero" in problems
    assert "--drain-guard-linger: must not be negative" in problems
    assert "too long to name its drain guard" in problems


def test_flags_win_over_their_environment_twins() -> None:
    env = {
        env_name("--host-node"): "from-env",
        env_name("--call-timeout"): "3s",
        "NODE_NAME": "fallback",
        "HOST_IP": "127.0.0.5",
    }
    config = parse([*FILES, "--host-node=from-flag"], env)
    assert config.node_name == "from-flag"
    assert config.call_timeout == timedelta(seconds=3)
    assert parse(FILES, env).node_name == "from-env"


def test_every_problem_is_listed_at_once_naming_its_flag() -> None:
    with pytest.raises(AgentConfigError) as caught:
        parse(
            ["--address=not-an-ip", "--call-timeout=soon", "--max-message-bytes=10"],
            {},
        )
    problems = caught.value.problems
    assert problems == tuple(sorted(problems))
    flags = {p.split(":")[0] for p in problems}
    assert {
        "--host-node",
        "--address",
        "--call-timeout",
        "--max-message-bytes",
        "--tls-cert-file",
        "--flintlockd-key-file",
    } <= flags


@pytest.mark.req("EA-001")
def test_flintlockd_must_be_named_by_an_address() -> None:
    env = {"NODE_NAME": "host-a", "HOST_IP": "127.0.0.5"}
    with pytest.raises(
        AgentConfigError, match="--flintlockd: 'flintlockd.local:9090' must name an IP"
    ):
        parse([*FILES, "--flintlockd=flintlockd.local:9090"], env)


@pytest.mark.req("EA-001", "EA-002")
def test_addresses_that_are_not_this_hosts_are_refused_at_start() -> None:
    # 192.0.2.0/24 is TEST-NET-1: documentation only, assigned to no machine.
    assert not is_address_of_this_host("192.0.2.10")
    assert is_address_of_this_host("127.0.0.77")
    env = {"NODE_NAME": "host-a", "HOST_IP": "127.0.0.5"}
    with pytest.raises(AgentConfigError) as caught:
        parse([*FILES, "--flintlockd=192.0.2.10:9090"], env)
    assert caught.value.problems == (
        "--flintlockd: '192.0.2.10:9090' is not an address of this Host",
    )
    with pytest.raises(AgentConfigError, match="--address: '192.0.2.11' is not an address"):
        parse([*FILES, "--address=192.0.2.11", "--flintlockd=127.0.0.1:9090"], env)
    assert parse([*FILES, "--flintlockd=192.0.2.10:9090"], env, check_host=False)


def test_endpoints_split_with_ipv6_in_brackets() -> None:
    assert split_endpoint("[::1]:9090") == ("::1", 9090)
    assert split_endpoint("10.0.0.1:9090") == ("10.0.0.1", 9090)
    for bad in ("10.0.0.1", "::1:9090", "10.0.0.1:0", "10.0.0.1:http"):
        with pytest.raises(ValueError):
            split_endpoint(bad)


@pytest.mark.req("EA-033", "EA-036")
def test_the_host_checks_look_where_the_flags_say() -> None:
    env = {"NODE_NAME": "host-a", "HOST_IP": "127.0.0.5"}
    default = parse(FILES, env)
    assert default.host_paths.not_ready_dir == Path("/run/battery/not-ready.d")
    assert default.host_paths.kvm_device == Path("/dev/kvm")
    assert default.sync_interval == timedelta(seconds=2)
    assert default.agent_address == f"127.0.0.5:{names.EXEC_AGENT_PORT}"
    moved = parse(
        [*FILES, "--not-ready-dir=/host/run/nr", "--kvm-device=/host/dev/kvm", "--thin-pool="],
        env,
    )
    assert moved.host_paths.not_ready_dir == Path("/host/run/nr")
    assert moved.host_paths.kvm_device == Path("/host/dev/kvm")
    assert moved.host_paths.thin_pool == ""


def test_the_limits_per_identity_and_holder_have_defaults_flags_and_checks() -> None:
    env = {"NODE_NAME": "host-a", "HOST_IP": "127.0.0.5"}
    config = parse(FILES, env, check_host=False)
    assert (config.identity_call_burst, config.identity_call_rate) == (200, 100.0)
    assert config.max_streams_per_holder == 64
    flags = ["--identity-call-burst=5", "--identity-call-rate=0.5", "--max-streams-per-holder=2"]
    config = parse([*FILES, *flags], env, check_host=False)
    assert (config.identity_call_burst, config.identity_call_rate) == (5, 0.5)
    assert config.max_streams_per_holder == 2
    bad = ["--identity-call-burst=0", "--identity-call-rate=0", "--max-streams-per-holder=0"]
    with pytest.raises(AgentConfigError) as caught:
        parse([*FILES, *bad], env, check_host=False)
    assert caught.value.problems == (
        "--identity-call-burst: must be at least 1",
        "--identity-call-rate: must be greater than zero",
        "--max-streams-per-holder: must be at least 1",
    )


@pytest.mark.req("EA-116")
def test_limits_whose_worst_case_exceeds_the_stream_memory_are_refused() -> None:
    env = {"NODE_NAME": "host-a", "HOST_IP": "127.0.0.5"}
    defaults = parse(FILES, env)
    one = memory.stream_bytes(
        max_message_bytes=defaults.max_message_bytes,
        relay_buffer_bytes=defaults.relay_buffer_bytes,
    )
    assert defaults.max_streams * one <= defaults.stream_memory_bytes
    assert defaults.stream_memory_bytes + memory.BASELINE_BYTES < memory.CONTAINER_MEMORY_BYTES
    with pytest.raises(AgentConfigError) as caught:
        parse([*FILES, "--relay-buffer-bytes=4194304"], env)
    (problem,) = caught.value.problems
    assert problem.startswith(f"--max-streams: {defaults.max_streams} streams of up to ")
    assert problem.endswith(
        f"need more than --stream-memory-bytes {memory.STREAM_MEMORY_BYTES}; "
        f"at most {memory.STREAM_MEMORY_BYTES // (one - 262144 + 4194304)} fit"
    )
    fewer = parse([*FILES, "--relay-buffer-bytes=4194304", "--max-streams=24"], env)
    assert fewer.max_streams == 24
