"""Every name the deployables and the client share: the one place each string is written.

The API group and version, the kinds and their plurals, the finalizers, the labels, taints and
annotations on Nodes and ConfigMaps, the CSR signer names, the Exec Agent's token audience, the
SPIFFE IDs, and the names of the objects the Manifests create. Anything else that needs one of
these strings imports it from here (docs/dev/conventions.md).

Requirements: RS-001 (group, version, kinds). The other names serve requirements that code
elsewhere implements and cites; this module only spells them (a name is not a behaviour).
"""

from __future__ import annotations

from typing import Final

# --- API group, version and kinds (RS-001; RS-002: there is no MicroVM kind) -----------------

GROUP: Final = "battery.liquidmetal-x.dev"
"""The API group of Pool and MicroVMClaim, also the prefix of every label and annotation."""

VERSION: Final = "v1alpha1"
"""The one served and stored version."""

API_VERSION: Final = f"{GROUP}/{VERSION}"
"""The `apiVersion` of every Pool and MicroVMClaim body."""

PREFIX: Final = f"{GROUP}/"
"""The prefix of our labels, annotations, finalizers and signer names."""

POOL_KIND: Final = "Pool"
"""Kind of a warm pool of MicroVMs."""
POOL_LIST_KIND: Final = "PoolList"
"""Kind of a list of Pools."""
POOL_PLURAL: Final = "pools"
"""Resource name of Pools (the URL path segment and RBAC resource)."""
POOL_SINGULAR: Final = "pool"
"""Singular resource name of a Pool."""
POOL_SHORT_NAMES: Final = ("bpool",)
"""kubectl short names of Pools (ours; `pool` alone is too common a word to claim)."""
POOL_CRD_NAME: Final = f"{POOL_PLURAL}.{GROUP}"
"""Name of the Pool CustomResourceDefinition."""

CLAIM_KIND: Final = "MicroVMClaim"
"""Kind of one consumer's hold on one MicroVM."""
CLAIM_LIST_KIND: Final = "MicroVMClaimList"
"""Kind of a list of MicroVMClaims."""
CLAIM_PLURAL: Final = "microvmclaims"
"""Resource name of MicroVMClaims."""
CLAIM_SINGULAR: Final = "microvmclaim"
"""Singular resource name of a MicroVMClaim."""
CLAIM_SHORT_NAMES: Final = ("mvmc",)
"""kubectl short names of MicroVMClaims (ours)."""
CLAIM_CRD_NAME: Final = f"{CLAIM_PLURAL}.{GROUP}"
"""Name of the MicroVMClaim CustomResourceDefinition."""

CATEGORY: Final = "battery"
"""kubectl category of both kinds: `kubectl get battery` lists Pools and claims."""

# --- Finalizers ------------------------------------------------------------------------------

CLAIM_FINALIZER: Final = f"{GROUP}/release"
"""Held by a claim until battery has released its MicroVM (CL-001, CL-020)."""

POOL_FINALIZER: Final = f"{GROUP}/pool"
"""Held by a Pool until battery no longer holds it (PO-001, PO-044)."""

# --- Labels and taints -----------------------------------------------------------------------

HOST_LABEL: Final = f"{GROUP}/host"
"""Marks a Node as a Host; the Exec Agent DaemonSet selects on it."""
HOST_LABEL_VALUE: Final = "true"
"""The value of HOST_LABEL on a Host."""

HOST_TAINT_KEY: Final = HOST_LABEL
"""Key of the taint that keeps ordinary Pods off Hosts."""
HOST_TAINT_VALUE: Final = "true"
"""Value of the Host taint."""
HOST_TAINT_EFFECT: Final = "NoSchedule"
"""Effect of the Host taint."""

HOST_IMAGE_LABEL: Final = f"{GROUP}/host-image"
"""A Host's Host Image reference (CAPI Machines); also the AMI tag of that name."""
FIRECRACKER_LABEL: Final = f"{GROUP}/firecracker"
"""Set on a Host that can run Firecracker MicroVMs."""
CLOUD_HYPERVISOR_LABEL: Final = f"{GROUP}/cloud-hypervisor"
"""Set on a Host that can run Cloud Hypervisor MicroVMs."""
HOST_POOL_LABEL: Final = f"{GROUP}/host-pool"
POOL_LABEL: Final = f"{GROUP}/pool"
"""The label key of a Pool's `scale` selector (RS-106). Nothing carries it today; the
HorizontalPodAutoscaler needs a selector, and external and object metrics do not use it."""


