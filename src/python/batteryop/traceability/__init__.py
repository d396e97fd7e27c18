"""Requirement traceability: the IDs `docs/requirements/` defines, and where code and tests
cite them.

- `documents`: reads the requirement pages (one family each).
- `citations`: finds citations in code comments, docstrings, YAML/shell/BUILD/Containerfile
  comments, and `@pytest.mark.req` markers.
- `verification`: how a test verifies what it cites (real, own fake, unit, definition only),
  from what it starts.
- `check`: rejects unknown IDs, waivers without a reason, tests of withdrawn requirements and a
  `by=` that says more than its test uses, and counts per family what is implemented and
  tested, and how (by each ID's weakest and strongest test).
- `report`: the coverage page of the docs site; `mkdocs_hook` adds it at build time.
- `audit`: a sample of IDs drawn at random with what the report counts for each, for a person
  to check by hand (`python -m batteryop.traceability sample N`).

A development tool, not a deployable: standard library only, imported by no deployable.
"""
