"""The command and output blocks of Getting started, Try it locally, Install and the client page
(`batteryop.devstack.docs_output.PAGES`) show commands that exist and output from real runs.

Every ```` ```text ```` block is marked as written by `devstack:docs-output` (`generated: ID`, an
ID the script writes) or as kept from a named run it cannot repeat here (`recorded: ...`). Every
command in a ```` ```bash ```` block, in a `$ ...` line of an output block and in a `recorded:`
marker is checked against what it names:

- `./pants GOAL... TARGET... [-- ARGS]`: the goals are Pants goals this repository uses, each
  `path:name` target is in its BUILD file, and the arguments of `devstack:up` parse with the
  stack's own parser;
- `battery ...`: the client's click command resolves the subcommand and every option;
- `kubectl VERB ...`: every flag is one `kubectl VERB --help` lists, and every `kubectl get`
  runs as written against the real API server with the CRDs installed (resource names, label
  columns and flags judged by the server and kubectl themselves);
- the stack's `env` and `down` files are the ones it writes; other tools (pip, skopeo, flux,
  sha256sum) are not ours and are named in `EXTERNAL`.

The runbooks (Operations and `docs/runbooks/`, `RUNBOOKS`) are held to the same checks, and to
one more: every object their `kubectl`, `flux` and `cmctl` commands name is one that install.yaml
defines, that the Install page tells you to create (Flux's), or that a component makes at run
time under a name from `batteryop.api.names`; every namespace, container, label and annotation
they name exists too. A word in capitals (`NODE`, `NS`) stands for the reader's own object.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
import subprocess
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from batteryop.api import names, samples
from batteryop.client.cli import cli as battery_cli
from batteryop.devstack import kubelet
from batteryop.devstack import main as devstack_main
from batteryop.devstack.docs_output import GENERATED, PAGES, Block, blocks
from batteryop.manifests import alerts, dashboard, render
from batteryop.testing.controlplane.server import ControlPlane

PANTS_GOALS = {"run", "lint", "check", "test", "package", "fix", "fmt", "export", "tailor"}
"""The Pants 2.17 goals the pages may name."""
EXTERNAL = {
    "pip": "Python's installer",
    "skopeo": "Debian's skopeo (copies and inspects images)",
    "flux": "Flux's CLI",
    "cmctl": "cert-manager's CLI",
    "helm": "Helm's CLI",
    "sha256sum": "coreutils",
    "tail": "coreutils",
    "diff": "diffutils",
    "grep": "grep",
    "openssl": "OpenSSL's CLI",
    "ssh": "OpenSSH's client",
    "scp": "OpenSSH's client",
    "echo": "the shell's",
}
"""Commands that are not ours, and what they are: only their presence is allowed."""
ARGUMENT_PARSERS: dict[str, Callable[[list[str]], object]] = {
    "src/python/batteryop/devstack:up": devstack_main.parse,
    # The target's command passes --artifacts itself.
    "src/python/batteryop/devstack:up-kubelet": lambda args: kubelet.parse(
        ["--artifacts", "dist", *args]
    ),
    # These parse and print (no IO): what they print is thrown away here.
    "src/python/batteryop/manifests:alerts": lambda args: quietly(alerts.main, args),
    "src/python/batteryop/manifests:dashboard": lambda args: quietly(dashboard.main, args),
}
"""The `./pants run` targets whose arguments (after `--`) the pages may pass."""

RUNBOOKS = ("docs/operations.md", "docs/runbooks")
"""The Operations page and the runbooks' folder."""
REDIRECTIONS = {">", ">>", "<"}
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]*$")
"""A word that stands for the reader's own object: `NODE`, `NS`, `NAME`."""

PROMPT = re.compile(r"^(?:demo: )?\$ (?P<command>.+?)(?:\s+[\[(][\d.]+ m?s[\])])?$", re.M)
"""A typed command in an output block (the devstack demo's and the real node's timed ones too)."""


