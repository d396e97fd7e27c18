"""The Grafana dashboard: every panel's query reads metrics the components export, parses as
PromQL (Prometheus' own promtool), and the model is what Grafana imports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from batteryop.manifests import dashboard
from batteryop.obs import exported

SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard.build()["panels"] if p["type"] != "row"]


def read(expr: str) -> set[str]:
    """The metric families an expression reads (a histogram's series name its family)."""
    found = set()
    for name in re.findall(r"\bbattery_[a-z_]+\b", expr):
        for suffix in SERIES_SUFFIXES:
            if name.endswith(suffix) and name.removesuffix(suffix) in FAMILIES:
                name = name.removesuffix(suffix)
        found.add(name)
    return found


FAMILIES = {d.family for d in exported.ALL}


@pytest.mark.req("DP-111")
def test_every_panel_reads_exported_metrics() -> None:
    assert len(panels()) > 20
    for panel in panels():
        assert panel["targets"], f"{panel['title']} has no query"
        for target in panel["targets"]:
            names = read(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= FAMILIES, (panel["title"], names - FAMILIES)


def test_the_rule_sees_an_unknown_metric() -> None:
    assert read("rate(battery_operator_nothing_total[5m])") - FAMILIES == {
        "battery_operator_nothing_total"
    }
    assert read("rate(battery_operator_claim_bind_seconds_bucket[5m])") <= FAMILIES


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (.ci/run installs it)"
)
@pytest.mark.req("DP-111")
def test_every_query_is_promql(tmp_path: Path) -> None:
    """Each query as a recording rule: promtool parses every expression."""
    rules = [
        {"record": f"dashboard:panel{panel['id']}:{target['refId']}", "expr": target["expr"]}
        for panel in panels()
        for target in panel["targets"]
    ]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


def test_the_model_is_what_grafana_imports() -> None:
    model = dashboard.build()
    assert (model["uid"], model["title"]) == (dashboard.UID, dashboard.TITLE)
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids)) and 0 not in ids
    (variable,) = model["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)) and "" not in refs, panel["title"]
    rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
    assert rows == [title for title, _ in dashboard.rows()]


def test_the_configmap_carries_the_json_for_the_sidecar(capsys: pytest.CaptureFixture[str]) -> None:
    assert dashboard.main(["--configmap", "--namespace", "mon"]) == 0
    cm = yaml.safe_load(capsys.readouterr().out)
    assert cm["metadata"]["namespace"] == "mon"
    assert cm["metadata"]["labels"][dashboard.SIDECAR_LABEL] == "1"
    (text,) = cm["data"].values()
    assert json.loads(text) == dashboard.build()
    assert dashboard.main([]) == 0
    assert json.loads(capsys.readouterr().out) == dashboard.build()
