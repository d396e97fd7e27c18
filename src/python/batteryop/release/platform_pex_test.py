"""The per-architecture PEX files carry native code for their machine only (DP-103).

Each PEX is opened as the zip it is: every wheel under `.deps/` must be pure Python or
tagged for the PEX's machine, and every shared object in it must be an ELF file for that
machine (the ELF header's e_machine), so the aarch64 PEX built on this x86_64 machine holds
aarch64 grpcio, cryptography and aiohttp where the deployable uses them.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

ELF_MACHINE = {"x86_64": 62, "aarch64": 183}
PEX_DIR = Path("src.python.batteryop.release")
NATIVE = {
    "battery-operator": ("grpcio", "aiohttp"),
    "exec-agent": ("grpcio", "cryptography"),
    "csr-approver": ("cryptography", "aiohttp"),
    "host-registry": ("grpcio", "aiohttp"),
}
"""Native wheels each deployable must carry (what its code imports)."""


def wheels_and_objects(pex: Path) -> tuple[set[str], dict[str, int]]:
    wheels: set[str] = set()
    machines: dict[str, int] = {}
    with zipfile.ZipFile(pex) as z:
        for name in z.namelist():
            parts = name.split("/")
            if parts[0] == ".deps" and len(parts) > 1 and parts[1]:
                wheels.add(parts[1])
            if name.endswith(".so") or ".so." in name.rsplit("/", 1)[-1]:
                header = z.read(name)[:20]
                assert header[:4] == b"\x7fELF", f"{name} is not an ELF file"
                machines[name] = struct.unpack("<H", header[18:20])[0]
    return wheels, machines


@pytest.mark.req("DP-103")
@pytest.mark.parametrize("machine", ["aarch64", "x86_64"])
@pytest.mark.parametrize("deployable", ["battery-operator", "exec-agent", "csr-approver"])
def test_a_platform_pex_holds_native_code_for_its_machine_only(
    deployable: str, machine: str
) -> None:
    pex = PEX_DIR / f"{deployable}-linux_{machine}.pex"
    wheels, objects = wheels_and_objects(pex)
    other = next(m for m in ELF_MACHINE if m != machine)
    for wheel in wheels:
        tags = wheel.removesuffix(".whl").split("-")[-1]
        assert other not in tags, f"{pex.name}: {wheel} is for {other}"
        assert tags == "any" or machine in tags, f"{pex.name}: {wheel} is not for {machine}"
    for native in NATIVE[deployable]:
        assert any(
            w.startswith(f"{native}-") and machine in w for w in wheels
        ), f"{pex.name} has no {machine} wheel of {native}: {sorted(wheels)}"
    assert objects, f"{pex.name} holds no shared object"
    wrong = {name: m for name, m in objects.items() if m != ELF_MACHINE[machine]}
    assert not wrong, f"{pex.name}: shared objects not for {machine}: {sorted(wrong)[:5]}"
    print(f"{pex.name}: {len(wheels)} wheels, {len(objects)} {machine} shared objects")
