"""A simulated Host's files: its certificates and the paths its Exec Agent checks.

Certificates come from the same two CAs the CSR approver signs with (the CA Secrets the stack
creates), laid out as the Exec Agent's DaemonSet mounts them (`manifests.exec_agent.CERT_DIR`):
flintlockd's serving certificate for the Host's address and SPIFFE ID, the agent's flintlockd
client certificate and its exec API serving certificate, and battery's flintlockd client
certificate (one for all Hosts, as `names.BATTERY_CLIENT_SECRET` holds it). Until the agent
gets its certificates by CSR, planned(EA-060..EA-068), they are written here.

The Host checks look at a made-up Host under the Host's directory: KVM's sysfs entry, the
thin pool among the device-mapper devices, an empty not-ready directory (EA-031..EA-033); the
KVM device node is /dev/null, a character device every machine has. A file put into
`not_ready_dir` makes the agent report the Host not ready, as the Host Image's units do.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from batteryop.api import names
from batteryop.tls import CertificateAuthority

CERT_VALIDITY = datetime.timedelta(days=2)
THIN_POOL = "flintlock-thinpool"


@dataclass(frozen=True)
class Pki:
    serving_ca: CertificateAuthority
    client_ca: CertificateAuthority
    serving_ca_file: Path
    client_ca_file: Path
    battery_cert: Path
    battery_key: Path

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        serving = CertificateAuthority.create("devstack-flintlockd-serving-ca", CERT_VALIDITY)
        client = CertificateAuthority.create("devstack-flintlockd-client-ca", CERT_VALIDITY)
        serving_file = directory / names.SERVING_CA_BUNDLE_KEY
        serving_file.write_bytes(serving.cert_pem)
        client_file = directory / names.CLIENT_CA_BUNDLE_KEY
        client_file.write_bytes(client.cert_pem)
        battery_id = names.spiffe_battery_client_id(names.DEFAULT_TRUST_DOMAIN)
        battery_cert, battery_key = client.issue(
            "battery", hosts=[battery_id], client=True, validity=CERT_VALIDITY
        ).write(directory, "battery-client")
        return cls(serving, client, serving_file, client_file, battery_cert, battery_key)


@dataclass(frozen=True)
class HostFiles:
    """Everything one simulated Host's processes read."""

    name: str
    address: str
    root: Path
    cert_dir: Path
    """flintlockd's certificate folder, which the Exec Agent fills by CSR (EA-064) and
    flintlockd reads: `tls.crt`, `tls.key`, `client-ca.crt`."""
    not_ready_dir: Path
    kvm_sysfs_dir: Path
    sys_block_dir: Path
    flintlockd_state: Path

    @classmethod
    def create(cls, root: Path, name: str, address: str, pki: Pki) -> HostFiles:
        # No certificate is made here: the Host's Exec Agent makes the keys and gets every
        # certificate by CSR from the CSR approver, as on a real Host (EA-060..EA-068).
        cert_dir = root / "flintlockd-certs"
        cert_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        kvm = root / "sys/class/misc/kvm"
        kvm.mkdir(parents=True)
        (kvm / "dev").write_text("10:232\n")
        block = root / "sys/block"
        (block / "dm-0/dm").mkdir(parents=True)
        (block / "dm-0/dm/name").write_text(f"{THIN_POOL}\n")
        not_ready = root / "not-ready.d"
        not_ready.mkdir()
        state = root / "flintlockd"
        state.mkdir()
        return cls(
            name=name,
            address=address,
            root=root,
            cert_dir=cert_dir,
            not_ready_dir=not_ready,
            kvm_sysfs_dir=kvm,
            sys_block_dir=block,
            flintlockd_state=state,
        )
