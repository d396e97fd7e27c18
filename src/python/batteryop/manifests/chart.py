"""The Helm chart: install.yaml's own objects as templates, with values for what users change.

`build(...)` takes what `render.render` takes (and the release's version) and returns the
`Chart`, its files as `{path: text}`: `Chart.yaml`, `values.yaml`, `values.schema.json`, `templates/_helpers.tpl`
and one `templates/<part>.yaml` per part of the install (`PARTS`). Nothing of the chart is
written by hand (DP-112):

1. `render.render()` gives install.yaml's objects.
2. `_place` puts a slot token where each value goes (a container's image and resources, a
   Deployment's replicas, a Pod's nodeSelector and tolerations, the issuer of the three CAs),
   and reads the value's default from the field it replaces: `values.yaml` is what
   install.yaml holds.
3. The objects are written as YAML (`render.documents`, the writer of install.yaml), Go
   template delimiters in them escaped, and each token replaced by its template expression.
   Objects a value switches on or off (the self-signing Issuer, the sample Pool of
   `api.samples`, off by default as install.yaml has none) are wrapped in `{{- if }}`.
4. `values.schema.json` comes from the same slots: each names its JSON Schema rule (DP-114),
   every object refuses keys it does not know, so Helm stops a bad value naming the field and
   the rule before anything is applied.

With the default values, `helm template` gives install.yaml's objects exactly (tested with the
pinned Helm, `chart_test`). The chart creates the Namespace and puts every object in it, as
install.yaml does, whatever namespace the release is recorded in; the Namespace, the CRDs and
battery's volume carry `helm.sh/resource-policy: keep` (`render.KEPT`, DP-113).

Requirements: DP-112, DP-113, DP-114.
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import yaml

from batteryop.api import names, samples
from batteryop.manifests import cert_manager, csr_approver, exec_agent, render

Obj = dict[str, Any]
Schema = dict[str, Any]
How = Literal["scalar", "image", "block", "optional", "none"]

NAME: Final = render.APP_NAME
"""The chart's name, as Helm pushes it: `<registry>/charts/battery-operator:<version>`."""
API_VERSION: Final = "v2"
KUBE_VERSION: Final = ">=1.34.0-0"
"""install.yaml's floor: MutatingAdmissionPolicy (docs/install.md)."""
DESCRIPTION: Final = (
    "Warm pools of Firecracker MicroVMs behind Pool and MicroVMClaim: the operator, battery, "
    "the Exec Agent and the CSR approver (the same objects as install.yaml)."
)
SOURCE: Final = "https://github.com/phoban01/battery-operator"
"""The chart's home and source when none is given (the release passes its own, the same)."""
IMAGE_HELPER: Final = f"{NAME}.image"
"""The named template that writes an image reference from its values."""

SEMVER: Final = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
"""Helm's chart versions are SemVer 2 (no build metadata here: OCI tags cannot hold `+`)."""

# --- The values a user changes, and their rules -----------------------------------------------

IMAGE_KEYS: Final = {
    render.OPERATOR_CONTAINER: "operator",
    render.HOST_REGISTRY_CONTAINER: "hostRegistry",
    render.BATTERY_CONTAINER: "battery",
    exec_agent.CONTAINER: "execAgent",
    csr_approver.APPROVER_CONTAINER: "csrApprover",
}
"""Container name → its key under `images` and in the workloads' `resources`."""
WORKLOADS: Final = {
    ("Deployment", names.OPERATOR_DEPLOYMENT): "operator",
    ("DaemonSet", names.EXEC_AGENT_NAME): "execAgent",
    ("Deployment", names.CSR_APPROVER_NAME): "csrApprover",
}
"""(kind, name) → the values section of each workload."""
SINGLE: Final = {
    "operator": "DP-002: one operator Pod; two would run two batteries on one database",
    "csrApprover": "one approver; two would race on the same certificate requests",
}
"""The Deployments whose replicas may be 0 or 1, and why never more."""

_NAME_RULE: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_QUANTITY: Final = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$"


def _object(properties: Mapping[str, Schema], description: str = "") -> Schema:
    out: Schema = {
        "type": "object",
        "additionalProperties": False,
        "required": sorted(properties),
        "properties": dict(properties),
    }
    if description:
        out["description"] = description
    return out


def _string(pattern: str, description: str) -> Schema:
    return {"type": "string", "pattern": pattern, "description": description}