def pool_selector(pool: str) -> str:
    """The label selector a Pool's `scale` subresource reports (`status.selector`, RS-106)."""
    return f"{POOL_LABEL}={pool}"


"""The CAPI host pool a Host's Machine belongs to."""
DRAIN_GUARD_LABEL: Final = f"{GROUP}/drain-guard"
"""On the drain guard Pod and its PodDisruptionBudget; the value is the Node name."""

COMPONENT_LABEL: Final = "app.kubernetes.io/component"
"""Standard label naming a workload's component."""
COMPONENT_EXEC_AGENT: Final = "exec-agent"
"""COMPONENT_LABEL value of the Exec Agent."""
COMPONENT_BATTERY: Final = "battery"
"""COMPONENT_LABEL value of battery (the operator Pod's sidecar)."""

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
"""Standard label naming who manages an object."""
MANAGED_BY: Final = "battery-operator"
"""MANAGED_BY_LABEL value on objects the Operator creates (e.g. the CA bundle ConfigMap)."""

# --- Node annotations: the Exec Agent's Node report ------------------------------------------

EXEC_AGENT_READY_ANNOTATION: Final = f"{GROUP}/exec-agent-ready"
"""`"true"` or `"false"`: whether the Host can run claimed MicroVMs' commands."""
EXEC_AGENT_READY_TRUE: Final = "true"
"""The only value of EXEC_AGENT_READY_ANNOTATION that counts as ready."""
EXEC_AGENT_READY_FALSE: Final = "false"
"""The not-ready value of EXEC_AGENT_READY_ANNOTATION."""
EXEC_AGENT_REASON_ANNOTATION: Final = f"{GROUP}/exec-agent-reason"
"""CamelCase reason of the Node report (conditions.HostReportReason)."""
EXEC_AGENT_MESSAGE_ANNOTATION: Final = f"{GROUP}/exec-agent-message"
"""Human-readable detail of the Node report."""
EXEC_AGENT_ADDRESS_ANNOTATION: Final = f"{GROUP}/exec-agent-address"
"""`host:port` of the Host's Exec Agent."""
FLINTLOCKD_ADDRESS_ANNOTATION: Final = f"{GROUP}/flintlockd-address"
"""`host:port` where battery reaches the Host's flintlockd."""
DRAIN_STARTED_ANNOTATION: Final = f"{GROUP}/drain-started"
"""RFC 3339 time (nanoseconds) at which the Exec Agent saw its Node cordoned."""

EXEC_AGENT_MEMORY_LIMIT_MIB: Final = 256
"""The Exec Agent container's memory limit (MiB), which its default exec-stream limits fit in
(`exec_agent.memory`)."""

EXEC_AGENT_DRAIN_TIMEOUT_SECONDS: Final = 3600
"""How long, by default, an Exec Agent holds a drain of its Host open while claims are Bound
there (one hour). Host pools may not drain Nodes faster than this (HP-004)."""

EXEC_AGENT_DRAIN_GUARD_LINGER_SECONDS: Final = 60
"""How long, by default, an Exec Agent keeps its drain guard after the last claim Bound on its
Host went, while the Node is not cordoned (EA-042): a Host that serves claim after claim does
not make and delete a Pod and a PodDisruptionBudget for each one."""

# --- ConfigMap annotations: the battery config (host registry) -------------------------------

RESTART_PENDING_ANNOTATION: Final = f"{GROUP}/restart-pending"
"""`"true"` between writing a battery config and battery answering with it."""
CLIENT_CERTIFICATE_SHA256_ANNOTATION: Final = f"{GROUP}/client-certificate-sha256"
"""Hex SHA-256 of the flintlockd client certificate battery last restarted with."""
HOSTS_ANNOTATION: Final = f"{GROUP}/hosts"
"""The Host set the host registry published; the Pool controller resolves selectors on it."""

# --- AMI tags (Host Image publishing) --------------------------------------------------------

IMAGE_DIGEST_TAG: Final = f"{GROUP}/image-digest"
"""AMI tag: digest of the Host Image the AMI was made from."""
KUBERNETES_VERSION_TAG: Final = f"{GROUP}/kubernetes-version"
"""AMI tag: the Kubernetes version in the Host Image."""
HOST_IMAGE_TAG: Final = HOST_IMAGE_LABEL
"""AMI tag: the Host Image reference (same key as the label)."""
ARCHITECTURE_TAG: Final = f"{GROUP}/architecture"
"""AMI tag: amd64 or arm64."""

# --- Certificates: signers and SPIFFE IDs ----------------------------------------------------

