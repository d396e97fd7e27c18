"""The output blocks of the pages a newcomer runs commands from, regenerated from real runs.

    ./pants run src/python/batteryop/devstack:docs-output

In those pages (`PAGES`), every ```` ```text ```` block is marked by the comment before it:

    <!-- generated: ID -->       this script writes the block from a run (`GENERATED`)
    <!-- recorded: PROVENANCE --> kept from a run this script cannot repeat here (the real
                                  node, a release build), named in PROVENANCE

The script runs the local stack as `devstack:up` runs it (the devstack pex, with its own state
and log folders), uses it from "another terminal" as Try it locally shows (`. env`, `kubectl`,
`battery`), stops it with its `down` script, then applies the snapshot install.yaml with
`kubectl` to a fresh control plane, first without cert-manager's CRDs and then with them (the
Install page). Each block gets the commands as typed (`$ ...`) and what they printed; the pages
are rewritten in place, nothing else in them changes. `tests/docs/command_blocks_test.py`
checks the markers and that every command on the pages exists.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from batteryop.api._compat import within
from batteryop.devstack.stack import KUBECTL_DIR
from batteryop.testing import certmanager
from batteryop.testing.controlplane import admin_client
from batteryop.testing.controlplane.server import ControlPlane

PAGES = (
    "docs/getting-started.md",
    "docs/try-it-locally.md",
    "docs/install.md",
    "docs/client.md",
    "docs/fallback.md",
    "docs/autoscaling.md",
    "docs/shell.md",
)
GENERATED = frozenset(
    {
        "devstack-up",
        "devstack-session",
        "devstack-stop",
        "battery-help",
        "install-without-cert-manager",
        "install-apply",
    }
)
"""The blocks this script writes."""

UP = "./pants run src/python/batteryop/devstack:up"
WORK = Path("/tmp/batteryop-docs")
"""Where the stack runs (fixed, so the pages show the same paths run after run)."""
SESSION = (
    "kubectl get pools,microvmclaims -A",
    "kubectl get nodes -L battery.liquidmetal-x.dev/host",
    "battery run demo -- uname -a",
    "battery ls",
)
"""What Try it locally types in another terminal, after sourcing the stack's `env`."""
APPLY = "kubectl apply --server-side -f install.yaml"
SNAPSHOT = Path("src/python/batteryop/manifests/install.snapshot.yaml")
RUNNING = "devstack: running;"
TIMEOUT_SECONDS = 600.0

BLOCK = re.compile(
    r"^(?:<!-- (?P<kind>generated|recorded): (?P<label>.+?) -->\n)?"
    r"```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$",
    re.M | re.S,
)


class DocsOutputError(RuntimeError):
    """A command the pages show failed, or a page has a block this script does not know."""


@dataclass(frozen=True)
class Block:
    """A fenced block of a page and the marker before it, if any."""

    page: str
    line: int
    lang: str
    kind: str | None
    label: str | None
    body: str


def blocks(page: str, text: str) -> Iterator[Block]:
    """Every fenced block of a page, in order."""
    for m in BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        yield Block(page, line, m["lang"], m["kind"], m["label"], m["body"])


def rewrite(text: str, outputs: Mapping[str, str]) -> str:
    """The page with each generated block's body replaced by its new output."""

    def body(m: re.Match[str]) -> str:
        if m["kind"] != "generated" or m["label"] not in outputs:
            return m[0]
        head = m[0][: m.start("body") - m.start()]
        return head + outputs[m["label"]].rstrip("\n") + "\n```"

    return BLOCK.sub(body, text)


def prompt(command: str) -> str:
    return f"$ {command}"


async def shell(command: str, env_file: Path | None = None, cwd: Path | None = None) -> str:
    """What `command` prints (stdout and stderr as a terminal shows them) in bash, after
    sourcing `env_file`; DocsOutputError if it fails."""
    script = f". {shlex.quote(str(env_file))} && {command}" if env_file else command
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        script,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=cwd,
    )
    out, _ = await within(process.communicate(), TIMEOUT_SECONDS)
    if process.returncode != 0:
        raise DocsOutputError(f"`{command}` exited with {process.returncode}:\n{out.decode()}")
    return out.decode()