def page_blocks() -> list[Block]:
    found = [b for page in PAGES for b in blocks(page, Path(page).read_text())]
    assert len(found) > 15, found  # the four pages, not an empty sandbox
    return found


def quietly(main: Callable[[list[str]], int], args: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return main(args)


def runbook_blocks() -> list[Block]:
    pages = [Path(RUNBOOKS[0]), *sorted(Path(RUNBOOKS[1]).glob("*.md"))]
    found = [b for page in pages for b in blocks(str(page), page.read_text())]
    assert len(pages) >= 5 and len(found) > 30, (pages, len(found))  # not an empty sandbox
    return found


def shell_parts(line: str) -> Iterator[str]:
    """The commands of one shell line: split at `;`, `&&` and `|` outside quotes."""
    start, quote, i = 0, "", 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in ";|" or line.startswith("&&", i):
            yield line[start:i].strip()
            i += 2 if c == "&" else 1
            start = i
            continue
        i += 1
    yield line[start:].strip()


def line_commands(line: str) -> Iterator[str]:
    """The commands of one shell line (`shell_parts`), shell keywords dropped, and of a
    `NAME=$(command)` part the command."""
    for part in shell_parts(line):
        part = re.sub(r"^[A-Z_]+=\$\((.*)\)$", r"\1", part)
        part = re.sub(r"^(?:do|then)\b\s*", "", part)
        if part and not re.match(r"^(?:for|done|fi)\b", part):
            yield part


def commands(block: Block) -> Iterator[str]:
    """The commands a block shows: each line of a bash block (continuations joined, comments
    and shell keywords dropped, `;`, `&&` and `|` split), each `$ ` line of an output block,
    and the command a `recorded:` marker names."""
    if block.lang == "bash":
        text = block.body.replace("\\\n", " ")
        for line in text.splitlines():
            yield from line_commands(line.split(" #")[0].strip())
    elif block.lang in ("text", "console"):
        for m in PROMPT.finditer(block.body):
            yield from line_commands(m["command"])
        if block.kind == "recorded" and block.label:
            command = block.label.split(",")[0]
            if command.startswith(("./pants", "kubectl", "battery")):
                yield command


def check_pants(argv: list[str]) -> list[str]:
    at = argv.index("--") if "--" in argv else len(argv)
    words, args = argv[1:at], argv[at + 1 :]
    goals = [w for w in words if not w.startswith("-") and ":" not in w and "/" not in w]
    targets = [w for w in words if ":" in w or "/" in w]
    problems = [f"not a Pants goal: {g}" for g in goals if g not in PANTS_GOALS]
    problems += [f"no such target: {t}" for t in targets if t != "::" and not target_exists(t)]
    if args:
        parse = ARGUMENT_PARSERS.get(targets[-1] if targets else "")
        if parse is None:
            problems.append(f"no parser known for the arguments of {targets}")
        else:
            try:
                parse(args)
            except SystemExit:
                problems.append(f"{targets[-1]} refuses {args}")
    return problems


def target_exists(address: str) -> bool:
    path, _, name = address.partition(":")
    build = Path(path) / "BUILD"
    return build.is_file() and (not name or f'name="{name}"' in build.read_text())


def check_battery(argv: list[str]) -> list[str]:
    """Parse as click would, without running: the group's options, then the subcommand's."""
    try:
        ctx = battery_cli.make_context("battery", argv[1:])
        with warnings.catch_warnings():  # click 8.2 deprecates protected_args, 9.0 drops it
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*ctx.protected_args, *ctx.args]
        if rest:
            sub = battery_cli.get_command(ctx, rest[0])
            if sub is None:
                return [f"battery has no command {rest[0]}"]
            sub.make_context(rest[0], rest[1:], parent=ctx)
    except click.exceptions.Exit:  # --help
        return []
    except click.UsageError as e:
        return [f"battery refuses it: {e.format_message()}"]
    return []


