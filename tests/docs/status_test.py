"""The docs say what exists: no stale status text, and every path the home page and the README
name is in the repository.

The first check is a table of status sentences that were once true and are not any more: if one
comes back (in the site or the README), the test names the page and what exists instead. The
second reads every repository path (`src/...`, `tests/...`, `docs/...`, ...), Pants target
(`path:name`) and `batteryop` module the home page and the README name, in prose, backticks,
links and commands alike, and checks that it is there.
"""

import re
from pathlib import Path

# A phrase (case-insensitive, whitespace-insensitive) that must not appear, and why not.
STALE = [
    ("is being built", "every deployable exists and is tested; say what is not real yet instead"),
    ("the operator follow", "the operator exists (src/python/batteryop/operator)"),
    ("the battery contract and the operator", "both exist: tests/contract, the operator"),
    ("foundation (build, test control plane) is in place", "far more than the foundation is"),
    ("no release yet", "./pants package :: builds the release (docs/releasing.md)"),
    ("install.yaml does not exist", "the release renders it (batteryop.manifests)"),
    ("no real node yet", "tests/cluster runs a real kubelet (docs/dev/real-node.md)"),
    ("no cert-manager controller runs in the tests", "cert-manager issues them on the real node"),
    ("no Flux controller has", "tests/cluster/flux_test.py installs and upgrades through Flux"),
    ("written by the test harness", "cert-manager issues install.yaml's Certificates (TD-116)"),
    ("Secrets are written by the harness", "cert-manager issues them on the real node (TD-116)"),
    ("there is no Helm chart", "batteryop.manifests.chart generates one (docs/install.md)"),
]

# The pages whose named paths are checked: what a newcomer reads first.
FRONT_PAGES = ["README.md", "docs/index.md"]

ROOTS = ("src", "tests", "docs", "3rdparty", "pants-plugins", ".ci")
ROOT = "|".join(map(re.escape, ROOTS))
PATH = re.compile(rf"(?<![\w./~-])((?:{ROOT})/[\w./*-]*(?::[\w-]+)?)")
MODULE = re.compile(r"(?<![\w./-])(batteryop(?:\.\w+)+)")


def docs_and_readme() -> list[Path]:
    pages = [Path("README.md"), *sorted(Path("docs").rglob("*.md"))]
    assert len(pages) > 20, pages  # the whole site, not an empty sandbox
    return pages


def stale_sentences(text: str) -> list[tuple[str, str]]:
    flat = " ".join(text.split()).lower()
    return [(phrase, why) for phrase, why in STALE if phrase.lower() in flat]


def named_paths(text: str) -> set[str]:
    return {m.rstrip(".,;)") for m in PATH.findall(text)}


def missing(name: str) -> bool:
    """Whether a named path or `path:target` is absent from the repository."""
    path, _, target = name.partition(":")
    if "*" in path:
        return not any(Path().glob(path))
    if not target:
        return not Path(path).exists()
    build = Path(path) / "BUILD"
    return not build.is_file() or f'name="{target}"' not in build.read_text()


def missing_module(module: str) -> bool:
    base = Path("src/python", *module.split("."))
    return not (base.is_dir() or base.with_suffix(".py").is_file())


def test_no_page_has_stale_status_text() -> None:
    found = [
        f"{page}: {phrase!r} ({why})"
        for page in docs_and_readme()
        for phrase, why in stale_sentences(page.read_text())
    ]
    assert not found, "\n".join(found)


def test_every_path_the_front_pages_name_exists() -> None:
    for page in FRONT_PAGES:
        text = Path(page).read_text()
        paths, modules = named_paths(text), set(MODULE.findall(text))
        print(f"{page}: {len(paths)} paths, {len(modules)} modules")
        assert paths, f"{page} names no path: the pattern is broken"
        absent = sorted(p for p in paths if missing(p)) + sorted(
            m for m in modules if missing_module(m)
        )
        assert absent == [], f"{page} names what is not in the repository"


def test_the_checks_catch_what_they_are_for() -> None:
    stale = "The project is being\nbuilt. The foundation (build, test control plane) is in place"
    assert [p for p, _ in stale_sentences(stale)] == [
        "is being built",
        "foundation (build, test control plane) is in place",
    ]
    text = (
        "Run `./pants run src/python/batteryop/devstack:up`, see (docs/index.md), `tests/nowhere`."
    )
    assert named_paths(text) == {
        "src/python/batteryop/devstack:up",
        "docs/index.md",
        "tests/nowhere",
    }
    assert not missing("src/python/batteryop/devstack:up")
    assert missing("src/python/batteryop/devstack:no-such-target")
    assert missing("tests/nowhere")
    assert not missing_module("batteryop.devstack.main") and missing_module("batteryop.nowhere")