FLINTLOCKD_SERVING_SIGNER: Final = f"{GROUP}/flintlockd-serving"
"""Signer of flintlockd's serving certificate on a Host."""
FLINTLOCKD_CLIENT_SIGNER: Final = f"{GROUP}/flintlockd-client"
"""Signer of the Exec Agent's flintlockd client certificate."""
EXEC_AGENT_SERVING_SIGNER: Final = f"{GROUP}/exec-agent-serving"
"""Signer of the Exec Agent's own serving certificate, signed by a CA of its own
(EXEC_AGENT_SERVING_CA_SECRET), so flintlockd's serving key cannot pass as the agent."""
SIGNERS: Final = (FLINTLOCKD_SERVING_SIGNER, FLINTLOCKD_CLIENT_SIGNER, EXEC_AGENT_SERVING_SIGNER)
"""Every signer the CSR approver acts for, and no other."""

SERVING_USAGES: Final = ("digital signature", "key encipherment", "server auth")
"""The CSR `spec.usages` of both serving signers, exactly."""
CLIENT_USAGES: Final = ("digital signature", "key encipherment", "client auth")
"""The CSR `spec.usages` of the flintlockd-client signer, exactly."""

DEFAULT_TRUST_DOMAIN: Final = GROUP
"""The SPIFFE trust domain the Manifests configure."""
TRUST_DOMAIN_PATTERN: Final = r"[a-z0-9._-]{1,255}"
"""What a SPIFFE trust domain may be (whole-string match): lowercase letters, digits, '.', '-',
'_'; at most 255."""


def spiffe_host_id(trust_domain: str, node: str) -> str:
    """SPIFFE ID in the serving certificate of flintlockd on `node`."""
    return f"spiffe://{trust_domain}/flintlock/host/{node}"


def spiffe_battery_client_id(trust_domain: str) -> str:
    """SPIFFE ID in battery's flintlockd client certificate."""
    return f"spiffe://{trust_domain}/flintlock/client/battery"


def spiffe_exec_agent_id(trust_domain: str, node: str) -> str:
    """SPIFFE ID of the Exec Agent on `node` (its client and its serving certificates)."""
    return f"spiffe://{trust_domain}/flintlock/client/exec-agent/{node}"


# --- The claim's exec credentials ------------------------------------------------------------

EXEC_AGENT_AUDIENCE: Final = f"{GROUP}/exec-agent"
"""Audience of the Holder's tokens, checked by the Exec Agent's TokenReview."""

EXEC_AGENT_PORT: Final = 10270
"""The port of the Exec Agent's exec API on its Host's internal address (EA-002)."""

FLINTLOCKD_PORT: Final = 9090
"""The port of flintlockd's gRPC API on a Host's internal address."""

EXEC_SECRET_SUFFIX: Final = "-exec"
"""Suffix of the Secret a claim's tokens are bound to."""


def exec_secret_name(claim_name: str) -> str:
    """Name of the Secret, owned by the claim, that the Holder's tokens are bound to."""
    return f"{claim_name}{EXEC_SECRET_SUFFIX}"


def claim_of_exec_secret(secret_name: str) -> str | None:
    """The claim whose `<claim>-exec` Secret is `secret_name`; None for any other name."""
    claim = secret_name.removesuffix(EXEC_SECRET_SUFFIX)
    return claim if claim and claim != secret_name else None


# --- Kubernetes' own keys we read --------------------------------------------------------------

NODE_NAME_EXTRA: Final = "authentication.kubernetes.io/node-name"
"""User extra naming the Node of the Pod a service-account token is bound to (Kubernetes >=
1.32): the Exec Agent checks its own identity by it, and a CSR records it in `spec.extra`, where
the CSR approver reads the requester's Node."""
CREDENTIAL_ID_EXTRA: Final = "authentication.kubernetes.io/credential-id"
"""User extra of a service-account token's id, `JTI=<jti>` (EA-012)."""


# --- Objects the Manifests create ------------------------------------------------------------