@functools.cache
def kubectl_flags(*verb: str) -> set[str]:
    """The flags `kubectl VERB --help` and `kubectl options` list."""
    text = ""
    for args in ([*verb, "--help"], ["options"]):
        text += subprocess.run(
            ["kubectl", *args], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    pairs = re.findall(r"^\s+(?:(-\w), )?(--[\w-]+)", text, re.M)
    return {flag for pair in pairs for flag in pair if flag}


KUBECTL_VALUE_FLAGS = frozenset(
    "-n --namespace -l --selector -c --container -o --output -p --patch -f --filename -k "
    "--kustomize --type --field-selector --sort-by --for --timeout --since --tail --context "
    "--kubeconfig".split()
)
"""Flags the pages give a value as the next word (`-n NS`); others take none or `--flag=value`."""
KUBECTL_GROUPS = frozenset({"rollout", "top", "set", "create", "config", "auth", "certificate"})
"""kubectl verbs whose subcommand has the flags (`kubectl rollout status --help`)."""


@dataclass
class Kubectl:
    """A kubectl command line: its verb (with subcommand), flags and positional words."""

    verb: list[str]
    flags: list[tuple[str, str | None]]
    words: list[str]

    @classmethod
    def parse(cls, argv: list[str]) -> Kubectl:
        verb: list[str] = []
        flags: list[tuple[str, str | None]] = []
        words: list[str] = []
        rest = iter(argv[1:])
        for arg in rest:
            if arg == "--":  # what follows is the container's command (exec, run)
                break
            if arg.startswith("-") and arg != "-":
                name, eq, value = arg.partition("=")
                flags.append(
                    (
                        name,
                        value if eq else next(rest, None) if name in KUBECTL_VALUE_FLAGS else None,
                    )
                )
            elif not verb or (verb[0] in KUBECTL_GROUPS and len(verb) == 1):
                verb.append(arg)
            else:
                words.append(arg)
        return cls(verb, flags, words)

    def flag(self, *names_: str) -> str | None:
        return next((v for n, v in self.flags if n in names_), None)


def check_kubectl(argv: list[str]) -> list[str]:
    cmd = Kubectl.parse(argv)
    flags = kubectl_flags(*cmd.verb)
    verb = " ".join(cmd.verb)
    return [f"kubectl {verb} has no flag {f}" for f, _ in cmd.flags if f not in flags]


def without_redirection(argv: list[str]) -> list[str]:
    """`argv` up to a shell redirection (`> file`, `2>/dev/null`)."""
    cut = next(
        (i for i, a in enumerate(argv) if a in REDIRECTIONS or re.match(r"^[0-9]?[<>]", a)),
        len(argv),
    )
    return argv[:cut]


def check(command: str) -> list[str]:
    argv = without_redirection(shlex.split(command))
    tool = argv[0]
    if tool == "./pants":
        return check_pants(argv)
    if tool == "battery":
        return check_battery(argv)
    if tool == "kubectl":
        return check_kubectl(argv)
    if tool == "." and len(argv) == 2:
        return [] if Path(argv[1]).name == "env" else [f"the stack writes no {argv[1]}"]
    if Path(tool).name == "down" and tool.startswith("/tmp/"):
        return []
    return [] if tool in EXTERNAL else [f"unknown command {tool} (ours, or add it to EXTERNAL)"]


def test_every_output_block_is_generated_or_recorded_from_a_named_run() -> None:
    found = page_blocks()
    text = [b for b in found if b.lang == "text"]
    unmarked = [f"{b.page}:{b.line}" for b in text if b.kind is None]
    assert not unmarked, f"output blocks with no generated/recorded marker: {unmarked}"
    generated = [b.label or "" for b in text if b.kind == "generated"]
    print(
        f"{len(text)} output blocks: {len(generated)} generated, {len(text) - len(generated)} recorded"
    )
    assert sorted(generated) == sorted(GENERATED), "every block the script writes, once each"
    assert all(b.body.strip() for b in text), "an empty output block: run devstack:docs-output"
    for b in text:
        if b.kind == "recorded":
            assert re.search(
                r"\d{4}-\d\d-\d\d|v\d+\.\d+", b.label or ""
            ), f"{b.page}:{b.line}: when?"


def problems_of(found: list[Block], check_: Callable[[str], list[str]]) -> tuple[list[str], int]:
    """What `check_` finds wrong with each command of `found`, by page and line; and how many
    commands it checked."""
    problems, checked = [], 0
    for block in found:
        for command in commands(block):
            checked += 1
            problems += [f"{block.page}:{block.line}: `{command}`: {p}" for p in check_(command)]
    return problems, checked


def test_every_command_names_commands_and_options_that_exist() -> None:
    problems, checked = problems_of(page_blocks(), check)
    print(f"{checked} commands checked")
    assert checked >= 25, checked
    assert not problems, "\n".join(problems)


def test_the_checks_refuse_commands_that_do_not_exist() -> None:
    for wrong in (
        "./pants run src/python/batteryop/devstack:upp",
        "./pants runn src/python/batteryop/devstack:up",
        "./pants run src/python/batteryop/devstack:up -- --hostz 3",
        "battery claimm demo",
        "battery claim demo --holdr x",
        "battery --namespac x ls",
        "kubectl get pools --all-namespace",
        "kubectl apply --server-sde -f install.yaml",
        "batery ls",
    ):
        assert check(wrong), wrong


@pytest.mark.usefixtures("crds")
def test_every_kubectl_get_on_the_pages_runs_against_the_api_server(
    controlplane: ControlPlane,
) -> None:
    gets = sorted({c for b in page_blocks() for c in commands(b) if c.startswith("kubectl get ")})
    assert len(gets) >= 2, gets
    with controlplane.kubectl_env() as env:
        for command in gets:
            out = subprocess.run(
                shlex.split(command), env=env, capture_output=True, text=True, timeout=60
            )
            print(f"{command}: exit {out.returncode}")
            assert out.returncode == 0, f"{command}: {out.stderr}"
        wrong = subprocess.run(
            ["kubectl", "get", "poolz"], env=env, capture_output=True, text=True, timeout=60
        )
        assert wrong.returncode != 0, "a resource that does not exist was accepted"


def help_names(text: str) -> tuple[set[str], list[str]]:
    """The options and the commands a `--help` text lists."""
    commands = text.split("Commands:", 1)[1] if "Commands:" in text else ""
    return set(re.findall(r"--[\w-]+", text)), re.findall(r"^  (\w[\w-]*) ", commands, re.M)


def test_the_battery_help_block_lists_the_options_and_commands_there_are_now() -> None:
    """The generated `battery --help` block goes stale with the CLI: regenerate it then. (Not
    compared line by line: the wheel's venv may hold another click, which shortens the
    commands' one-line help its own way.)"""
    (block,) = (b for b in page_blocks() if b.label == "battery-help")
    now = CliRunner().invoke(battery_cli, ["--help"], prog_name="battery", terminal_width=80)
    assert now.exit_code == 0, now.output
    options, commands = help_names(now.output)
    assert "--namespace" in options and "claim" in commands, now.output
    assert help_names(block.body) == (
        options,
        commands,
    ), f"{block.page}:{block.line} is stale: ./pants run src/python/batteryop/devstack:docs-output"


# -- the runbooks: commands that exist, naming objects that exist -------------------------------

KINDS = {
    **dict.fromkeys(("deploy", "deployment", "deployments"), "Deployment"),
    **dict.fromkeys(("ds", "daemonset", "daemonsets"), "DaemonSet"),
    **dict.fromkeys(("cm", "configmap", "configmaps"), "ConfigMap"),
    **dict.fromkeys(("secret", "secrets"), "Secret"),
    **dict.fromkeys(
        ("pvc", "persistentvolumeclaim", "persistentvolumeclaims"), "PersistentVolumeClaim"
    ),
    **dict.fromkeys(("pdb", "poddisruptionbudget", "poddisruptionbudgets"), "PodDisruptionBudget"),
    **dict.fromkeys(("po", "pod", "pods"), "Pod"),
    **dict.fromkeys(("certificate", "certificates"), "Certificate"),
    **dict.fromkeys(("ocirepository", "ocirepositories"), "OCIRepository"),
    **dict.fromkeys(("ks", "kustomization", "kustomizations"), "Kustomization"),
    # The reader's and the cluster's own objects, or made at run time under generated names:
    # any name goes (FREE).
    **dict.fromkeys(("no", "node", "nodes"), "Node"),
    **dict.fromkeys(("pv", "persistentvolume", "persistentvolumes"), "PersistentVolume"),
    **dict.fromkeys(("microvmclaim", "microvmclaims"), "MicroVMClaim"),
    **dict.fromkeys(("pool", "pools"), "Pool"),
    **dict.fromkeys(("csr", "certificatesigningrequest", "certificatesigningrequests"), "CSR"),
    **dict.fromkeys(("ev", "event", "events"), "Event"),
}
"""kubectl's names of the resource types the runbooks use, and their kinds."""
FREE = frozenset({"Node", "PersistentVolume", "MicroVMClaim", "Pool", "CSR", "Event"})
NOT_SERVED = frozenset({"Certificate", "OCIRepository", "Kustomization"})
"""Kinds the test control plane does not serve (cert-manager's, Flux's): their gets are not run."""
NAMED_VERBS = frozenset({"get", "describe", "delete", "patch", "edit", "annotate", "label", "wait"})
"""kubectl verbs taking `TYPE NAME...` (or `TYPE/NAME`); the others take `TYPE/NAME` or a Pod."""
NODE_VERBS = frozenset({"cordon", "uncordon", "drain"})
FLUX_KINDS = {("source", "oci"): "OCIRepository", ("kustomization",): "Kustomization"}


@dataclass(frozen=True)
class Known:
    """What the runbooks may name: objects (kind, namespace, name), name prefixes of objects
    made at run time, each workload's containers, labels, and this project's label and
    annotation names."""

    objects: frozenset[tuple[str, str, str]]
    prefixes: frozenset[tuple[str, str, str]]
    containers: dict[tuple[str, str], frozenset[str]]
    labels: frozenset[tuple[str, str]]
    label_names: frozenset[str]
    our_names: frozenset[str]

    def has(self, kind: str, namespace: str, name: str) -> bool:
        return (
            kind in FREE
            or (kind, namespace, name) in self.objects
            or any(
                (k, ns) == (kind, namespace) and name.startswith(p) for k, ns, p in self.prefixes
            )
        )

    @property
    def namespaces(self) -> set[str]:
        return {ns for _, ns, _ in self.objects if ns}


def install_page_objects() -> list[dict]:
    """The objects the Install page's YAML blocks tell the reader to create (Flux's)."""
    page = "docs/install.md"
    docs = [
        doc
        for b in blocks(page, Path(page).read_text())
        if b.lang == "yaml"
        for doc in yaml.safe_load_all(b.body)
    ]
    return [d for d in docs if isinstance(d, dict) and "kind" in d and "metadata" in d]


@functools.cache
def known() -> Known:
    install = [d for d in yaml.safe_load_all(render.snapshot_text()) if d]
    objects: set[tuple[str, str, str]] = set()
    containers: dict[tuple[str, str], frozenset[str]] = {}
    labels: set[tuple[str, str]] = set()
    for d in [*install, *install_page_objects()]:
        meta = d["metadata"]
        kind, ns, name = d["kind"], meta.get("namespace", ""), meta["name"]
        objects.add((kind, ns, name))
        labels.update((meta.get("labels") or {}).items())
        if kind == "Certificate":  # cert-manager writes its Secret
            objects.add(("Secret", ns, d["spec"]["secretName"]))
        if kind in ("Deployment", "DaemonSet"):
            template = d["spec"]["template"]
            labels.update(template["metadata"]["labels"].items())
            containers[(kind, name)] = frozenset(c["name"] for c in template["spec"]["containers"])
    ns = names.OPERATOR_NAMESPACE
    # What the components make at run time: the CSR approver's two ConfigMaps, the drain guards.
    objects |= {
        ("ConfigMap", ns, names.CA_BUNDLE_CONFIG_MAP),
        ("ConfigMap", ns, names.ADDRESS_PINS_CONFIG_MAP),
    }
    objects.add(("Pod", ns, names.BATTERY_DB_RESTORE_POD))  # the Restore runbook's `kubectl run`
    prefixes = {(kind, ns, names.DRAIN_GUARD_PREFIX) for kind in ("Pod", "PodDisruptionBudget")}
    constants = [v for v in vars(names).values() if isinstance(v, str)]
    return Known(
        objects=frozenset(objects),
        prefixes=frozenset(prefixes),
        containers=containers,
        labels=frozenset(labels),
        # Our own labels' values vary (a Node's name): any value of them goes.
        label_names=frozenset(
            v for k, v in vars(names).items() if k.endswith("_LABEL") and v.startswith(names.PREFIX)
        ),
        our_names=frozenset(c for c in constants if c.startswith(names.PREFIX)),
    )


def placeholder(word: str | None) -> bool:
    return word is not None and bool(PLACEHOLDER.match(word))


def kubectl_targets(cmd: Kubectl) -> list[tuple[str, str]]:
    """(resource type, name) of each object a kubectl command names; name "" for a listing."""
    if not cmd.verb:
        return []
    if cmd.verb[0] in NODE_VERBS:
        return [("node", w) for w in cmd.words]
    if cmd.verb[0] == "top" and len(cmd.verb) == 2:
        return [(cmd.verb[1], w) for w in cmd.words] or [(cmd.verb[1], "")]
    targets = []
    words = list(cmd.words)
    if cmd.verb[0] in NAMED_VERBS and words and "/" not in words[0]:
        types = words.pop(0).split(",")
        return [(t, w) for t in types for w in words] or [(t, "") for t in types]
    for word in words:
        kind, slash, name = word.partition("/")
        targets.append((kind, name) if slash else ("pod", word))
    return targets


def check_kubectl_objects(argv: list[str]) -> list[str]:
    cmd = Kubectl.parse(argv)
    k = known()
    namespace = cmd.flag("-n", "--namespace") or ""
    problems = []
    if namespace and not placeholder(namespace) and namespace not in k.namespaces:
        problems.append(f"no namespace {namespace} in install.yaml or on the Install page")
    targets = kubectl_targets(cmd)
    for rtype, name in targets:
        kind = KINDS.get(rtype.lower())
        if kind is None:
            problems.append(f"resource type {rtype} is not one the runbooks know (KINDS)")
        elif name and not placeholder(name) and not k.has(kind, namespace, name):
            problems.append(f"{kind} {namespace}/{name} is defined nowhere")
    container = cmd.flag("-c", "--container")
    if container:
        workloads = [(KINDS.get(t.lower(), ""), n) for t, n in targets]
        if not any(container in k.containers.get(w, ()) for w in workloads):
            problems.append(f"no container {container} in {workloads}")
    for selector in filter(None, [cmd.flag("-l", "--selector")]):
        for term in selector.split(","):
            key, _, value = term.partition("=")
            if key not in k.label_names and (key, value) not in k.labels:
                problems.append(f"no object of install.yaml is labelled {term}")
    return problems


def check_our_names(command: str) -> list[str]:
    """Every `battery.liquidmetal-x.dev/...` label or annotation named is in api.names."""
    used = re.findall(rf"{re.escape(names.GROUP)}/[\w.-]*\w", command.replace("\\.", "."))
    return [f"{u} is not a name of batteryop.api.names" for u in used if u not in known().our_names]


def positional(args: list[str]) -> tuple[list[str], str | None]:
    """The words of a flux or cmctl command line that are not flags or `-n`'s value, and that
    value."""
    words, namespace, rest = [], None, iter(args)
    for arg in rest:
        if arg in ("-n", "--namespace"):
            namespace = next(rest, None)
        elif arg.startswith(("-n=", "--namespace=")):
            namespace = arg.partition("=")[2]
        elif not arg.startswith("-"):
            words.append(arg)
    return words, namespace


def check_flux_objects(argv: list[str]) -> list[str]:
    """`flux reconcile|suspend|resume source oci NAME` and `... kustomization NAME`."""
    words, namespace = positional(argv[2:])
    for shape, kind in FLUX_KINDS.items():
        if tuple(words[: len(shape)]) == shape:
            objects = [(kind, namespace or "flux-system", n) for n in words[len(shape) :]]
            return [
                f"{k} {ns}/{n} is defined nowhere"
                for k, ns, n in objects
                if not known().has(k, ns, n)
            ]
    return []


def check_cmctl_objects(argv: list[str]) -> list[str]:
    """`cmctl renew -n NS CERTIFICATE...`, the one cmctl command the runbooks use."""
    words, namespace = positional(argv[1:])
    if words[:1] != ["renew"]:
        return [f"cmctl {' '.join(words[:1])} is not a command the runbooks use"]
    return [
        f"Certificate {namespace}/{c} is defined nowhere"
        for c in words[1:]
        if not known().has("Certificate", namespace or "", c)
    ]


def check_objects(command: str) -> list[str]:
    argv = without_redirection(shlex.split(command))
    objects = {
        "kubectl": check_kubectl_objects,
        "flux": check_flux_objects,
        "cmctl": check_cmctl_objects,
    }.get(argv[0])
    return check_our_names(command) + (objects(argv) if objects else [])


def test_every_runbook_command_exists_and_names_only_objects_that_exist() -> None:
    problems, checked = problems_of(runbook_blocks(), lambda c: check(c) + check_objects(c))
    print(f"{checked} runbook commands checked")
    assert checked >= 50, checked
    assert not problems, "\n".join(problems)


def test_the_object_checks_refuse_objects_that_do_not_exist() -> None:
    for wrong in (
        "kubectl -n battery-operator-system logs deploy/battery-operator-controller-manager -c batery",
        "kubectl -n battery-operator-system logs deploy/battery-operator-manager -c operator",
        "kubectl -n battery-operator-sys get pods",
        "kubectl -n battery-operator-system get pvc battery-db",
        "kubectl -n battery-operator-system get configmap flintlockd-cas",
        "kubectl -n battery-operator-system delete secret exec-agent-ca",
        "kubectl -n battery-operator-system get pods -l app.kubernetes.io/component=exec-agents",
        "kubectl -n battery-operator-system get widgets",
        "kubectl -n battery-operator-system rollout restart daemonset/battery-exec-agent",
        "kubectl get node NODE -o jsonpath='{.metadata.annotations.battery\\.liquidmetal-x\\.dev/drain-start}'",
        "kubectl patch ocirepository battery -n flux-system --type=merge -p '{}'",
        "flux reconcile source oci battery -n flux-system",
        "cmctl renew -n battery-operator-system battery-client",
    ):
        assert check_objects(wrong), wrong
    for right in (
        "kubectl -n battery-operator-system get poddisruptionbudgets,pods -l battery.liquidmetal-x.dev/drain-guard=NODE",
        "kubectl -n battery-operator-system get pdb exec-agent-drain-guard-host-1",
        "kubectl -n battery-operator-system get configmap host-address-pins -o yaml",
        "flux reconcile source oci battery-operator -n flux-system",
    ):
        assert not check_objects(right), (right, check_objects(right))


def test_every_bash_block_of_the_runbooks_is_valid_shell() -> None:
    """As pasted into bash: an unquoted `(` in a JSONPath filter is a syntax error there."""
    bash = [b for b in runbook_blocks() if b.lang == "bash"]
    for block in bash:
        out = subprocess.run(["bash", "-n"], input=block.body, capture_output=True, text=True)
        assert out.returncode == 0, f"{block.page}:{block.line}: {out.stderr}"
        dropped = [line for line in block.body.splitlines() if unquoted_backslash(line)]
        assert (
            not dropped
        ), f"{block.page}:{block.line}: the shell drops these backslashes: {dropped}"
    assert subprocess.run(["bash", "-n"], input="kubectl get x -o a[?(@.b)]", text=True).returncode
    assert unquoted_backslash(r"kubectl get nodes -o custom-columns=A:.a.b\.c/d")
    assert not unquoted_backslash("kubectl get nodes -o 'custom-columns=A:.a.b\\.c/d' \\")
    print(f"{len(bash)} bash blocks parsed")


def unquoted_backslash(line: str) -> bool:
    """Whether `line` has a backslash outside quotes that does not end it (a continuation):
    the shell drops it, so `battery\\.liquidmetal-x\\.dev` reaches kubectl without them."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "\\" and line[i + 1 :].strip():
            return True
    return False


SERVED = frozenset({"Namespace", "ServiceAccount", "ConfigMap", "PersistentVolumeClaim"})
"""install.yaml's kinds the gets read, created so that their columns and templates are
evaluated against an object (NotFound proves little about a JSONPath)."""


def runbook_objects() -> list[dict]:
    ns = "runbooks"
    install = [d for d in yaml.safe_load_all(render.snapshot_text()) if d and d["kind"] in SERVED]
    labels = {names.HOST_LABEL: names.HOST_LABEL_VALUE}
    host = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "runbooks-host", "labels": labels},
    }
    return [
        *install,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        host,
        samples.demo_pool("demo", ns),
        samples.sample_claim("claim", "demo", "sandbox", ns),
    ]


@pytest.mark.usefixtures("crds")
def test_every_kubectl_get_of_the_runbooks_runs_against_the_api_server(
    controlplane: ControlPlane,
) -> None:
    """Each `kubectl get` whose namespace and names are not placeholders, as written, with
    install.yaml's Namespace, ConfigMap and claim, a Host Node, a Pool and a claim there (what
    is made at run time is not: NotFound is an answer about the object, not the command);
    cert-manager's and Flux's kinds are not served here, so those are only named."""
    ran, skipped = 0, []
    with controlplane.kubectl_env() as env:
        made = subprocess.run(
            ["kubectl", "apply", "--server-side", "-f", "-"],
            input=yaml.safe_dump_all(runbook_objects()),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
        for block in runbook_blocks():
            for command in commands(block):
                if not command.startswith("kubectl "):
                    continue
                argv = without_redirection(shlex.split(command))
                cmd = Kubectl.parse(argv)
                targets = kubectl_targets(cmd)
                if cmd.verb != ["get"]:
                    continue
                kinds = {KINDS.get(t.lower()) for t, _ in targets}
                if (
                    kinds & NOT_SERVED
                    or placeholder(cmd.flag("-n", "--namespace"))
                    or any(placeholder(n) for _, n in targets)
                ):
                    skipped.append(command)
                    continue
                out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
                ran += 1
                assert (
                    out.returncode == 0 or "(NotFound)" in out.stderr
                ), f"{block.page}:{block.line}: {command}: {out.stderr}"
    print(f"{ran} gets run, {len(skipped)} not run: {skipped}")
    assert ran >= 15, ran