def image_schema() -> Schema:
    """An image by registry, repository, tag and (where the release pinned it) digest."""
    out = _object(
        {
            "registry": _string(
                r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*$", "registry host (and path prefix)"
            ),
            "repository": _string(r"^[a-z0-9]+([._/-][a-z0-9]+)*$", "repository in the registry"),
            "tag": _string(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", "the image's tag"),
            "digest": _string(
                r"^(sha256:[a-f0-9]{64})?$", "sha256:<64 hex digits> the release pinned, or empty"
            ),
        }
    )
    out["description"] = "registry, repository, tag, and digest (a sha256 digest, or empty)"
    return out


def resources_schema() -> Schema:
    """Requests and limits of cpu and memory, every one given (every container is sized)."""
    pair = _object(
        {
            "cpu": _string(_QUANTITY, "a Kubernetes quantity, e.g. 50m or 1"),
            "memory": _string(_QUANTITY, "a Kubernetes quantity, e.g. 128Mi"),
        }
    )
    return _object({"requests": pair, "limits": pair}, "requests and limits, cpu and memory")


def node_selector_schema(required: Mapping[str, str] | None = None) -> Schema:
    out: Schema = {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": "Node labels the Pods must match",
    }
    if required:  # EA-004: the Exec Agent runs on Hosts only
        out["required"] = sorted(required)
        out["properties"] = {k: {"const": v} for k, v in required.items()}
        out["description"] += f"; must keep {', '.join(f'{k}={v}' for k, v in required.items())}"
    return out


def tolerations_schema(required: list[Obj] | None = None) -> Schema:
    toleration: Schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "key": {"type": "string"},
            "operator": {"enum": ["Exists", "Equal"]},
            "value": {"type": "string"},
            "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "tolerationSeconds": {"type": "integer"},
        },
    }
    out: Schema = {"type": "array", "items": toleration, "description": "Pod tolerations"}
    for needed in required or ():  # EA-004: the Exec Agent tolerates the Host taint
        out.setdefault("allOf", []).append(
            {
                "contains": {
                    "type": "object",
                    "required": sorted(needed),
                    "properties": {k: {"const": v} for k, v in needed.items()},
                }
            }
        )
        out["description"] += f"; must keep {json.dumps(needed, sort_keys=True)}"
    return out


def replicas_schema(why: str) -> Schema:
    return {"type": "integer", "minimum": 0, "maximum": 1, "description": f"0 or 1 ({why})"}


def issuer_ref_schema() -> Schema:
    return _object(
        {
            "name": _string(_NAME_RULE, "the issuer's name"),
            "kind": {"enum": ["Issuer", "ClusterIssuer"], "description": "Issuer or ClusterIssuer"},
            "group": {"const": cert_manager.GROUP},
        },
        "the cert-manager issuer of the three CA certificates",
    )


def _boolean(description: str) -> Schema:
    return {"type": "boolean", "description": description}


# --- Slots: where a value goes in the objects ---------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """One value: its path under `.Values`, its default, its rule, and how it is written."""

    path: tuple[str, ...]
    default: Any
    schema: Schema
    how: How
    """`scalar` (`{{ v }}`), `image` (through IMAGE_HELPER), `block` (`toYaml`, always
    written), `optional` (the key written only when the value is not empty), `none` (no field
    of its own: read by a helper or a condition)."""

    @property
    def ref(self) -> str:
        return ".Values." + ".".join(self.path)


class _Slots:
    """The slots placed so far, each with the token standing for it in the objects."""

    def __init__(self) -> None:
        self.by_token: dict[str, Slot] = {}
        self.values: list[Slot] = []

    def add(self, path: tuple[str, ...], default: Any, schema: Schema, how: How) -> str:
        slot = Slot(path, copy.deepcopy(default), schema, how)
        self.values.append(slot)
        token = f"zzslot{len(self.values):04d}zz"
        self.by_token[token] = slot
        return token

    def value(self, path: tuple[str, ...], default: Any, schema: Schema) -> None:
        """A value with no field of its own (read by a helper or a condition)."""
        self.values.append(Slot(path, copy.deepcopy(default), schema, "none"))


def split_image(reference: str) -> Obj:
    """`registry/repository:tag[@digest]` → the values of `image_schema()`."""
    name, _, digest = reference.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon <= slash:
        raise ValueError(f"image {reference!r} has no tag: the chart's values need one")
    repo, tag = name[:colon], name[colon + 1 :]
    registry, _, repository = repo.partition("/")
    if not repository or not ("." in registry or ":" in registry or registry == "localhost"):
        raise ValueError(f"image {reference!r} names no registry: the chart's values need one")
    return {"registry": registry, "repository": repository, "tag": tag, "digest": digest}


