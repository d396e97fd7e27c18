"""The Host Image's build context as one reproducible archive.

`python -m batteryop.hostimage.context DEFINITION OUT.tar.gz` writes the folder DEFINITION
(`src/images/host`: Containerfile, versions.env, build/, rootfs/, selinux/, scripts) plus
`python/`, the Python the image runs at boot (`batteryop.hostconf`, `batteryop.hostimage` and
`batteryop.api.names`, taken from the modules this program imports), and `OUT.tar.gz.sha256`.

Reproducible: entries sorted by path, every mtime 0, owner root, modes 0755 (executable) or
0644, no pax headers, gzip without a name or timestamp. The same inputs give the same bytes.
`./pants package src/images/host:context` runs it (an `adhoc_tool`); HI-001 and HI-005 are what
the archive carries, built by build.sh where the base image can be reached.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import batteryop  # pants: no-infer-dep (the namespace root has no target of its own)
from batteryop import hostconf, hostimage
from batteryop.api import names

SKIP = {"BUILD", "__pycache__"}
"""Names never put in the context (Pants' files, bytecode)."""


def python_files() -> Iterator[tuple[str, Path]]:
    """(archive path, file) for the boot steps' Python: only what they import."""
    base = Path(batteryop.__file__).parent
    yield "python/batteryop/__init__.py", base / "__init__.py"
    yield "python/batteryop/api/__init__.py", Path(names.__file__).parent / "__init__.py"
    yield "python/batteryop/api/names.py", Path(names.__file__)
    for package in (hostconf, hostimage):
        folder = Path(str(package.__file__)).parent
        for path in sorted(folder.glob("*.py")):
            if path.name.endswith("_test.py") or path.name == "context.py":
                continue
            yield f"python/batteryop/{folder.name}/{path.name}", path


def definition_files(root: Path, exclude: set[Path]) -> Iterator[tuple[str, Path]]:
    for path in sorted(root.rglob("*")):
        if path.is_dir() or path.resolve() in exclude:
            continue
        rel = path.relative_to(root)
        if SKIP & set(rel.parts) or path.name.endswith(".pyc"):
            continue
        yield rel.as_posix(), path


def build(definition: Path, out: Path) -> str:
    """Write the archive and its `.sha256`; return the sha256."""
    exclude = {out.resolve(), out.with_name(out.name + ".sha256").resolve()}
    entries = dict(definition_files(definition, exclude))
    entries.update(python_files())
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(entries):
            path = entries[name]
            data = path.read_bytes()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as gz:
        gz.write(raw.getvalue())
    out.write_bytes(packed.getvalue())
    digest = hashlib.sha256(packed.getvalue()).hexdigest()
    out.with_name(out.name + ".sha256").write_text(f"{digest}  {out.name}\n")
    return digest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: context DEFINITION_DIR OUT.tar.gz", file=sys.stderr)
        return 2
    definition, out = Path(args[0]), Path(args[1])
    if not (definition / "Containerfile").is_file():
        print(f"context: {definition} has no Containerfile", file=sys.stderr)
        return 1
    print(f"{build(definition, out)}  {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
