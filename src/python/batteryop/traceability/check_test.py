"""The checker on small trees made in each test: what it accepts, rejects and counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from batteryop.traceability.__main__ import main
from batteryop.traceability.check import check_tree
from batteryop.traceability.citations import Kind, scan_text
from batteryop.traceability.documents import parse_pages
from batteryop.traceability.report import render

# The IDs below are built at run time, so this file itself cites nothing.
CL = "CL"
ONE, TWO, FOUR, NINE = (f"{CL}-00{n}" for n in (1, 2, 4, 9))
PAGE = f"""# Claims (CL)

- <a id="{ONE}"></a>**{ONE}** — When a claim is created, the operator shall do one thing.
- <a id="{TWO}"></a>**{TWO}** — When a claim is bound, the operator shall do another.
- <a id="{FOUR}"></a>**{FOUR}** *(withdrawn in v0.4.0)* — What it was.
- <a id="CL-100"></a>**CL-100** *(ours)* — Something beyond the reference.
"""


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "docs/requirements").mkdir(parents=True)
    (tmp_path / "docs/requirements/02-claims.md").write_text(PAGE)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_pages_give_each_id_its_state() -> None:
    catalogue = parse_pages([(Path("02-claims.md"), PAGE)])
    assert catalogue.problems == ()
    assert sorted(catalogue.requirements) == [ONE, TWO, FOUR, "CL-100"]
    assert catalogue.requirements[FOUR].status == "withdrawn"
    assert catalogue.requirements["CL-100"].ours
    assert catalogue.requirements[ONE].line == 3


@pytest.mark.parametrize(
    "line",
    [
        f'- <a id="{ONE}"></a>**{TWO}** — anchor and ID differ.',
        f'- <a id="{ONE}"></a>**{ONE}** - a hyphen, not a dash.',
        f'- <a id="{ONE}"></a>**{ONE}** *(someday)* — an unknown tag.',
        f"- **{ONE}** — no anchor.",
    ],
)
def test_a_broken_entry_is_a_problem_not_a_silent_gap(line: str) -> None:
    catalogue = parse_pages([(Path("p.md"), f"# P\n\n{line}\n")])
    assert len(catalogue.problems) == 1
    assert catalogue.problems[0].line == 3


def test_an_id_defined_twice_is_a_problem() -> None:
    entry = f'- <a id="{ONE}"></a>**{ONE}** — Once.\n'
    catalogue = parse_pages([(Path("a.md"), entry), (Path("b.md"), entry)])
    assert [str(p) for p in catalogue.problems] == [f"b.md:1: {ONE} is defined twice (also a.md:1)"]


def test_python_comments_docstrings_and_markers_are_read_but_strings_are_not() -> None:
    source = f'''"""Module doc naming {ONE}."""
import pytest

SAMPLE = "{NINE} is only data"


@pytest.mark.req("{TWO}")
def test_x() -> None:  # {ONE}: a comment
    """Doc of {TWO}."""
'''
    found = {(c.id, c.line, c.kind) for c in scan_text(Path("src/m_test.py"), source)}
    assert found == {
        (ONE, 1, Kind.MENTION),
        (TWO, 7, Kind.TEST),
        (ONE, 8, Kind.MENTION),
        (TWO, 9, Kind.MENTION),
    }
    in_code = {(c.id, c.kind) for c in scan_text(Path("src/m.py"), f"# {ONE}\n")}
    assert in_code == {(ONE, Kind.CODE)}


def test_yaml_and_shell_comments_are_code_citations() -> None:
    yaml = f"kind: Pool  # {ONE}: the kind\nname: '{NINE}'\n"
    assert [(c.id, c.line) for c in scan_text(Path("x.yaml"), yaml)] == [(ONE, 1)]
    shell = f"#!/bin/sh\n# {TWO}\necho {NINE}\n"
    assert [(c.id, c.kind) for c in scan_text(Path(".ci/run"), shell)] == [(TWO, Kind.CODE)]


@pytest.mark.parametrize(
    "form", ["CL-001..CL-002", "CL-001..002", "CL-001\u2013CL-002", "CL-001 to CL-002"]
)
def test_a_range_credits_only_ids_the_same_kind_of_citation_names_on_its_own(
    tmp_path: Path, form: str
) -> None:
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# {form}: both\n",
            "src/b.py": f"# {TWO}: this one on its own\n",
            # A test of ONE is not a code citation of it: the range still gives ONE no code.
            "tests/t_test.py": f'import pytest\n\n\n@pytest.mark.req("{ONE}")\ndef test() -> None: ...\n',
        },
    )
    result = check_tree(root)
    assert result.ok, result.problems
    assert result.traces[ONE].code == []
    assert not result.traces[ONE].implemented
    assert [(str(c.path), c.line) for c in result.traces[TWO].code] == [
        ("src/b.py", 1),
        ("src/a.py", 1),
    ]
    row = result.counts()[1]
    assert (row.implemented, row.tested) == (1, 1)
    same_line = check_tree(tree(tmp_path / "b", {"src/a.py": f"# {form}, and {TWO} itself\n"}))
    assert [t.implemented for t in (same_line.traces[ONE], same_line.traces[TWO])] == [
        False,
        True,
    ]


def test_a_range_in_a_test_marker_credits_only_ids_tested_on_their_own(tmp_path: Path) -> None:
    marker = f'import pytest\n\n\n@pytest.mark.req("{ONE}..{TWO}")\ndef test() -> None: ...\n'
    alone = check_tree(tree(tmp_path / "a", {"tests/t_test.py": marker}))
    assert alone.ok, alone.problems
    assert [t.tested for t in (alone.traces[ONE], alone.traces[TWO])] == [False, False]
    also = check_tree(
        tree(tmp_path / "b", {"tests/t_test.py": marker + marker.replace(f"{ONE}..", "")})
    )
    assert [t.tested for t in (also.traces[ONE], also.traces[TWO])] == [False, True]
    # A test range over a withdrawn ID is still rejected.
    withdrawn = marker.replace(f"..{TWO}", f"..{FOUR}")
    rejected = check_tree(tree(tmp_path / "c", {"tests/t_test.py": withdrawn}))
    assert [p.message for p in rejected.problems] == [
        f"{FOUR} is withdrawn; a test cannot check it"
    ]


@pytest.mark.parametrize(
    "negated",
    [
        f"there are no migrations (no {ONE})",
        f"Not {ONE}: that lives elsewhere",
        f"built WITHOUT  {ONE}",
        f"no {ONE}..{TWO} here",
    ],
)
def test_a_citation_that_negates_its_id_counts_for_nothing(tmp_path: Path, negated: str) -> None:
    marker = f'@pytest.mark.req("{TWO}")\ndef test() -> None: ...\n'
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# {negated}\n",
            "deploy/a.yaml": f"kind: Pool  # {negated}\n",
            "tests/t_test.py": f"import pytest\n\n\n{marker}".replace(TWO, f"not {TWO}"),
        },
    )
    result = check_tree(root)
    assert result.ok, result.problems
    assert [(t.code, t.tests) for t in (result.traces[ONE], result.traces[TWO])] == [
        ([], []),
        ([], []),
    ]
    assert {c.kind for c in scan_text(Path("src/a.py"), f"# {negated}\n")} == {Kind.MENTION}


def test_only_the_words_right_before_an_id_negate_it(tmp_path: Path) -> None:
    source = f"# casino {ONE}; no doubt about {TWO}\n# not here, but {NINE}\n"
    found = {(c.id, c.kind) for c in scan_text(Path("src/a.py"), source)}
    assert found == {(ONE, Kind.CODE), (TWO, Kind.CODE), (NINE, Kind.CODE)}
    # A negated ID must still be defined.
    result = check_tree(tree(tmp_path, {"src/a.py": f"# no {NINE}\n"}))
    assert [p.message for p in result.problems] == [f"{NINE}: no requirement page defines it"]


def test_unknown_ids_fail_wherever_they_appear(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# {NINE}: not defined\n",
            "docs/guide.md": f"See {NINE}.\n",
            "src/b.py": f"# {ONE}..{CL}-009\n",
        },
    )
    result = check_tree(root)
    assert sorted(str(p) for p in result.problems) == [
        f"docs/guide.md:1: {NINE}: no requirement page defines it",
        f"src/a.py:1: {NINE}: no requirement page defines it",
        f"src/b.py:1: {NINE}: no requirement page defines it",
    ]


def test_a_waiver_needs_a_reason(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# waive({ONE}):\n# waive({TWO}): needs a cloud account that CI lacks\n",
        },
    )
    result = check_tree(root)
    assert [str(p) for p in result.problems] == [f"src/a.py:1: waiver of {ONE} gives no reason"]
    assert [c.reason for c in result.traces[TWO].waivers] == ["needs a cloud account that CI lacks"]
    assert result.counts()[1].waived == 1


def test_a_test_of_a_withdrawn_requirement_fails_but_prose_may_name_it(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# {FOUR} was withdrawn in v0.4.0\n",
            "tests/t_test.py": f'import pytest\n\n\n@pytest.mark.req("{FOUR}")\ndef test() -> None: ...\n',
        },
    )
    result = check_tree(root)
    assert [str(p) for p in result.problems] == [
        f"tests/t_test.py:4: {FOUR} is withdrawn; a test cannot check it"
    ]


def test_counts_split_implementation_from_tests(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# {ONE}\n",
            "src/a_test.py": f'import pytest\n# {TWO} only mentioned\n@pytest.mark.req("{ONE}")\ndef test() -> None: ...\n',
        },
    )
    row = check_tree(root).counts()[1]
    assert (row.family, row.active, row.implemented, row.tested, row.withdrawn) == (
        "CL",
        3,
        1,
        1,
        1,
    )


def test_the_command_exits_non_zero_on_a_problem_and_prints_one_summary_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tree(tmp_path, {"src/a.py": f"# {ONE}\n"})
    assert main(["--root", str(root), "--markdown", str(tmp_path / "r.md")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("requirements: 3 active, 1 implemented (33%)")
    assert f"[{ONE}](02-claims.md#{ONE})" in (tmp_path / "r.md").read_text()
    (root / "src/b.py").write_text(f"# {NINE}\n")
    assert main(["--root", str(root)]) == 1
    assert f"src/b.py:1: {NINE}: no requirement page defines it" in capsys.readouterr().err


def test_planned_work_counts_for_neither_side(tmp_path: Path) -> None:
    root = tree(
        tmp_path, {"src/a.py": f'"""Not built yet: planned({ONE}..{TWO}).\n\nBuilt: {TWO}."""\n'}
    )
    result = check_tree(root)
    assert result.ok, result.problems
    assert [c.line for c in result.traces[ONE].planned] == [1]
    assert result.traces[ONE].code == []
    assert [c.line for c in result.traces[TWO].code] == [3]
    unknown = check_tree(tree(tmp_path / "b", {"src/a.py": f"# planned({NINE})\n"}))
    assert [p.message for p in unknown.problems] == [f"{NINE}: no requirement page defines it"]


def test_a_planned_or_waived_id_is_neither_implemented_nor_tested_whatever_cites_it(
    tmp_path: Path,
) -> None:
    test = f'import pytest\n\n\n@pytest.mark.req("{ONE}", "{TWO}")\ndef test() -> None: ...\n'
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# {ONE}\n# {TWO}\n",
            "src/b.py": f"# planned({ONE}): the rest of it\n",
            "src/c.py": f"# waive({TWO}): needs a cloud account that CI lacks\n",
            "tests/t_test.py": test,
        },
    )
    result = check_tree(root)
    assert result.ok, result.problems
    for rid in (ONE, TWO):
        trace = result.traces[rid]
        assert trace.code and trace.tests and trace.settled
        assert (trace.implemented, trace.tested) == (False, False)
    row = result.counts()[1]
    assert (row.implemented, row.tested, row.waived) == (0, 0, 1)
    page = render(result)
    assert "*planned:* `src/b.py` (1)<br>*not counted:* `src/a.py` (1)" in page
    assert (
        "*waived:* needs a cloud account that CI lacks<br>*not counted:* `tests/t_test.py` (4)"
        in page
    )


# How a test verifies (verification.py): derived from what it uses, lowered by `by=`, capped.

CONFTEST = 'pytest_plugins = ["batteryop.testing.pytest_plugin"]\n'
PLUGIN = """import pytest
from batteryop.testing.controlplane import start


