"""The documentation site's figures, drawn when the site is built (issue 28).

- `graphviz`: Graphviz `dot` source to inline SVG (Debian's `graphviz` package; no network).
- `sequence`: sequence diagrams from plain message lines, drawn as SVG at the page's width.
- `install`: the install diagram, from the rendered `install.yaml` (`install.snapshot.yaml`,
  which a test keeps equal to what `batteryop.manifests.render` gives).
- `plots`: the benchmark plots, drawn with matplotlib from the figures recorded in
  `docs/dev/results/*.json`, each with when, where and how it was measured.
- `mkdocs_hook`: puts them in the pages (`hooks:` in mkdocs.yml).
"""
