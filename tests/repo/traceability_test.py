"""The repository's own requirement citations pass the checker (`batteryop.traceability`):
every cited ID is defined in docs/requirements/, every waiver gives a reason, no test claims a
withdrawn requirement. The README's test command runs this, so an unknown ID fails the build.
The report's kinds hold on the tree itself where a hand audit (issue 46) found them too strong.
"""

from pathlib import Path

import pytest

from batteryop.traceability.audit import sample
from batteryop.traceability.check import Result, check_tree
from batteryop.traceability.documents import FAMILIES, Status
from batteryop.traceability.verification import Verified, effective


@pytest.fixture(scope="module")
def result() -> Result:
    return check_tree(Path.cwd())


def test_every_citation_in_the_repository_names_a_defined_requirement(result: Result) -> None:
    print(result.summary())
    assert [str(p) for p in result.problems] == []


def test_the_check_sees_every_family_and_the_whole_tree(result: Result) -> None:
    counts = {row.family: row for row in result.counts()}
    assert set(counts) == set(FAMILIES)
    assert all(row.active + row.withdrawn > 0 for row in counts.values()), counts
    # A citation from each kind of place, so a missing file target cannot pass silently.
    cited_in = {c.path.parts[0] for t in result.traces.values() for c in t.code + t.tests}
    assert {"src", "tests"} <= cited_in
    assert any(c.path.suffix == ".yaml" for t in result.traces.values() for c in t.code)


def test_no_test_that_starts_a_fake_counts_as_real(result: Result) -> None:
    """The local stack (tests/integration), the dev stack (tests/e2e) and the real node with
    battery's container playing the fake (tests/cluster, but the Nodes' own module) all run the
    fake battery; the Nodes alone (tests/cluster/nodes_test.py) start nothing of ours."""
    tests = [c for t in result.traces.values() for c in t.tests]
    nodes_only = Path("tests/cluster/nodes_test.py")
    for folder in ("integration", "e2e", "cluster", "contract"):
        kinds = {
            c.path: effective(c.verified or Verified.DEFINITION, c.declared)
            for c in tests
            if c.path.parts[:2] == ("tests", folder) and c.path != nodes_only
        }
        real = sorted(str(path) for path, kind in kinds.items() if kind is Verified.REAL)
        assert kinds and not real, (folder, real)
    assert {c.verified for c in tests if c.path == nodes_only} == {Verified.REAL}


def test_an_images_ids_share_its_pin_me_cap_and_an_ids_kind_is_its_weakest_tests(
    result: Result,
) -> None:
    # Both are implemented in the guest's root filesystem, whose versions.env is unpinned.
    for rid in ("GI-011", "GI-014"):
        assert result.traces[rid].verified is Verified.DEFINITION, rid
    for trace in result.traces.values():
        if trace.tested and trace.verified is not None and trace.strongest is not None:
            assert trace.verified.rank <= trace.strongest.rank, trace.requirement.id
            assert trace.verified.rank <= min(k.rank for k in trace.kinds())


def test_the_sample_audit_of_the_repository_lists_each_id_with_its_tests(result: Result) -> None:
    active = [t for t in result.traces.values() if t.requirement.status is Status.ACTIVE]
    sheet = sample(result, len(active), seed=46)
    for trace in active:
        assert f"\n{trace.requirement.id}" in sheet
        for citation in trace.tests:
            assert f"    test {citation.path}:{citation.line} " in sheet
