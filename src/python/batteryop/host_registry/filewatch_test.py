"""DirectoryWatch: a change in a watched directory wakes its waiter, as the kubelet's swap of a
volume's `..data` link does; a directory that cannot be watched is a WatchError naming it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from batteryop.host_registry.filewatch import DirectoryWatch, WatchError


async def test_a_swapped_data_link_wakes_the_waiter(tmp_path: Path) -> None:
    (tmp_path / "..2026_12_06_a").mkdir()
    os.symlink("..2026_12_06_a", tmp_path / "..data")
    changes: list[int] = []
    watch = DirectoryWatch([tmp_path], on_change=lambda: changes.append(watch.generation))
    watch.start()
    try:
        seen = watch.generation
        waiter = asyncio.create_task(watch.changed_after(seen, timeout=30))
        (tmp_path / "..2026_12_06_b").mkdir()
        os.symlink("..2026_12_06_b", tmp_path / "..data_tmp")
        os.rename(tmp_path / "..data_tmp", tmp_path / "..data")  # the kubelet's atomic swap
        assert await waiter is True
        assert watch.generation > seen and changes and changes[-1] == watch.generation
    finally:
        watch.close()
    watch.close()  # closing twice is harmless


async def test_nothing_changed_is_a_timeout(tmp_path: Path) -> None:
    watch = DirectoryWatch([tmp_path])
    watch.start()
    try:
        assert await watch.changed_after(watch.generation, timeout=0.05) is False
    finally:
        watch.close()


async def test_a_missing_directory_is_a_watch_error(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    watch = DirectoryWatch([tmp_path, missing])
    with pytest.raises(WatchError, match=f"cannot watch {missing}"):
        watch.start()