async def stack_outputs(artifacts: Path) -> dict[str, str]:
    """Start the stack, use it from another terminal, stop it: three blocks, and `battery
    --help` from its client venv."""
    shutil.rmtree(WORK, ignore_errors=True)
    state, logs = WORK / "state", WORK / "logs"
    args = ["--state-dir", str(state), "--log-dir", str(logs)]
    pex = artifacts / "src.python.batteryop.devstack" / "devstack-pex.pex"
    up = await asyncio.create_subprocess_exec(
        sys.executable,
        str(pex),
        "--artifacts",
        str(artifacts),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert up.stdout is not None
    started = [prompt(f"{UP} -- {shlex.join(args)}")]
    while not (line := (await up.stdout.readline()).decode()).startswith(RUNNING):
        if not line:
            await up.wait()
            raise DocsOutputError("the stack ended before it ran:\n" + "".join(started))
        started.append(line.rstrip("\n"))
        print(started[-1], flush=True)
    env = state / "env"
    session = [prompt(f". {env}")]
    try:
        for command in SESSION:
            session += [prompt(command), (await shell(command, env)).rstrip("\n")]
        help_text = await shell("battery --help", env)
    finally:
        down = await shell(str(state / "down"))
    session += [prompt(str(state / "down")), down.rstrip("\n")]
    rest, _ = await within(up.communicate(), TIMEOUT_SECONDS)
    if await up.wait() != 0:
        raise DocsOutputError(f"the stack exited with {up.returncode}:\n{rest.decode()}")
    return {
        "devstack-up": "\n".join(started),
        "devstack-session": "\n".join(session),
        "devstack-stop": line + rest.decode(),
        "battery-help": prompt("battery --help") + "\n" + help_text,
    }


async def install_outputs(work: Path) -> dict[str, str]:
    """install.yaml applied with kubectl to a fresh control plane, without cert-manager's CRDs
    (the refusals, stderr) and then with them."""
    cp = ControlPlane.start(workdir=work / "controlplane")
    try:
        shutil.copy(SNAPSHOT, work / "install.yaml")
        kubectl = f"PATH={shlex.quote(str(KUBECTL_DIR))}:$PATH KUBECONFIG={cp.admin_kubeconfig}"
        refused = await shell(f"{kubectl} {APPLY} 2>&1 >/dev/null || true", cwd=work)
        api = admin_client(cp)
        try:
            certmanager.install_crds(api)
        finally:
            api.close()
        applied = await shell(f"{kubectl} {APPLY}", cwd=work)
    finally:
        cp.stop()
    return {
        "install-without-cert-manager": prompt(APPLY) + "\n" + refused,
        "install-apply": prompt(APPLY) + "\n" + applied,
    }


def write_pages(root: Path, outputs: Mapping[str, str]) -> list[str]:
    """Rewrite the pages' generated blocks; the pages that changed."""
    changed = []
    for page in PAGES:
        path = root / page
        text = path.read_text()
        unknown = [
            f"{page}:{b.line}: {b.label}"
            for b in blocks(page, text)
            if b.kind == "generated" and b.label not in GENERATED
        ]
        if unknown:
            raise DocsOutputError("blocks no run writes: " + ", ".join(unknown))
        new = rewrite(text, outputs)
        if new != text:
            path.write_text(new)
            changed.append(page)
    return changed


PARTS = {"stack": GENERATED - {"install-without-cert-manager", "install-apply"}}
PARTS["install"] = GENERATED - PARTS["stack"]


async def regenerate(artifacts: Path, root: Path, parts: Sequence[str]) -> list[str]:
    """Run each part and rewrite its blocks as soon as it has run (the pages that changed)."""
    changed: list[str] = []
    for part in parts:
        if part == "stack":
            outputs = await stack_outputs(artifacts)
        else:
            with tempfile.TemporaryDirectory(prefix="batteryop-docs-install-") as work:
                outputs = await install_outputs(Path(work))
        assert set(outputs) == PARTS[part], sorted(set(outputs) ^ PARTS[part])
        changed += [page for page in write_pages(root, outputs) if page not in changed]
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="docs-output", description=__doc__.splitlines()[0])
    p.add_argument("--artifacts", type=Path, required=True, help="where Pants built the pexes")
    p.add_argument("--root", type=Path, default=Path("."), help="the repository (default: .)")
    p.add_argument(
        "--part",
        action="append",
        choices=sorted(PARTS),
        help="regenerate only these blocks (default: all): the stack's, or install.yaml's",
    )
    args = p.parse_args(argv)
    try:
        changed = asyncio.run(
            regenerate(
                args.artifacts.resolve(), args.root, args.part or sorted(PARTS, reverse=True)
            )
        )
    except DocsOutputError as e:
        print(f"docs-output: error: {e}", file=sys.stderr)
        return 1
    print("docs-output: rewrote " + (", ".join(changed) or "nothing (every block as it was)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