OPERATOR_NAMESPACE: Final = "battery-operator-system"
"""Namespace of the Operator, the Exec Agent and their configuration."""
OPERATOR_DEPLOYMENT: Final = "battery-operator-controller-manager"
"""The Operator's Deployment (operator, host-registry and battery containers)."""
EXEC_AGENT_NAME: Final = "battery-operator-exec-agent"
"""The Exec Agent's DaemonSet and ServiceAccount."""
BATTERY_DB_RESTORE_POD: Final = "battery-db-restore"
"""The Pod the Restore runbook runs (`kubectl run`) to restore battery's database (DP-117)."""
BATTERY_CONFIG_MAP: Final = "battery-operator-battery-config"
"""ConfigMap holding battery's config file, written by the host registry."""
FLINTLOCKD_CERT_DIR: Final = "/etc/battery/flintlockd"
"""Where the Exec Agent writes flintlockd's serving certificate, key and client CA (EA-064)."""
TLS_CERT_FILE: Final = "tls.crt"
"""File name of a certificate chain next to its key (written last: flintlockd starts on it)."""
TLS_KEY_FILE: Final = "tls.key"
"""File name of a private key (mode 0600)."""
HOST_CA_CERT_FILE: Final = "host-client-ca.crt"
"""File name, in FLINTLOCKD_CERT_DIR, of the Host's own client CA certificate (EA-126): it signs
the Exec Agent's flintlockd client certificates, and only this Host's flintlockd trusts it."""
HOST_CA_KEY_FILE: Final = "host-client-ca.key"
"""File name, in FLINTLOCKD_CERT_DIR, of the Host client CA's key (mode 0600, EA-126)."""

CA_BUNDLE_CONFIG_MAP: Final = "flintlockd-ca"
"""ConfigMap publishing the CA certificates, without keys."""
SERVING_CA_BUNDLE_KEY: Final = "serving-ca.crt"
"""Key of the serving CA certificate in CA_BUNDLE_CONFIG_MAP."""
CLIENT_CA_BUNDLE_KEY: Final = "client-ca.crt"
"""Key of the client CA certificate in CA_BUNDLE_CONFIG_MAP."""
EXEC_AGENT_SERVING_CA_BUNDLE_KEY: Final = "exec-agent-serving-ca.crt"
"""Key of the Exec Agent serving CA certificate in CA_BUNDLE_CONFIG_MAP: what a client trusts
for an Exec Agent, and nothing else (CT-101)."""
CA_READER_ROLE: Final = "battery-operator-ca-reader"
"""Role and RoleBinding letting every authenticated user read CA_BUNDLE_CONFIG_MAP (CT-107), so
a kubeconfig is all a client needs to trust the Exec Agents (CC-114)."""
AUTHENTICATED_GROUP: Final = "system:authenticated"
"""Kubernetes' group of every authenticated user."""
CSR_APPROVER_NAME: Final = "battery-operator-csr-approver"
"""The CSR approver's Deployment and ServiceAccount."""
ADDRESS_PINS_CONFIG_MAP: Final = "host-address-pins"
"""ConfigMap of Node name to pinned Host address."""
SERVING_CA_SECRET: Final = "flintlockd-serving-ca"
"""Secret of the CA signing flintlockd's serving certificates."""
EXEC_AGENT_SERVING_CA_SECRET: Final = "exec-agent-serving-ca"
"""Secret of the CA signing the Exec Agents' serving certificates, and nothing else (CT-101)."""
CLIENT_CA_SECRET: Final = "flintlockd-client-ca"
"""Secret of the CA signing flintlockd client certificates."""
BATTERY_CLIENT_SECRET: Final = "battery-flintlockd-client"
"""Secret of battery's flintlockd client certificate (cert-manager)."""
SELFSIGNED_ISSUER: Final = "selfsigned"
"""cert-manager Issuer that self-signs the CA certificates."""
CLIENT_CA_ISSUER: Final = CLIENT_CA_SECRET
"""cert-manager CA Issuer on CLIENT_CA_SECRET, which issues battery's client certificate."""
BATTERY_DATA_PVC: Final = "battery-data"
"""PersistentVolumeClaim of battery's SQLite database."""
FINALIZER_POLICY: Final = "battery-operator-finalizers"
"""MutatingAdmissionPolicy (and its binding) storing our finalizer on every new Pool and claim."""
EXEC_AGENT_ADMISSION_POLICY: Final = "battery-operator-exec-agent-own-host"
"""ValidatingAdmissionPolicy confining the Exec Agent to its own Node."""
DRAIN_GUARD_PREFIX: Final = "exec-agent-drain-guard-"
"""Prefix of the drain guard Pod and PodDisruptionBudget names."""


def drain_guard_name(node: str) -> str:
    """Name of the guard Pod and PodDisruptionBudget holding a drain of `node` open."""
    return f"{DRAIN_GUARD_PREFIX}{node}"


DRAIN_GUARD_IMAGE: Final = "registry.k8s.io/pause:3.10"
"""Default image of the drain guard Pod (`--guard-image`): it only has to stay running."""
