"""A simulated Host's files: its certificates and the paths its Exec Agent checks.

Three CAs are made here, those the stack puts in the CA Secrets the CSR approver reads:
flintlockd's serving CA, the client CA (battery's flintlockd client certificate, one for all
Hosts, as `names.BATTERY_CLIENT_SECRET` holds it) and the Exec Agents' serving CA (CT-101:
`exec_serving_ca_file` is what a user's `battery` trusts, `$BATTERY_CA` in the `env` file). The
Hosts' certificates come from each Host's Exec Agent: its serving certificates by CSR, its
flintlockd client certificate from its own Host CA (EA-060..EA-068, EA-126); battery's client
certificate and the serving CA are written here, into one folder laid out as battery's
container and the host registry's mount it (`battery_tls_dir`: `tls.crt`, `tls.key`,
`serving-ca.crt`, the names battery's config gives every Host).

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
from batteryop.battery import configfile
from batteryop.tls import CertificateAuthority
from batteryop.tls.pki import write_secret

CERT_VALIDITY = datetime.timedelta(days=2)
THIN_POOL = "flintlock-thinpool"


@dataclass(frozen=True)
class Pki:
    serving_ca: CertificateAuthority
    client_ca: CertificateAuthority
    exec_serving_ca: CertificateAuthority
    serving_ca_file: Path
    client_ca_file: Path
    exec_serving_ca_file: Path
    """The Exec Agents' serving CA: the one CA a client trusts for an Exec Agent (CT-101)."""
    battery_tls_dir: Path
    """battery's flintlockd client certificate and key and the serving CA (DP-005, IN-004)."""

    @classmethod
    def create(cls, directory: Path) -> Pki:
        directory.mkdir(parents=True, exist_ok=True)
        serving = CertificateAuthority.create("devstack-flintlockd-serving-ca", CERT_VALIDITY)
        client = CertificateAuthority.create("devstack-flintlockd-client-ca", CERT_VALIDITY)
        exec_serving = CertificateAuthority.create("devstack-exec-agent-serving-ca", CERT_VALIDITY)
        serving_file = directory / names.SERVING_CA_BUNDLE_KEY
        serving_file.write_bytes(serving.cert_pem)
        client_file = directory / names.CLIENT_CA_BUNDLE_KEY
        client_file.write_bytes(client.cert_pem)
        exec_serving_file = directory / names.EXEC_AGENT_SERVING_CA_BUNDLE_KEY
        exec_serving_file.write_bytes(exec_serving.cert_pem)
        battery_id = names.spiffe_battery_client_id(names.DEFAULT_TRUST_DOMAIN)
        pair = client.issue("battery", hosts=[battery_id], client=True, validity=CERT_VALIDITY)
        tls_dir = directory / "battery-tls"
        tls_dir.mkdir(mode=0o700)
        (tls_dir / configfile.TLS_CERT_FILE).write_bytes(pair.cert_pem)
        write_secret(tls_dir / configfile.TLS_KEY_FILE, pair.key_pem)
        (tls_dir / configfile.SERVING_CA_FILE).write_bytes(serving.cert_pem)
        return cls(
            serving, client, exec_serving, serving_file, client_file, exec_serving_file, tls_dir
        )


@dataclass(frozen=True)
class HostFiles:
    """Everything one simulated Host's processes read."""

    name: str
    address: str
    root: Path
    cert_dir: Path
    """flintlockd's certificate folder, which the Exec Agent fills (EA-064) and flintlockd
    reads: `tls.crt`, `tls.key`, `client-ca.crt`; the Host CA's files beside them (EA-126)."""
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
