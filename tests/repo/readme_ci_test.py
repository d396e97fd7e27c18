"""The README's two setup commands stay true: CI runs exactly the README's test command."""

import re
from pathlib import Path


def readme_commands() -> list[str]:
    text = Path("README.md").read_text()
    block = re.search(r"## Setup: two commands\s+```bash\n(.*?)```", text, re.S)
    assert block, "README.md has no 'Setup: two commands' bash block"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_has_exactly_two_setup_commands() -> None:
    main_job, tests = readme_commands()
    assert main_job.startswith("./pants run ")
    assert tests.startswith("./pants ") and " test " in f"{tests} "


def test_ci_runs_the_readmes_test_command_and_counts_tests() -> None:
    _, tests = readme_commands()
    ci = Path(".ci/run").read_text()
    runs = [line.strip() for line in ci.splitlines() if line.strip().startswith("./pants ")]
    # Besides it, only the background prebuild of the real node's Go programs, which runs no test.
    prebuild = "./pants --concurrent run src/python/batteryop/testing/kubenode:prebuild "
    others = [r for r in runs if not (r.startswith(prebuild) and r.endswith("&"))]
    assert others == [f"{tests} || status=$?"], runs
    assert len(runs) <= 2, runs
    assert "no test ran" in ci