def _pod(obj: Obj) -> Obj:
    return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _place(objects: list[Obj], slots: _Slots) -> None:
    """Put a slot token in every field a value replaces (the defaults are the fields')."""
    slots.value(
        ("imageRegistry",),
        "",
        _string(r"^([a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*)?$", "when set, every image's registry"),
    )
    placed: set[str] = set()
    for obj in objects:
        section = WORKLOADS.get((obj["kind"], obj["metadata"]["name"]))
        if section is not None:
            placed |= _place_workload(obj, section, slots)
    missing = sorted(set(IMAGE_KEYS.values()) - placed)
    if missing:
        raise ValueError(f"install.yaml has no container for {missing}")
    for obj in objects:
        if obj["kind"] == "Certificate" and obj["spec"].get("isCA"):
            obj["spec"]["issuerRef"] = slots.add(
                ("certManager", "caIssuerRef"),
                obj["spec"]["issuerRef"],
                issuer_ref_schema(),
                "block",
            )
    slots.value(
        ("certManager", "selfSignedIssuer", "create"),
        True,
        _boolean(f"create the Issuer {names.SELFSIGNED_ISSUER} that signs the CAs by default"),
    )
    slots.value(
        ("samples", "enabled"),
        False,
        _boolean("install the sample Pool (api.samples) in the release's namespace"),
    )


def _place_workload(obj: Obj, section: str, slots: _Slots) -> set[str]:
    """A Deployment's or DaemonSet's slots; returns the image keys of its containers."""
    pod = _pod(obj)
    if section in SINGLE:
        obj["spec"]["replicas"] = slots.add(
            (section, "replicas"),
            obj["spec"]["replicas"],
            replicas_schema(SINGLE[section]),
            "scalar",
        )
    # EA-004: the Exec Agent's Host label and taint are required of any value given.
    host_only = section == "execAgent"
    selector, tolerations = pod["nodeSelector"], pod.get("tolerations", [])
    pod["nodeSelector"] = slots.add(
        (section, "nodeSelector"),
        selector,
        node_selector_schema(selector if host_only else None),
        "block",
    )
    pod["tolerations"] = slots.add(
        (section, "tolerations"),
        tolerations,
        tolerations_schema(tolerations if host_only else None),
        "optional",
    )
    keys = set()
    several = len(pod["containers"]) > 1
    for container in pod["containers"]:
        key = IMAGE_KEYS[container["name"]]
        keys.add(key)
        # One container: `<section>.resources`; the operator Pod's three: by container.
        path = (section, "resources", key) if several else (section, "resources")
        container["resources"] = slots.add(
            path, container["resources"], resources_schema(), "block"
        )
        container["image"] = slots.add(
            ("images", key), split_image(container["image"]), image_schema(), "image"
        )
    return keys


# --- Writing the templates ----------------------------------------------------------------------


def _escape(text: str) -> str:
    """Go template delimiters in the objects' own text, written so Helm prints them as they are."""
    return text.replace("{{", '{{ "{{" }}')


_LINE: Final = re.compile(
    r"^(?P<indent>[ ]*)(?P<key>[^ \n:][^\n:]*): (?P<token>zzslot\d{4}zz)$", re.M
)
_SCALAR: Final = re.compile(r"""(['"]?)(?P<token>zzslot\d{4}zz)\1""")


def _fill(text: str, slots: _Slots) -> str:
    """Replace each token by the template expression of its slot."""

    def line(match: re.Match[str]) -> str:
        slot = slots.by_token[match["token"]]
        indent, key = match["indent"], match["key"]
        nest = len(indent) + 2
        if slot.how == "block":
            return f"{indent}{key}:\n{{{{- toYaml {slot.ref} | nindent {nest} }}}}"
        if slot.how == "optional":
            return (
                f"{{{{- with {slot.ref} }}}}\n{indent}{key}:\n"
                f"{{{{- toYaml . | nindent {nest} }}}}\n{{{{- end }}}}"
            )
        return match[0]

    text = _LINE.sub(line, text)

    def scalar(match: re.Match[str]) -> str:
        slot = slots.by_token[match["token"]]
        if slot.how == "image":
            return f'{{{{ include "{IMAGE_HELPER}" (list .Values.imageRegistry {slot.ref}) | quote }}}}'
        if slot.how == "scalar":
            return f"{{{{ {slot.ref} }}}}"
        raise ValueError(f"slot {slot.ref} ({slot.how}) is not on a line of its own")

    return _SCALAR.sub(scalar, text)


