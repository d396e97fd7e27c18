"""kubeconfig `exec` credential plugins (CC-112): a stub plugin script, run as kubectl runs one,
logging in to the real kube-apiserver with the admin's client certificate or a ServiceAccount
token, kept until it expires, and run again after a 401."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from batteryop.api._compat import UTC
from batteryop.api.clock import FakeClock
from batteryop.api.times import format_time
from batteryop.kube.client import KubeClient
from batteryop.kube.config import KubeConfig
from batteryop.kube.config_test import whoami
from batteryop.kube.errors import KubeConfigError, UnauthorizedError
from batteryop.kube.exec_plugin import ExecPlugin
from batteryop.kube.resources import CONFIGMAPS
from batteryop.testing.controlplane import ControlPlane, ensure_service_account, request_token

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"

STUB = """#!{python}
# A stand-in exec credential plugin: prints the next answer of its answers file (the last one
# again when none is left) and logs how it was run.
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
log = os.path.join(here, "runs.jsonl")
blocked = [line.split()[1] for line in open("/proc/self/status") if line.startswith("SigBlk:")]
with open(log, "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"]),
                        "env": os.environ.get("STUB_ENV"), "blocked": int(blocked[0], 16)}}) + "\\n")
runs = sum(1 for _ in open(log))
answers = json.load(open(os.path.join(here, "answers.json")))
answer = answers[min(runs, len(answers)) - 1]
if "exit" in answer:
    sys.stderr.write(answer.get("stderr", ""))
    sys.exit(answer["exit"])
print(answer["stdout"] if "stdout" in answer else json.dumps(answer))
"""


class Stub:
    """A plugin script in its own directory: what it answers, and how often it ran."""

    def __init__(self, where: Path) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.dir = where
        self.path = where / "stub-plugin"
        self.path.write_text(STUB.format(python=sys.executable))
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR)

    def answers(self, *answers: dict[str, Any]) -> Stub:
        (self.dir / "answers.json").write_text(json.dumps(list(answers)))
        return self

    @property
    def runs(self) -> list[dict[str, Any]]:
        log = self.dir / "runs.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def exec_entry(self, api_version: str = V1, **extra: Any) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "apiVersion": api_version,
            "command": str(self.path),
            "args": ["get-token", "--cluster", "test"],
            "env": [{"name": "STUB_ENV", "value": "from-kubeconfig"}],
        }
        if api_version == V1:
            entry["interactiveMode"] = "Never"
        entry.update(extra)
        return entry


def credential(
    api_version: str = V1, expires: datetime | None = None, **status: str
) -> dict[str, Any]:
    if expires is not None:
        status["expirationTimestamp"] = format_time(expires)
    return {"apiVersion": api_version, "kind": "ExecCredential", "status": status}


def exec_kubeconfig(controlplane: ControlPlane, entry: dict[str, Any]) -> dict[str, Any]:
    kubeconfig = controlplane.kubeconfig()
    kubeconfig["users"][0]["user"] = {"exec": entry}
    return kubeconfig


@pytest.fixture
def stub(tmp_path: Path) -> Stub:
    return Stub(tmp_path / "plugin")


# -- logging in through the plugin, against the real API server ----------------------------------


@pytest.mark.controlplane
@pytest.mark.req("CC-112")
async def test_a_plugin_giving_the_admin_certificate_logs_in(
    controlplane: ControlPlane, stub: Stub
) -> None:
    admin = controlplane.admin
    stub.answers(
        credential(
            V1BETA1,
            clientCertificateData=admin.cert_pem.decode(),
            clientKeyData=admin.key_pem.decode(),
        )
    )
    config = KubeConfig.from_dict(
        exec_kubeconfig(controlplane, stub.exec_entry(V1BETA1, provideClusterInfo=True))
    )
    assert await whoami(config) == await whoami(KubeConfig.from_dict(controlplane.kubeconfig()))
    [run] = stub.runs
    assert run["argv"] == ["get-token", "--cluster", "test"]
    assert run["env"] == "from-kubeconfig"
    assert run["info"]["apiVersion"] == V1BETA1 and run["info"]["kind"] == "ExecCredential"
    assert run["info"]["spec"]["interactive"] is False
    assert run["info"]["spec"]["cluster"]["server"] == controlplane.url


@pytest.mark.controlplane
@pytest.mark.req("CC-112")
async def test_a_token_is_kept_until_it_expires_and_replaced_after_a_401(
    controlplane: ControlPlane, stub: Stub, kube_admin: Any, namespace: str
) -> None:
    ensure_service_account(kube_admin, namespace, "reader")
    good = request_token(kube_admin, namespace, "reader")
    later = datetime.now(UTC) + timedelta(hours=1)
    # First a token the API server refuses, then a good one that lasts an hour.
    stub.answers(credential(token="not-a-token"), credential(token=good, expires=later))
    config = KubeConfig.from_dict(exec_kubeconfig(controlplane, stub.exec_entry()))
    async with KubeClient(config) as kube:
        for _ in range(3):
            await kube.self_subject_access_review("get", "configmaps", namespace=namespace)
    # Refused once (401), run again, and the good token kept for every later request.
    assert len(stub.runs) == 2
    assert config.login_expiry() == later.replace(microsecond=0)


@pytest.mark.controlplane
@pytest.mark.req("CC-112")
async def test_a_refused_credential_twice_is_unauthorized(
    controlplane: ControlPlane, stub: Stub
) -> None:
    stub.answers(credential(token="not-a-token"))
    config = KubeConfig.from_dict(exec_kubeconfig(controlplane, stub.exec_entry()))
    async with KubeClient(config) as kube:
        with pytest.raises(UnauthorizedError):
            await kube.get(CONFIGMAPS, "cm", "default")
    assert len(stub.runs) == 2  # once, and once more after the 401


# -- the plugin on its own -------------------------------------------------------------------


@pytest.mark.req("CC-112")
def test_an_expired_credential_runs_the_plugin_again(stub: Stub) -> None:
    clock = FakeClock(datetime(2026, 12, 1, tzinfo=UTC))
    stub.answers(
        credential(token="one", expires=clock.now() + timedelta(minutes=5)),
        credential(token="two"),
    )
    plugin = ExecPlugin(stub.exec_entry(), source="kc", base_dir=stub.dir, clock=clock)
    assert plugin.credential().token == "one"
    clock.advance(timedelta(minutes=4))
    assert plugin.credential().token == "one"
    clock.advance(timedelta(minutes=1))
    assert plugin.credential().token == "two"
    assert plugin.credential().token == "two"  # no expiry: kept until refused
    assert len(stub.runs) == 2


@pytest.mark.req("CC-112")
def test_the_plugin_starts_with_no_signal_blocked(stub: Stub) -> None:
    """The blocking client runs the plugin on a thread that blocks SIGINT and SIGTERM (so that
    Ctrl-C reaches the main thread); the plugin must not inherit that, or an interactive login
    would not stop at Ctrl-C. The caller's own mask is kept."""
    stub.answers(credential(token="t"))
    plugin = ExecPlugin(stub.exec_entry(), source="kc", base_dir=stub.dir)
    masks: list[set[int]] = []

    def on_a_thread_that_blocks_them() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        assert plugin.credential().token == "t"
        masks.append(set(signal.pthread_sigmask(signal.SIG_BLOCK, [])))

    thread = threading.Thread(target=on_a_thread_that_blocks_them)
    thread.start()
    thread.join()
    assert masks == [{signal.SIGINT, signal.SIGTERM}]
    assert [run["blocked"] for run in stub.runs] == [0]


