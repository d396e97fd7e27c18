"""The documentation site's own code: the mkdocs hooks that write the controllers' steps into
the pages, from the code that runs them, and add the metrics reference.

- `steps`: each controller's `CHAIN` and `LAST`, read from its `reconcile.py` (Python's `ast`),
  each step with its module's summary, and the Markdown table of them.
- `claim_life`: the claim's life as a Graphviz diagram, from the same reading.
- `mkdocs_hook`: puts them in the pages (`hooks:` in mkdocs.yml).
- `metrics_hook`: adds `metrics.md`, every exported metric from its definition
  (`batteryop.obs.exported`, which needs only prometheus_client).

A library of the docs, not of a deployable: it reads the deployables' source and imports
none of them, so the site builds with mkdocs alone (no generated protobuf code, no gRPC, no
Kubernetes client). The figures it writes as `dot` blocks are drawn by `batteryop.figures`.
"""