PARTS: Final = {
    None: "install",
    render.COMPONENT_OPERATOR: "operator",
    names.COMPONENT_BATTERY: "battery",
    names.COMPONENT_EXEC_AGENT: "exec-agent",
    csr_approver.COMPONENT: "csr-approver",
    cert_manager.COMPONENT: "cert-manager",
}
"""`app.kubernetes.io/component` → the template file holding those objects (`templates/
<part>.yaml`); the Namespace and the CRDs, which have none, go to `install.yaml`."""


def _condition(obj: Obj) -> str | None:
    if obj["kind"] == "Issuer" and obj["metadata"]["name"] == names.SELFSIGNED_ISSUER:
        return ".Values.certManager.selfSignedIssuer.create"
    return None


def _document(obj: Obj, slots: _Slots) -> str:
    text = _fill(_escape(render.documents([obj])), slots)
    if "zzslot" in text:
        raise ValueError(f"{obj['kind']} {obj['metadata']['name']}: a slot was left unfilled")
    condition = _condition(obj)
    if condition is None:
        return text
    return f"{{{{- if {condition} }}}}\n{text}{{{{- end }}}}\n"


def _templates(objects: list[Obj], slots: _Slots, pool: Obj) -> dict[str, str]:
    parts: dict[str, list[str]] = {}
    for obj in objects:
        component = obj["metadata"].get("labels", {}).get(names.COMPONENT_LABEL)
        part = PARTS[component]
        parts.setdefault(part, []).append(_document(obj, slots))
    out = {f"templates/{part}.yaml": TEMPLATE_HEADER + "".join(d) for part, d in parts.items()}
    pool["metadata"]["namespace"] = "zzrelease-namespacezz"
    sample = render.documents([pool]).replace("zzrelease-namespacezz", "{{ .Release.Namespace }}")
    out["templates/samples.yaml"] = (
        f"{TEMPLATE_HEADER}{{{{- if .Values.samples.enabled }}}}\n{sample}{{{{- end }}}}\n"
    )
    out["templates/_helpers.tpl"] = HELPERS
    return out


TEMPLATE_HEADER: Final = (
    "# Generated by batteryop.manifests.chart from install.yaml's objects (do not edit by hand).\n"
)
HELPERS: Final = f"""\
{{{{/* Generated by batteryop.manifests.chart (do not edit by hand). */}}}}

{{{{/*
{IMAGE_HELPER}: an image reference from (list <imageRegistry> <image values>):
<registry>/<repository>:<tag>, then @<digest> where the release pinned one. A non-empty
imageRegistry stands for every image's own registry.
*/}}}}
{{{{- define "{IMAGE_HELPER}" -}}}}
{{{{- $image := index . 1 -}}}}
{{{{- $registry := index . 0 | default $image.registry -}}}}
{{{{- printf "%s/%s:%s" $registry $image.repository $image.tag -}}}}
{{{{- with $image.digest }}}}@{{{{ . }}}}{{{{ end -}}}}
{{{{- end -}}}}
"""


# --- values.yaml and values.schema.json ---------------------------------------------------------


def _nest(slots: _Slots) -> tuple[Obj, Schema]:
    """The default values and their schema, one tree each, from the slots (first one wins)."""
    values: Obj = {}
    schema: Schema = _object({})
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"{NAME} values"
    for slot in slots.values:
        *parents, leaf = slot.path
        node, rules = values, schema
        for part in parents:
            node = node.setdefault(part, {})
            rules = rules["properties"].setdefault(part, _object({}))
        if leaf in node:
            if node[leaf] != slot.default:
                raise ValueError(f"{slot.ref}: two fields hold different defaults")
            continue
        node[leaf] = slot.default
        rules["properties"][leaf] = slot.schema
    _require_all(schema)
    ordered: Obj = {key: values[key] for key in ORDER if key in values}
    return {**ordered, **values}, schema


ORDER: Final = ("imageRegistry", "images", "operator", "execAgent", "csrApprover")
"""values.yaml's first keys, in this order (the rest follow in the order they were placed)."""


def _require_all(schema: Schema) -> None:
    """Every key a closed object knows is required (values.yaml gives each one)."""
    if schema.get("additionalProperties") is False and "properties" in schema:
        schema["required"] = sorted(schema["properties"])
    for child in schema.get("properties", {}).values():
        _require_all(child)