@pytest.mark.req("CC-112")
def test_a_relative_command_is_found_beside_the_kubeconfig(stub: Stub, tmp_path: Path) -> None:
    stub.answers(credential(token="t"))
    entry = stub.exec_entry(command=os.path.join("plugin", "stub-plugin"))
    plugin = ExecPlugin(entry, source="kc", base_dir=tmp_path)
    assert plugin.credential().token == "t"


@pytest.mark.req("CC-112")
@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"exit": 3, "stderr": "no SSO session\n"}, "exited with code 3"),
        ({"stdout": "hello"}, "did not print an ExecCredential \\(not JSON\\)"),
        (credential(V1BETA1, token="t"), "answered apiVersion '.*v1beta1', asked for '.*/v1'"),
        (credential(), "its ExecCredential has neither a token nor a client certificate"),
        (
            credential(clientCertificateData="c"),
            "its ExecCredential has a client certificate without",
        ),
    ],
)
def test_a_failing_plugin_is_one_line_naming_it(
    stub: Stub, answer: dict[str, Any], problem: str
) -> None:
    stub.answers(answer)
    plugin = ExecPlugin(stub.exec_entry(), source="kc", base_dir=stub.dir)
    with pytest.raises(KubeConfigError, match=f"exec plugin '.*stub-plugin': {problem}") as e:
        plugin.credential()
    assert "\n" not in str(e.value)


@pytest.mark.req("CC-112")
@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        (
            {
                "apiVersion": V1,
                "command": "no-such-plugin",
                "interactiveMode": "Never",
                "installHint": "Install it from your cloud's docs.\nMore lines.",
            },
            "exec plugin 'no-such-plugin': not found on PATH \\(Install it from your cloud's docs.\\)",
        ),
        ({"apiVersion": V1, "command": "p"}, "interactiveMode is required"),
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "p"}, "apiVersion"),
        ({"apiVersion": V1, "command": "p", "interactiveMode": "Always"}, "not a terminal"),
    ],
)
def test_an_unusable_exec_entry_is_refused_naming_the_plugin(
    entry: dict[str, Any], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(KubeConfigError, match=problem):
        ExecPlugin(entry, source="kc", base_dir=Path(".")).credential()
