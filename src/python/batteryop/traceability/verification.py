"""How a test verifies the IDs it cites: against the real thing, against our own fake, as a
unit, or as a definition only. Derived from what the test starts, so a count cannot be raised by
a word.

What a test uses is read statically: the names its body calls or reads, the fixtures it asks
for (found in its own file, the `conftest.py` files above it and the root conftest's
`pytest_plugins`), and, through them, what those use in turn: a helper or a module-level value
of the same file, a helper module of the tests (`tests/images/hostfs.py`, say). A string that
names a harness module (one run as a process) counts as using it; annotations do not count.
Each test gets one of four kinds, strongest first:

- `real`: it starts a real external part and none of our fakes: a harness whose `HARNESSES`
  entry is `REAL` only (the real kube-apiserver and etcd, the real node, QEMU, Flux's code),
  or an external tool in `REAL_TOOLS` named as the first word of a command (`["kubectl", ...]`,
  `run("buildah", ...)`, `shutil.which("qemu-...")`).
- `own-fake`: it starts one of our fakes (the fake battery, the fake flintlockd, the in-memory
  API server), alone or beside real parts: a harness whose entry holds `FAKE`, such as the local
  stack (the real API server, but the fake battery and fake flintlockd behind the operator).
  What the fake stands in for is not verified for real, so a fake always wins over real.
- `unit`: it calls our code in this process (a name imported from `batteryop` called or
  instantiated), runs a shell script of ours (`bash`, `sh`) or this interpreter
  (`sys.executable`), and starts nothing external.
- `definition`: it calls nothing of ours and runs nothing: it reads a file, a constant, or what
  a renderer in `DEFINITIONS` returns (`manifests.render()` read back is the Manifests'
  definition; applied to the real API server, the API server makes the test real).

A marker on several tests (on a class, `pytestmark`) takes the weakest kind among them. A marker
may say less than this, never more: `@pytest.mark.req("HI-010", by="definition")` records a dry
run, a stand-in binary or a text check inside a test that does run something. A `by` above what
the test uses, or an unknown `by`, is a problem (`check`).

`check` gives an ID the weakest kind among the tests that cite it (and reports the strongest
beside it), then caps some IDs whatever their tests use: every BA ID at `own-fake` (battery's
behaviour is only ever seen through our fake), and every ID implemented in an artifact that
still holds a `PIN-ME` placeholder value at `definition` (`unpinned_artifacts`: what it pins
cannot be built yet).
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Verified(StrEnum):
    """How a test verifies what it cites; `rank` orders them, weakest first."""

    DEFINITION = "definition"
    UNIT = "unit"
    OWN_FAKE = "own-fake"
    REAL = "real"

    @property
    def rank(self) -> int:
        return list(Verified).index(self)


REAL, FAKE, CODE = "real", "fake", "code"
"""What using a harness starts: a real external part, one of our fakes, our own code."""

HARNESSES: dict[str, frozenset[str]] = {
    # Real external parts.
    "batteryop.testing.controlplane": frozenset({REAL}),  # kube-apiserver and etcd, pinned
    "batteryop.testing.certmanager": frozenset({REAL}),  # cert-manager's CRDs in that server
    "batteryop.testing.csr_approver_env": frozenset({REAL, CODE}),  # the approver on it
    "batteryop.testing.fluxcli": frozenset({REAL}),  # Flux's own CLI
    "batteryop.testing.fluxoci": frozenset({REAL}),  # Flux's own OCI library
    "batteryop.release.gomodules": frozenset({REAL}),  # the Go toolchain, the pinned modules
    "batteryop.release.guest_agent": frozenset({REAL}),  # flintlock's guest agent, built
    "batteryop.testing.guest_image": frozenset({REAL}),  # the guest booted by QEMU
    "batteryop.testing.chromium": frozenset({REAL}),  # a headless browser
    "batteryop.testing.kubenode": frozenset({REAL}),  # a real kubelet and container runtime
    # Real parts with our fakes behind them: at most own fake.
    "batteryop.testing.kubenode.install": frozenset({REAL, FAKE}),  # battery: the fake's image
    "batteryop.testing.localstack": frozenset({REAL, FAKE}),  # fake battery, fake flintlockd
    "batteryop.testing.exec_agent": frozenset({REAL, FAKE}),  # the agent before fake flintlockd
    "batteryop.testing.host_registry_env": frozenset({REAL, FAKE}),  # battery: the fake
    "batteryop.devstack.stack": frozenset({REAL, FAKE}),  # the dev stack: the fake battery
    "batteryop.devstack.main": frozenset({REAL, FAKE}),
    "batteryop.devstack.kubelet": frozenset({REAL, FAKE}),  # the stack on the real node
    # Our fakes.
    "batteryop.testing.fake_battery": frozenset({FAKE}),
    "batteryop.testing.fake_flintlock": frozenset({FAKE}),
    "batteryop.testing.fake_kube": frozenset({FAKE}),  # the in-memory API server
    "batteryop.testing.operator_env": frozenset({FAKE}),  # a FakeBattery per test
    # Our code run as a process.
    "batteryop.testing.operator_runner": frozenset({CODE}),
    "batteryop.testing.exec_agent_flood": frozenset({CODE}),
    # Neither: a free port, the build cache, other helpers of the tests.
    "batteryop.testing.controlplane.server.free_port": frozenset(),
    "batteryop.testing.controlplane.gobuild": frozenset(),
    "batteryop.testing": frozenset(),
}
"""What a name under each prefix starts when a test uses it; the longest prefix decides."""

DEFINITIONS = ("batteryop.manifests", "batteryop.api.crds")
"""Our renderers: what they return is a definition (install.yaml's objects, the CRDs), read by
the test as it would read a file. Calling them is not calling behaviour."""

REAL_TOOLS = frozenset(
    {
        "kubectl",
        "flux",
        "buildah",
        "skopeo",
        "podman",
        "qemu-img",
        "ip",
        "nft",
        "systemctl",
        "kubelet",
        "kubeadm",
    }
)
"""External programs that are the real thing when a test runs them (`qemu-system-*` too).
`systemd-analyze verify` is not among them: it reads a unit, as a test reading it would."""
OUR_SCRIPT_RUNNERS = frozenset({"bash", "sh"})
"""Running one of our shell scripts is calling our code."""

OUR_CODE = "batteryop"

FAMILY_CAPS = {"BA": Verified.OWN_FAKE}
"""Families whose subject runs here only as our own fake: battery is `testing.fake_battery`."""

PLACEHOLDER = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*=\S*PIN-ME", re.MULTILINE)
"""A `KEY=value` line whose value is still the `PIN-ME` placeholder."""


@dataclass
class Uses:
    real: bool = False
    fake: bool = False
    code: bool = False

    def add(self, other: Uses) -> None:
        self.real |= other.real
        self.fake |= other.fake
        self.code |= other.code

    def start(self, parts: frozenset[str]) -> None:
        self.real |= REAL in parts
        self.fake |= FAKE in parts
        self.code |= CODE in parts

    @property
    def kind(self) -> Verified:
        if self.fake:
            return Verified.OWN_FAKE
        if self.real:
            return Verified.REAL
        if self.code:
            return Verified.UNIT
        return Verified.DEFINITION


@dataclass(frozen=True)
class Marked:
    """What one `req` marker covers: the weakest kind among its tests, and their names."""

    verified: Verified
    tests: tuple[str, ...]


_Def = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass
class _Module:
    path: Path
    tree: ast.Module
    imports: dict[str, str] = field(default_factory=dict)
    defs: dict[str, _Def] = field(default_factory=dict)
    fixtures: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = field(default_factory=dict)
    values: dict[str, ast.expr] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in self.tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.imports[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, _Def):
                self.defs[node.name] = node
                if not isinstance(node, ast.ClassDef) and (name := _fixture_name(node)):
                    self.fixtures[name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self.values[target.id] = node.value


class Verifier:
    """Derives `Verified` for the tests of one tree; `root` None reads each file on its own."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._modules: dict[Path, _Module | None] = {}
        self._uses: dict[tuple[Path, ast.AST], Uses] = {}
        self._source_roots = _source_roots(root)
        self._plugins = self._plugin_paths()

    def marker_kinds(self, path: Path, tree: ast.Module) -> dict[ast.Call, Marked]:
        """For each `req` marker call in the test file, the tests it marks and the weakest kind
        among them."""
        module = self._modules[path] = _Module(path, tree)
        kinds: dict[ast.Call, Marked] = {}
        tests = list(_tests(tree))
        for owners, calls in _markers_by_owner(tree, tests):
            each = [self._uses_of(module, owner).kind for owner in owners]
            marked = Marked(
                min(each, key=lambda v: v.rank, default=Verified.DEFINITION),
                tuple(owner.name for owner in owners),
            )
            for call in calls:
                kinds[call] = marked
        return kinds

    # What one definition uses, memoised; a cycle adds nothing.

    def _uses_of(self, module: _Module, node: _Def | ast.expr) -> Uses:
        key = (module.path, node)
        if key in self._uses:
            return self._uses[key]
        uses = self._uses[key] = Uses()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for name in _fixtures_asked(node):
                if found := self._fixture(module.path, name, skip=node):
                    uses.add(self._uses_of(*found))
        for child in _body_nodes(node):
            if isinstance(child, ast.Call):
                self._call(module, child, uses)
            if isinstance(child, ast.Name | ast.Attribute):
                self._reference(module, child, uses)
            elif isinstance(child, ast.List | ast.Tuple) and child.elts:
                _command(module, child.elts[0], uses)
            elif isinstance(child, ast.Constant) and isinstance(child.value, str):
                _harness_named(child.value, uses)  # a module run as a process, say
        return uses

    def _call(self, module: _Module, call: ast.Call, uses: Uses) -> None:
        if call.args:
            _command(module, call.args[0], uses)
        dotted = _dotted(module, call.func)
        if dotted and _under(dotted, (OUR_CODE,)) and not _under(dotted, DEFINITIONS):
            uses.code = True  # a harness's too: what else it starts outranks this

    def _reference(self, module: _Module, node: ast.Name | ast.Attribute, uses: Uses) -> None:
        dotted = _dotted(module, node)
        if dotted is None:
            if isinstance(node, ast.Name):
                local = module.defs.get(node.id) or module.values.get(node.id)
                if local is not None:
                    uses.add(self._uses_of(module, local))
            return
        harness = _harness_named(dotted, uses)
        if not (harness or _under(dotted, (OUR_CODE,))) and (found := self._helper(dotted)):
            uses.add(self._uses_of(*found))

    # Finding fixtures and helper modules.

    def _fixture(
        self, path: Path, name: str, skip: _Def
    ) -> tuple[_Module, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        for candidate in self._fixture_paths(path):
            module = self._module(candidate)
            if module and (fixture := module.fixtures.get(name)) and fixture is not skip:
                return module, fixture
        return None

    def _fixture_paths(self, path: Path) -> Iterator[Path]:
        yield path
        for folder in path.parents:
            conftest = folder / "conftest.py"
            if conftest != path:
                yield conftest
        yield from self._plugins

    def _helper(self, dotted: str) -> tuple[_Module, _Def] | None:
        """A definition in a Python module of this tree, by its dotted name."""
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            for source_root in self._source_roots:
                module = self._module(source_root.joinpath(*parts[:cut]).with_suffix(".py"))
                if module is not None:
                    found = module.defs.get(parts[cut])
                    return (module, found) if found else None
        return None

    def _module(self, path: Path) -> _Module | None:
        if path not in self._modules:
            self._modules[path] = None
            if self._root is not None and (self._root / path).is_file():
                try:
                    tree = ast.parse((self._root / path).read_text(), str(path))
                except (SyntaxError, UnicodeDecodeError, OSError):
                    return None
                self._modules[path] = _Module(path, tree)
        return self._modules[path]

    def _plugin_paths(self) -> list[Path]:
        conftest = self._module(Path("conftest.py"))
        if conftest is None:
            return []
        names: list[str] = []
        for node in conftest.tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
            ):
                names += [
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                ]
        paths = []
        for name in names:
            for source_root in self._source_roots:
                candidate = source_root.joinpath(*name.split(".")).with_suffix(".py")
                if self._module(candidate):
                    paths.append(candidate)
                    break
        return paths


def effective(verified: Verified, declared: str | None) -> Verified:
    """What a marker's tests verify: derived, or less where its `by=` says less."""
    if declared in set(Verified) and Verified(declared).rank < verified.rank:
        return Verified(declared)
    return verified


def placeholders(text: str) -> bool:
    """The file still holds a `PIN-ME` placeholder value."""
    return PLACEHOLDER.search(text) is not None


def unpinned_artifacts(texts: dict[Path, str]) -> set[Path]:
    """The artifacts that cannot be built yet: each folder holding a file with a `PIN-ME`
    value (an image's `versions.env`). Everything under such a folder belongs to it, so a
    requirement of that image is capped wherever in the image its code is."""
    return {path.parent for path, text in texts.items() if placeholders(text)}


def in_artifact(path: Path, artifacts: set[Path]) -> bool:
    """`path` is part of one of `artifacts` (folders)."""
    return any(folder in path.parents for folder in artifacts)


def _source_roots(root: Path | None) -> list[Path]:
    """Pants' `[source] root_patterns` (plain paths only), the repository root last."""
    roots: list[Path] = []
    if root is not None and (root / "pants.toml").is_file():
        try:
            config = tomllib.loads((root / "pants.toml").read_text())
        except tomllib.TOMLDecodeError:
            config = {}
        for pattern in config.get("source", {}).get("root_patterns", []):
            if isinstance(pattern, str) and "*" not in pattern:
                roots.append(Path(pattern.strip("/") or "."))
    return [r for r in roots if r != Path(".")] + [Path(".")]


def _under(dotted: str, prefixes: tuple[str, ...]) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in prefixes)


