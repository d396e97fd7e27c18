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
"""

from __future__ import annotations

import re
import shlex
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from batteryop.client.cli import cli as battery_cli
from batteryop.devstack import kubelet
from batteryop.devstack import main as devstack_main
from batteryop.devstack.docs_output import GENERATED, PAGES, Block, blocks
from batteryop.testing.controlplane.server import ControlPlane

PANTS_GOALS = {"run", "lint", "check", "test", "package", "fix", "fmt", "export", "tailor"}
"""The Pants 2.17 goals the pages may name."""
EXTERNAL = {
    "pip": "Python's installer",
    "skopeo": "Debian's skopeo (copies and inspects images)",
    "flux": "Flux's CLI",
    "helm": "Helm's CLI",
    "sha256sum": "coreutils",
}
"""Commands that are not ours, and what they are: only their presence is allowed."""
ARGUMENT_PARSERS: dict[str, Callable[[list[str]], object]] = {
    "src/python/batteryop/devstack:up": devstack_main.parse,
    # The target's command passes --artifacts itself.
    "src/python/batteryop/devstack:up-kubelet": lambda args: kubelet.parse(
        ["--artifacts", "dist", *args]
    ),
}
"""The `./pants run` targets whose arguments (after `--`) the pages may pass."""

PROMPT = re.compile(r"^(?:demo: )?\$ (?P<command>.+?)(?:\s+[\[(][\d.]+ m?s[\])])?$", re.M)
"""A typed command in an output block (the devstack demo's and the real node's timed ones too)."""


def page_blocks() -> list[Block]:
    found = [b for page in PAGES for b in blocks(page, Path(page).read_text())]
    assert len(found) > 15, found  # the four pages, not an empty sandbox
    return found


def commands(block: Block) -> Iterator[str]:
    """The commands a block shows: each line of a bash block (continuations joined, comments
    and shell keywords dropped, `;`, `&&` and `|` split), each `$ ` line of an output block,
    and the command a `recorded:` marker names."""
    if block.lang == "bash":
        text = block.body.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split(" #")[0].strip()
            for part in re.split(r"\s*(?:;|&&|\|)\s*", line):
                part = re.sub(r"^(?:do|then)\b\s*", "", part)
                if part and not re.match(r"^(?:for|done|fi)\b", part):
                    yield part
    elif block.lang == "text":
        yield from (m["command"] for m in PROMPT.finditer(block.body))
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


def kubectl_flags(verb: str) -> set[str]:
    """The flags `kubectl VERB --help` and `kubectl options` list."""
    text = ""
    for args in ([verb, "--help"], ["options"]):
        text += subprocess.run(
            ["kubectl", *args], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    pairs = re.findall(r"^\s+(?:(-\w), )?(--[\w-]+)", text, re.M)
    return {flag for pair in pairs for flag in pair if flag}


def check_kubectl(argv: list[str]) -> list[str]:
    flags = kubectl_flags(argv[1])
    used = [a.split("=")[0] for a in argv[2:] if a.startswith("-")]
    return [f"kubectl {argv[1]} has no flag {f}" for f in used if f not in flags]


def check(command: str) -> list[str]:
    argv = shlex.split(command)
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


def test_every_command_names_commands_and_options_that_exist() -> None:
    problems, checked = [], 0
    for block in page_blocks():
        for command in commands(block):
            checked += 1
            problems += [f"{block.page}:{block.line}: `{command}`: {p}" for p in check(command)]
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