@pytest.fixture
def controlplane():
    return start()
"""
FAKE_CONFTEST = """import pytest
from batteryop.testing.fake_battery import FakeBattery


@pytest.fixture
def battery():
    return FakeBattery()
"""


def marked(rid: str, body: str, params: str = "", by: str = "") -> str:
    """A test file with one test citing `rid`, whose body is `body`."""
    extra = f', by="{by}"' if by else ""
    return (
        "import subprocess\nimport sys\nfrom pathlib import Path\n\nimport pytest\n"
        "from batteryop.operator import bind\nfrom batteryop.api import names\n"
        "from batteryop.manifests import render\nfrom batteryop.testing import localstack\n\n"
        "HOSTS = bind.hosts()\nTEXT = Path('a.txt')\n\n\n"
        f'@pytest.mark.req("{rid}"{extra})\ndef test_it({params}) -> None:\n    {body}\n'
    )


def kinds(root: Path) -> dict[str, str | None]:
    result = check_tree(root)
    assert result.ok, result.problems
    return {rid: trace.verified for rid, trace in result.traces.items()}


@pytest.mark.parametrize(
    ("body", "params", "expected"),
    [
        # Reads a file or a constant: a definition.
        ("assert 'x' in Path('a.txt').read_text()", "", "definition"),
        ("assert names.GROUP == 'x'", "", "definition"),
        # Rendered objects read back are the Manifests' definition; applied to the real API
        # server, they are real.
        ("assert render.render()[0]['kind']", "", "definition"),
        ("controlplane.apply(render.render())", "controlplane", "real"),
        # Calls our code and starts nothing: a unit test.
        ("assert bind.step() is None", "", "unit"),
        # Our code against our fake battery: own fake.
        ("assert bind.step(battery) is None", "battery", "own-fake"),
        # The real control plane, through the root conftest's plugin: real; with a fake beside
        # it, own fake: the fake's part is not verified for real.
        ("assert controlplane", "controlplane", "real"),
        ("assert bind.step(battery, controlplane)", "battery, controlplane", "own-fake"),
        # The local stack runs the real API server with the fake battery and fake flintlockd.
        ("assert localstack.start()", "", "own-fake"),
        # A real external tool is real; a shell script of ours is our code; a unit linter reads.
        ("subprocess.run(['kubectl', 'apply'])", "", "real"),
        ("subprocess.run(['bash', 'src/build.sh'])", "", "unit"),
        ("subprocess.run(['systemd-analyze', 'verify', 'u.service'])", "", "definition"),
        # This interpreter running a script is our code; a fake run as a process is a fake.
        ("subprocess.run([sys.executable, '-c', 'print()'])", "", "unit"),
        ("subprocess.run(module_command('batteryop.testing.fake_battery'))", "", "own-fake"),
        # A module-level value counts as what made it.
        ("assert HOSTS.matching()", "", "unit"),
        ("assert TEXT.read_text()", "", "definition"),
        # An annotation is not a use.
        ("x: bind.Step = None", "", "definition"),
    ],
)
def test_a_tests_kind_follows_what_it_uses(
    tmp_path: Path, body: str, params: str, expected: str
) -> None:
    root = tree(
        tmp_path,
        {
            "conftest.py": CONFTEST,
            "src/python/batteryop/testing/pytest_plugin.py": PLUGIN,
            "src/python/batteryop/operator/conftest.py": FAKE_CONFTEST,
            "src/python/batteryop/operator/bind_test.py": marked(ONE, body, params),
            "src/a.py": f"# {ONE}\n",
            "pants.toml": '[source]\nroot_patterns = ["/src/python", "/tests", "/"]\n',
        },
    )
    assert kinds(root)[ONE] == expected


def test_a_helper_of_the_tests_is_followed_into_its_module(tmp_path: Path) -> None:
    helper = "import subprocess\n\n\ndef boot():\n    subprocess.run(['qemu-system-x86_64'])\n"
    test = marked(ONE, "boot()").replace(
        "import pytest\n", "import pytest\nfrom images.vm import boot\n"
    )
    root = tree(
        tmp_path,
        {
            "pants.toml": '[source]\nroot_patterns = ["/tests", "/"]\n',
            "tests/images/vm.py": helper,
            "tests/images/vm_test.py": test,
        },
    )
    assert kinds(root)[ONE] == "real"
    (root / "tests/images/vm.py").write_text("def boot():\n    return 'text'\n")
    assert kinds(root)[ONE] == "definition"


def test_the_weakest_test_of_an_id_decides_and_by_can_only_lower_it(tmp_path: Path) -> None:
    root = tree(
        tmp_path,
        {
            "tests/a_test.py": marked(ONE, "subprocess.run(['kubectl', 'apply'])"),
            "tests/b_test.py": marked(ONE, "assert names.GROUP"),
            "tests/c_test.py": marked(TWO, "assert bind.step() is None", by="definition"),
            "tests/d_test.py": marked("CL-100", "assert bind.step() is None"),
        },
    )
    assert [kinds(root)[rid] for rid in (ONE, TWO, "CL-100")] == [
        "definition",
        "definition",
        "unit",
    ]
    result = check_tree(root)
    assert result.traces[ONE].strongest == "real"
    page = render(result)
    assert "*real:* `tests/a_test.py` (15)<br>*definition only:* `tests/b_test.py` (15)" in page
    assert "| definition only<br>*strongest:* real |" in page
    assert (
        "by the weakest test: real 0, own fake 0, unit 1, definition only 2; "
        "by the strongest: real 1, own fake 0, unit 1, definition only 1"
    ) in result.summary()
    (root / "tests/b_test.py").write_text(marked(ONE, "assert names.GROUP", by="unit"))
    (root / "tests/c_test.py").write_text(marked(TWO, "assert names.GROUP", by="checked"))
    assert sorted(str(p) for p in check_tree(root).problems) == [
        'tests/b_test.py:15: by="unit" says more than its tests use (definition; see '
        "verification.py)",
        'tests/c_test.py:15: by=\'checked\' is not one of "definition", "unit", "own-fake", '
        '"real"',
    ]


def test_a_module_mark_covers_every_test_and_a_case_table_the_tests_naming_it(
    tmp_path: Path,
) -> None:
    source = f"""import pytest