def _dotted(module: _Module, node: ast.expr) -> str | None:
    """`a.b.c` for a name or attribute chain whose root is an import, else None."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in module.imports:
        return None
    return ".".join([module.imports[node.id], *reversed(attrs)])


def _harness(dotted: str) -> frozenset[str] | None:
    """What `dotted` starts, by the longest `HARNESSES` prefix it is under; None outside them."""
    found = [prefix for prefix in HARNESSES if _under(dotted, (prefix,))]
    return HARNESSES[max(found, key=len)] if found else None


def _harness_named(dotted: str, uses: Uses) -> bool:
    """Whether `dotted` is in a harness, noting what that starts (a neutral one starts
    nothing)."""
    parts = _harness(dotted)
    if parts is None:
        return False
    uses.start(parts)
    return True


def _command(module: _Module, first: ast.expr, uses: Uses) -> None:
    """A command's first word: a real tool, one of our scripts run by a shell, or Python."""
    if _dotted(module, first) == "sys.executable":
        uses.code = True  # this interpreter, running a module or a script of ours
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return
    word = first.value.split(" ", 1)[0].rsplit("/", 1)[-1]
    if word in REAL_TOOLS or word.startswith("qemu-system-"):
        uses.real = True
    elif word in OUR_SCRIPT_RUNNERS:
        uses.code = True


