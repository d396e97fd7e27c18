"""A third-party tarball is checked, unpacked and built once per sha256."""

import io
import tarfile
from pathlib import Path

import pytest

from batteryop.release.debs import sha256_of
from batteryop.release.third_party import Tarball, ThirdPartyError, built_once


class ThingError(RuntimeError):
    pass


def tarball(folder: Path) -> Tarball:
    path = folder / "thing-1.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in [("thing-1/go.mod", "module thing\n"), ("thing-1/main.go", "x")]:
            info = tarfile.TarInfo(name)
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text.encode()))
    return Tarball(path.name, sha256_of(path))


def test_a_tarball_is_built_once_from_its_unpacked_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATTERYOP_CACHE", str(tmp_path / "cache"))
    pinned = tarball(tmp_path)
    trees: list[Path] = []

    def build(tree: Path, out: Path) -> None:
        trees.append(tree)
        (out / "bin").mkdir()
        (out / "bin" / "thing").write_text((tree / "main.go").read_text())

    first = built_once("thing", pinned, build, folder=tmp_path)
    again = built_once("thing", pinned, build, folder=tmp_path)
    assert first == again == tmp_path / "cache" / "thing" / pinned.sha256
    assert (first / "bin" / "thing").read_text() == "x"
    assert [t.name for t in trees] == ["thing-1"]  # the second call built nothing
    assert not (first / "partial").exists()


def test_a_missing_or_altered_tarball_is_refused_with_the_callers_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATTERYOP_CACHE", str(tmp_path / "cache"))
    pinned = tarball(tmp_path)

    def build(tree: Path, out: Path) -> None:
        raise AssertionError("never built")

    altered = Tarball(pinned.filename, "0" * 64)
    with pytest.raises(ThingError, match="sha256"):
        built_once("thing", altered, build, folder=tmp_path, error=ThingError)
    with pytest.raises(ThirdPartyError, match="not found"):
        built_once("thing", Tarball("other.tar.gz", pinned.sha256), build, folder=tmp_path)
