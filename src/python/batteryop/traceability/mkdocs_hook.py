"""An mkdocs hook (`hooks:` in mkdocs.yml) that adds `requirements/coverage.md` to the site,
rendered from the tree being built, so the published coverage is never stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# mkdocs loads a hook by its path; make the package it belongs to importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from batteryop.traceability.check import check_tree
from batteryop.traceability.report import render

PAGE = "requirements/coverage.md"


def on_files(files: Files, config: Any, **_: Any) -> Files:
    root = Path(config.config_file_path).resolve().parent
    files.append(File.generated(config, PAGE, content=render(check_tree(root))))
    return files