def _body_nodes(node: _Def | ast.expr) -> Iterator[ast.AST]:
    """Every node of a definition's body (and decorators), or of a module-level value, leaving
    out annotations."""
    stack: list[ast.AST] = (
        [node] if isinstance(node, ast.expr) else [*node.body, *node.decorator_list]
    )
    while stack:
        current = stack.pop()
        yield current
        for name, value in ast.iter_fields(current):
            if name in ("annotation", "returns"):
                continue
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack += [v for v in value if isinstance(v, ast.AST)]


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "fixture":
            if isinstance(decorator, ast.Call):
                for keyword in decorator.keywords:
                    if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                        return str(keyword.value.value)
            return node.name
    return None


def _fixtures_asked(node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[str]:
    args = node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        if arg.arg not in ("self", "cls"):
            yield arg.arg
    for decorator in node.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "usefixtures"
        ):
            yield from (str(a.value) for a in decorator.args if isinstance(a, ast.Constant))


def _is_test(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")


def _tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in tree.body:
        if _is_test(node):
            assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            yield node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from (
                n
                for n in node.body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and _is_test(n)
            )


def _req_calls(node: ast.AST) -> list[ast.Call]:
    return [
        c
        for c in ast.walk(node)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and c.func.attr == "req"
        and isinstance(c.func.value, ast.Attribute)
        and c.func.value.attr == "mark"
    ]


def _markers_by_owner(
    tree: ast.Module, tests: list[ast.FunctionDef | ast.AsyncFunctionDef]
) -> Iterator[tuple[list[_Def], list[ast.Call]]]:
    """Each group of `req` markers with the definitions whose use decides their kind.

    A marker on (or in) a function belongs to it; on a class, or in its `pytestmark`, to its
    tests; in the module's `pytestmark`, to every test; in a module-level value (a table of
    `pytest.param` cases), to the tests that name that value; anywhere else, to every test.
    """
    for node in tree.body:
        calls = _req_calls(node)
        if not calls:
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield [node], calls
        elif isinstance(node, ast.ClassDef):
            methods: list[_Def] = [n for n in _tests(ast.Module([node], []))]
            for member in node.body:
                inner = _req_calls(member)
                if inner and isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield [member], inner
                elif inner:
                    yield methods, inner
            if rest := [c for d in node.decorator_list for c in _req_calls(d)]:
                yield methods, rest
        else:
            names = {
                t.id
                for t in (node.targets if isinstance(node, ast.Assign) else [])
                if isinstance(t, ast.Name)
            }
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            naming = [
                t
                for t in tests
                if names - {"pytestmark"}
                and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(t))
            ]
            owners: list[_Def] = list(naming or tests)
            yield owners, calls