from batteryop.operator import bind

pytestmark = pytest.mark.req("{ONE}")
CASES = [pytest.param(1, marks=pytest.mark.req("{TWO}"))]


def test_text() -> None:
    assert "x"


@pytest.mark.parametrize("n", CASES)
def test_cases(n: int) -> None:
    assert n


def test_code() -> None:
    assert bind.step()
"""
    root = tree(tmp_path, {"tests/t_test.py": source})
    found = kinds(root)
    # The module's mark takes the weakest of its three tests; the table's, its one test's.
    assert (found[ONE], found[TWO]) == ("definition", "definition")
    (marks,) = check_tree(root).traces[ONE].tests
    assert marks.tests == ("test_text", "test_cases", "test_code")


BATTERY_PAGE = """# battery (BA)

- <a id="BA-001"></a>**BA-001** — When asked, battery shall hand out a MicroVM.
"""


def test_battery_ids_are_at_most_own_fake_and_placeholder_pins_make_definitions(
    tmp_path: Path,
) -> None:
    root = tree(
        tmp_path,
        {
            "docs/requirements/10-battery.md": BATTERY_PAGE,
            "tests/a_test.py": marked(ONE, "subprocess.run(['kubectl'])").replace(
                f'"{ONE}"', f'"{ONE}", "{TWO}", "BA-001"'
            ),
            "src/images/versions.env": f"# {TWO}: the base\nBASE=x@sha256:PIN-ME\n",
        },
    )
    found = kinds(root)
    assert (found[ONE], found[TWO], found["BA-001"]) == ("real", "definition", "own-fake")
    result = check_tree(root)
    assert "3 tested (75%; by the weakest test: real 1, own fake 1, unit 0, definition only 1;" in (
        result.summary()
    )
    assert f"| [{TWO}](02-claims.md#{TWO})" in render(result)
    assert "| definition only (capped) |" in render(result)
    # A placeholder named in a comment is not a placeholder value.
    (root / "src/images/versions.env").write_text(f"# {TWO}: PIN-ME means unpinned\nBASE=x\n")
    assert kinds(root)[TWO] == "real"


def test_a_placeholder_caps_every_id_of_its_artifact_wherever_in_it_the_id_is_cited(
    tmp_path: Path,
) -> None:
    test = marked(ONE, "subprocess.run(['kubectl'])").replace(
        f'"{ONE}"', f'"{ONE}", "{TWO}", "CL-100"'
    )
    root = tree(
        tmp_path,
        {
            "tests/a_test.py": test,
            "src/images/guest/rootfs/versions.env": "BASE=x@sha256:PIN-ME\n",
            "src/images/guest/rootfs/Containerfile": f"# {ONE}: the base\nFROM x\n",
            "src/images/guest/rootfs/files/etc/a.conf": f"# {TWO}: a file of the image\n",
            "src/images/guest/boot/init.sh": "# CL-100: another image, pinned\n",
        },
    )
    found = kinds(root)
    assert (found[ONE], found[TWO], found["CL-100"]) == ("definition", "definition", "real")
    result = check_tree(root)
    assert [c.unpinned for c in result.traces[TWO].code] == [True]
    assert "| definition only (capped) |" in render(result)


TEST_DOUBLES_PAGE = """# Test doubles (TD)