def chart_version(app_version: str) -> str:
    """The chart's SemVer for a release tag: `v0.5.0` → `0.5.0`, `v0.5.1-dev3.gabc1234` →
    `0.5.1-dev3.gabc1234`."""
    version = app_version.removeprefix("v")
    if not SEMVER.match(version):
        raise ValueError(f"{app_version!r} does not give a SemVer 2 chart version")
    return version


def chart_yaml(app_version: str, source: str) -> Obj:
    """Chart.yaml; `version` from the release's tag (the version source of every artifact)."""
    return {
        "apiVersion": API_VERSION,
        "name": NAME,
        "description": DESCRIPTION,
        "type": "application",
        "version": chart_version(app_version),
        "appVersion": app_version,
        "kubeVersion": KUBE_VERSION,
        "home": source,
        "sources": [source],
    }


VALUES_HEADER: Final = (
    "# battery-operator chart values, generated by batteryop.manifests.chart (do not edit).\n"
    "# The defaults give install.yaml exactly; values.schema.json holds each value's rule.\n"
)


@dataclass(frozen=True)
class Chart:
    """The chart's files (`{path: text}`, paths inside the chart folder) and its values."""

    files: dict[str, str]
    metadata: Obj
    """Chart.yaml's fields."""
    values: Obj
    schema: Schema
    slots: tuple[Slot, ...]

    @property
    def version(self) -> str:
        return str(self.metadata["version"])

    def items(self) -> Iterator[tuple[str, str]]:
        yield from sorted(self.files.items())


def build(
    *,
    app_version: str,
    source: str,
    guests: samples.GuestImages = samples.V0_4_1,
    **render_args: Any,
) -> Chart:
    """The chart of the objects `render.render(**render_args)` gives (DP-112); its sample Pool
    names the guest images given (a release's own, pinned by digest)."""
    objects = render.render(**render_args)
    pool = samples.sample_pool(guests=guests)
    slots = _Slots()
    _place(objects, slots)
    values, schema = _nest(slots)
    metadata = chart_yaml(app_version, source)
    files = {
        "Chart.yaml": yaml.safe_dump(metadata, sort_keys=False),
        "values.yaml": VALUES_HEADER
        + yaml.safe_dump(values, sort_keys=False, default_flow_style=False, width=100),
        "values.schema.json": json.dumps(schema, indent=2, sort_keys=True) + "\n",
        **_templates(objects, slots, pool),
    }
    return Chart(files, metadata, values, schema, tuple(slots.values))


# --- The values table (docs/install.md) and the entry point -------------------------------------


def _shown(slot: Slot) -> str:
    if slot.how == "image":
        image = slot.default
        digest = f"@{image['digest']}" if image["digest"] else ""
        return f"`{image['registry']}/{image['repository']}:{image['tag']}{digest}`"
    return "`" + json.dumps(slot.default, separators=(", ", ": ")) + "`"


def _rank(key: str) -> int:
    return ORDER.index(key) if key in ORDER else len(ORDER)


def values_table(chart: Chart) -> str:
    """Every value with its default and its rule, as the Markdown table of docs/install.md."""
    rows = ["| Value | Default | Rule |", "|---|---|---|"]
    seen: set[tuple[str, ...]] = set()
    for slot in sorted(chart.slots, key=lambda slot: _rank(slot.path[0])):
        if slot.path in seen:
            continue
        seen.add(slot.path)
        rule = slot.schema.get("description") or slot.schema.get("type", "")
        rows.append(f"| `{'.'.join(slot.path)}` | {_shown(slot)} | {rule} |")
    return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the chart folder for the snapshot images (or those given), or the values table."""
    parser = argparse.ArgumentParser(
        prog="python -m batteryop.manifests.chart",
        description="Write battery-operator's Helm chart, generated from install.yaml's objects.",
    )
    parser.add_argument("--operator-image", default=render.SNAPSHOT_OPERATOR_IMAGE)
    parser.add_argument("--source", default=SOURCE, help="the chart's home and source URL")
    parser.add_argument("--values-table", action="store_true", help="print the values table")
    parser.add_argument("-o", "--output", default=NAME, help="the chart folder to write")
    args = parser.parse_args(argv)
    tag = args.operator_image.rpartition(":")[2].partition("@")[0]
    try:
        built = build(app_version=tag, source=args.source, operator_image=args.operator_image)
    except ValueError as err:
        parser.error(str(err))
    if args.values_table:
        sys.stdout.write(values_table(built))
        return 0
    for path, text in built.items():
        target = Path(args.output) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
