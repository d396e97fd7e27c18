"""The install diagram: every object `install.yaml` creates, grouped by component, and how they
refer to each other, drawn from the rendered manifests.

It reads `install.snapshot.yaml` (shipped in `batteryop.manifests`; `render_test` keeps it
equal to what `render()` gives), so the site builds without importing the renderer's
dependencies. Only references between objects the install creates are drawn, plus the
Secrets cert-manager writes for its Certificates:

- a (Cluster)RoleBinding to its role and to the ServiceAccounts it names;
- a Deployment or DaemonSet to its ServiceAccount and to the ConfigMaps, PersistentVolumeClaims
  and Secrets its Pod mounts;
- an admission policy binding to its policy;
- a Certificate to its Issuer, and a CA Issuer to the Certificate whose Secret it signs with.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from typing import Any

import yaml

Obj = Mapping[str, Any]

SNAPSHOT = "install.snapshot.yaml"
COMPONENT = "app.kubernetes.io/component"
WORKLOADS = ("Deployment", "DaemonSet")
NAME_WIDTH = 28
"""Characters of a name on one line of its box."""
_COLOURS = {
    "operator": "#eef3fb",
    "battery": "#fff4e0",
    "exec-agent": "#eaf6ec",
    "csr-approver": "#f6ecf6",
    "certificates": "#f2f2f2",
}


def snapshot_objects() -> list[Obj]:
    """The objects of `install.yaml`, in apply order, as the renderer gave them."""
    text = resources.files("batteryop.manifests").joinpath(SNAPSHOT).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def key(kind: str, name: str) -> str:
    """A Graphviz node id for the object `kind`/`name`."""
    return f'"{kind}/{name}"'


def _mounts(pod: Obj) -> Iterator[tuple[str, str]]:
    """(kind, name) of every ConfigMap, PersistentVolumeClaim and Secret the Pod mounts."""
    for volume in pod.get("volumes", []):
        sources: Sequence[Obj] = volume.get("projected", {}).get("sources", [volume])
        for source in sources:
            if "configMap" in source:
                yield "ConfigMap", source["configMap"]["name"]
            if "secret" in source:
                yield "Secret", source["secret"].get("name") or source["secret"]["secretName"]
            if "persistentVolumeClaim" in source:
                yield "PersistentVolumeClaim", source["persistentVolumeClaim"]["claimName"]


def references(objects: Sequence[Obj]) -> list[tuple[str, str, str]]:
    """(from, to, label) between the objects, as Graphviz node ids."""
    made = {(o["kind"], o["metadata"]["name"]) for o in objects}
    secrets = {
        o["spec"]["secretName"]: o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Certificate"
    }
    edges: list[tuple[str, str, str]] = []
    for o in objects:
        kind, name, spec = o["kind"], o["metadata"]["name"], o.get("spec", {})
        me = key(kind, name)
        if kind in ("RoleBinding", "ClusterRoleBinding"):
            edges.append((me, key(o["roleRef"]["kind"], o["roleRef"]["name"]), "grants"))
            for subject in o.get("subjects", []):
                if (subject["kind"], subject["name"]) in made:
                    edges.append((me, key(subject["kind"], subject["name"]), "to"))
        if kind in WORKLOADS:
            pod = spec["template"]["spec"]
            edges.append((me, key("ServiceAccount", pod["serviceAccountName"]), "runs as"))
            for ref_kind, ref in dict.fromkeys(_mounts(pod)):
                if ref_kind == "Secret" and ref in secrets:
                    edges.append((key("Certificate", secrets[ref]), me, f"Secret {ref}"))
                elif (ref_kind, ref) in made:
                    edges.append((me, key(ref_kind, ref), "mounts"))
        if kind.endswith("PolicyBinding"):
            edges.append((me, key(kind.removesuffix("Binding"), spec["policyName"]), "binds"))
        if kind == "Certificate":
            issuer = spec["issuerRef"]
            edges.append((me, key(issuer["kind"], issuer["name"]), "issued by"))
        if kind == "Issuer" and "ca" in spec and spec["ca"]["secretName"] in secrets:
            edges.append((key("Certificate", secrets[spec["ca"]["secretName"]]), me, "CA of"))
    return edges


def _broken(text: str, width: int = NAME_WIDTH) -> str:
    """`text` as dot label lines of about `width` characters, broken after a `-`, `.` or space."""
    lines = [""]
    for part in re.findall(r"[^-. ]+[-. ]?", text):
        if lines[-1] and len(lines[-1]) + len(part.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += part
    return "\\n".join(lines)


def install_dot(objects: Sequence[Obj] | None = None) -> str:
    """Graphviz source of the install diagram (the snapshot's objects unless given).

    Laid out to be read at a page's width: each component's objects in two columns (what
    refers, what is referred to), the components one under another, long names broken at a
    `-` or `.`. A reference into a workload (the Secret of a Certificate its Pod mounts) does
    not place it (`constraint=false`), else the workload would take a third column. Objects
    in the install's own Namespace say nothing of it; others name theirs, or say they are
    cluster-wide."""
    objects = snapshot_objects() if objects is None else objects
    own = next((o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"), None)
    groups: dict[str, list[Obj]] = {}
    for o in objects:
        groups.setdefault(o["metadata"].get("labels", {}).get(COMPONENT, ""), []).append(o)
    lines = [
        "digraph install {",
        "  rankdir=LR; nodesep=0.12; ranksep=0.4;",
        '  node [shape=box, style="rounded,filled", fillcolor="#ffffff", fontsize=10];',
        '  edge [fontsize=10, color="#666666", fontcolor="#444444"];',
    ]
    for n, (component, members) in enumerate(groups.items()):
        title = component or "shared (the Namespace, the CRDs)"
        colour = _COLOURS.get(component, "#ffffff")
        lines.append(
            f'  subgraph cluster_{n} {{ label="{title}"; style="rounded,filled";'
            f' fillcolor="{colour}"; color="#999999";'
        )
        for o in members:
            meta = o["metadata"]
            where = meta.get("namespace")
            label = f"{o['kind']}\\n{_broken(meta['name'])}"
            if where is None:
                label += "\\n(cluster-wide)"
            elif where != own:
                label += f"\\n(namespace {where})"
            lines.append(f'    {key(o["kind"], meta["name"])} [label="{label}"];')
        lines.append("  }")
    workloads = {key(o["kind"], o["metadata"]["name"]) for o in objects if o["kind"] in WORKLOADS}
    for a, b, label in references(objects):
        placing = ", constraint=false" if b in workloads else ""
        lines.append(f'  {a} -> {b} [label="{_broken(label)}"{placing}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