- <a id="TD-001"></a>**TD-001** — An end-to-end test shall take a claim through binding.
- <a id="TD-002"></a>**TD-002** — The fake battery shall serve battery's API.
"""


def test_a_test_double_or_layer_requirement_is_implemented_by_the_tests_citing_it(
    tmp_path: Path,
) -> None:
    root = tree(
        tmp_path,
        {
            "docs/requirements/08-test-doubles.md": TEST_DOUBLES_PAGE,
            "tests/e2e/a_test.py": marked("TD-001", "subprocess.run(['kubectl'])"),
        },
    )
    result = check_tree(root)
    assert result.ok, result.problems
    e2e, fake = result.traces["TD-001"], result.traces["TD-002"]
    assert (e2e.implemented, e2e.code, fake.implemented) == (True, [], False)
    assert "| *by its tests* | *real:* `tests/e2e/a_test.py` (15) | real |" in render(result)
    # Only TD: another family's requirement is not implemented by its tests.
    assert not result.traces[ONE].implemented


def test_the_sample_audit_prints_each_drawn_id_with_its_code_tests_and_kinds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tree(
        tmp_path,
        {
            "src/a.py": f"# {ONE}\n\n# {TWO}\n",
            "tests/a_test.py": marked(ONE, "subprocess.run(['kubectl'])"),
            "tests/b_test.py": marked(ONE, "assert names.GROUP", by="definition"),
        },
    )
    assert main(["sample", "5", "--seed", "3", "--root", str(root)]) == 0
    sheet = capsys.readouterr().out
    # Fewer active IDs than asked for: all three, in ID order, with the seed to draw them again.
    assert sheet.splitlines()[0] == (
        "3 of 3 active requirements, drawn with seed 3 "
        "(python -m batteryop.traceability sample 5 --seed 3)"
    )
    assert [line.split(" ")[0] for line in sheet.splitlines() if line[:3] == "CL-"] == [
        ONE,
        TWO,
        "CL-100",
    ]
    one = sheet.split(f"{ONE} — ")[1].split(f"\n\n{TWO}")[0]
    assert one.splitlines()[1:] == [
        "  defined: docs/requirements/02-claims.md:3",
        "  implemented: yes",
        "    code src/a.py:1",
        "  tested: weakest definition only, strongest real",
        "    test tests/a_test.py:15 real: test_it",
        '    test tests/b_test.py:15 definition only by="definition": test_it',
    ]
    assert "CL-100 (ours) — Something beyond the reference.\n" in sheet
    assert "  implemented: no\n  tested: no\n" in sheet
    # The same seed draws the same IDs; a smaller sample is drawn from them all.
    assert main(["sample", "1", "--seed", "3", "--root", str(root)]) == 0
    first = capsys.readouterr().out
    assert main(["sample", "1", "--seed", "3", "--root", str(root)]) == 0
    assert capsys.readouterr().out == first
    assert len([line for line in first.splitlines() if line[:3] == "CL-"]) == 1
    # Without a seed, one is chosen and printed.
    assert main(["sample", "1", "--root", str(root)]) == 0
    assert "drawn with seed " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["sample", "0", "--root", str(root)])
