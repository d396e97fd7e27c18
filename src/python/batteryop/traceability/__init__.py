"""Requirement traceability: the IDs `docs/requirements/` defines, and where code and tests
cite them.

- `documents`: reads the requirement pages (one family each).
- `citations`: finds citations in code comments, docstrings, YAML/shell/BUILD/Containerfile
  comments, and `@pytest.mark.req` markers.
- `check`: rejects unknown IDs, waivers without a reason and tests of withdrawn requirements,
  and counts per family what is implemented and tested.
- `report`: the coverage page of the docs site; `mkdocs_hook` adds it at build time.

A development tool, not a deployable: standard library only, imported by no deployable.
"""
