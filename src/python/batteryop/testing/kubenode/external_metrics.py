"""An external metrics API whose values a test sets, served to the real node's API server
through its aggregation layer (issue 44: a HorizontalPodAutoscaler scaling a Pool, RS-106).

`ExternalMetrics` serves `external.metrics.k8s.io/v1beta1` as a metrics adapter (KEDA's,
prometheus-adapter's) does, in the test's process on the machine's side of the Nodes' bridge
(`GATEWAY`), where the API server dials it. `serving(node)` registers it as an adapter is
registered: a Service without a selector, an EndpointSlice naming that address and port (the
API server's `--enable-aggregator-routing` dials it; see `node.aggregation_flags`), and the
APIService `v1beta1.external.metrics.k8s.io`, whose caBundle is the CA that signed the serving
certificate (the aggregator checks it, by the Service's DNS name); then it waits until the
aggregator's availability check finds it Available. At the block's end the APIService goes
before the server stops: an APIService that stops answering breaks discovery for the
controllers (the namespace controller and the garbage collector among them).

What it serves:

- `/apis/external.metrics.k8s.io` and `/apis/external.metrics.k8s.io/v1beta1`: the group and
  the resource list, which the aggregator's availability check and its discovery read (`/apis`
  is answered 404, so the aggregator falls back from aggregated to these documents);
- `/apis/external.metrics.k8s.io/v1beta1/namespaces/{namespace}/{metric}`: an
  ExternalMetricValueList of one item, the value `set()` last gave (404 before).

It answers the aggregator only: the connection must carry a client certificate the front
proxy's CA signed (`KubeNode.front_proxy_ca`; a certificate of another CA fails the handshake),
in one of `allowed_names` (403 otherwise; 401 without a certificate). The user the aggregator
forwards (`X-Remote-User`, `X-Remote-Group`) is recorded with each request (`requests()`).
Deliberate difference from an adapter: it asks the API server no SubjectAccessReview for that
user (the API server has authorized the request by RBAC before proxying it); the test checks
who asked instead.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socket import socket
from typing import TYPE_CHECKING, Any, Final

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from batteryop.testing.kubenode.machine import GATEWAY
from batteryop.testing.kubenode.names import FRONT_PROXY_CLIENT
from batteryop.tls import CertificateAuthority

if TYPE_CHECKING:
    from batteryop.testing.kubenode.node import KubeNode

GROUP: Final = "external.metrics.k8s.io"
VERSION: Final = "v1beta1"
GROUP_VERSION: Final = f"{GROUP}/{VERSION}"
API_SERVICE: Final = f"{VERSION}.{GROUP}"
NAMESPACE: Final = "batteryop-metrics"
"""The namespace of its Service and EndpointSlice."""
SERVICE: Final = "external-metrics"
SERVICE_PORT: Final = 443
PORT_NAME: Final = "https"
"""The Service's port and the EndpointSlice's share it: the aggregator matches them by name."""
AVAILABLE_TIMEOUT: Final = "120s"


@dataclass(frozen=True)
class Seen:
    """One request it answered: who the aggregator said asked, and for what."""

    user: str
    groups: tuple[str, ...]
    path: str
    status: int


@dataclass
class ExternalMetrics:
    """The server; `set()` a value, `start()` (or `serving(node)`) to serve."""

    front_proxy_ca: bytes
    """PEM of the CA whose client certificates it accepts."""
    allowed_names: frozenset[str] = frozenset({FRONT_PROXY_CLIENT})
    host: str = GATEWAY
    ca: CertificateAuthority = field(
        default_factory=lambda: CertificateAuthority.create("batteryop-external-metrics-ca")
    )
    """Signs its serving certificate; the APIService's caBundle."""
    _values: dict[tuple[str, str], str] = field(default_factory=dict)
    _seen: list[Seen] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    available_in: float = 0.0
    """Seconds from the APIService's apply to its Available condition (`serving`)."""
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    # -- the test's side ----------------------------------------------------------------------

    def set(self, namespace: str, metric: str, value: int | float) -> None:
        """From now on, `metric` in `namespace` is `value` (any thread)."""
        with self._lock:
            self._values[(namespace, metric)] = quantity(value)

    def requests(self) -> list[Seen]:
        """Every request answered so far, oldest first."""
        with self._lock:
            return list(self._seen)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("not serving")
        return int(self._server.server_address[1])

    # -- serving ------------------------------------------------------------------------------

    def start(self) -> None:
        """Serve on `host`, on a port of the kernel's choosing, until `stop()`."""
        context = self._tls_context()
        server = _TLSServer((self.host, 0), _handler(self), context)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._server = self._thread = None

    @contextmanager
    def serving(self, node: KubeNode) -> Iterator[ExternalMetrics]:
        """Serves and is registered with `node`'s API server, Available, until the block ends."""
        self.start()
        try:
            node.kubectl(["apply", "-f", "-"], stdin=yaml.safe_dump_all(self.api_objects()))
            applied = time.monotonic()
            try:
                node.kubectl(
                    [
                        "wait",
                        f"apiservice/{API_SERVICE}",
                        "--for=condition=Available",
                        f"--timeout={AVAILABLE_TIMEOUT}",
                    ]
                )
            except Exception as err:
                said = node.kubectl(["get", f"apiservice/{API_SERVICE}", "-o", "yaml"], check=False)
                raise AssertionError(f"{err}\n{said}\nrequests seen: {self.requests()}") from None
            self.available_in = time.monotonic() - applied
            yield self
        finally:
            node.kubectl(
                ["delete", f"apiservice/{API_SERVICE}", "--ignore-not-found", "--wait=true"],
                check=False,
            )
            node.kubectl(["delete", "namespace", NAMESPACE, "--ignore-not-found"], check=False)
            self.stop()

    def api_objects(self) -> list[dict[str, Any]]:
        """Its namespace, Service, EndpointSlice and APIService (serving: its port is known)."""
        return [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": SERVICE, "namespace": NAMESPACE},
                # No selector: its one endpoint is the EndpointSlice below.
                "spec": {
                    "ports": [{"name": PORT_NAME, "port": SERVICE_PORT, "targetPort": self.port}]
                },
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": SERVICE,
                    "namespace": NAMESPACE,
                    "labels": {
                        "kubernetes.io/service-name": SERVICE,
                        # Not the EndpointSlice controller's: it leaves this one alone.
                        "endpointslice.kubernetes.io/managed-by": "batteryop-tests",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.host], "conditions": {"ready": True}}],
                "ports": [{"name": PORT_NAME, "port": self.port, "protocol": "TCP"}],
            },
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": API_SERVICE},
                "spec": {
                    "group": GROUP,
                    "version": VERSION,
                    "service": {"namespace": NAMESPACE, "name": SERVICE, "port": SERVICE_PORT},
                    "caBundle": base64.b64encode(self.ca.cert_pem).decode(),
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                },
            },
        ]

    def _tls_context(self) -> ssl.SSLContext:
        """Its serving certificate for the name the aggregator checks (`<service>.<ns>.svc`);
        client certificates verified against the front proxy's CA when sent (required by the
        handler, so one without gets an HTTP answer rather than a failed handshake)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        serving = self.ca.issue(
            f"{SERVICE}.{NAMESPACE}.svc",
            hosts=[f"{SERVICE}.{NAMESPACE}.svc", self.host],
            server=True,
        )
        with tempfile.TemporaryDirectory() as folder:
            crt, key = serving.write(Path(folder), "serving")
            context.load_cert_chain(crt, key)
        context.load_verify_locations(cadata=self.front_proxy_ca.decode())
        context.verify_mode = ssl.CERT_OPTIONAL
        context.set_alpn_protocols(["http/1.1"])
        return context

    # -- answers ------------------------------------------------------------------------------

    def answer(self, path: str) -> tuple[int, dict[str, Any]]:
        """The status and body for a GET of `path` by the aggregator."""
        parts = path.split("?", 1)[0].strip("/").split("/")
        if parts == ["apis", GROUP]:
            return 200, api_group()
        if parts == ["apis", GROUP, VERSION]:
            with self._lock:
                metrics = sorted({metric for _, metric in self._values})
            return 200, resource_list(metrics)
        if len(parts) == 6 and parts[:3] == ["apis", GROUP, VERSION] and parts[3] == "namespaces":
            namespace, metric = parts[4], parts[5]
            with self._lock:
                value = self._values.get((namespace, metric))
            if value is not None:
                return 200, value_list(metric, value)
            return 404, status(404, f"no value for {metric} in {namespace}")
        return 404, status(404, f"{path} is not served here")

    def record(self, seen: Seen) -> None:
        with self._lock:
            self._seen.append(seen)


class _TLSServer(ThreadingHTTPServer):
    """TLS on each accepted connection, its handshake in the connection's own thread (a slow
    client never holds up the accept loop)."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        context: ssl.SSLContext,
    ) -> None:
        super().__init__(address, handler)
        self.context = context

    def get_request(self) -> tuple[socket, Any]:
        sock, address = super().get_request()
        return (
            self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False),
            address,
        )

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A dropped connection is no error of the server's; anything else is printed."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _handler(metrics: ExternalMetrics) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # the aggregator keeps its connections
        timeout = 30

        def handle(self) -> None:
            connection = self.connection
            assert isinstance(connection, ssl.SSLSocket)
            try:
                connection.do_handshake()
            except (ssl.SSLError, OSError):
                self.close_connection = True
                return
            super().handle()

        def do_GET(self) -> None:  # http.server's name
            code, body = self._authorized()
            if code == 200:
                code, body = metrics.answer(self.path)
            metrics.record(
                Seen(
                    user=self.headers.get("X-Remote-User", ""),
                    groups=tuple(self.headers.get_all("X-Remote-Group") or ()),
                    path=self.path,
                    status=code,
                )
            )
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> tuple[int, dict[str, Any]]:
            """200 for the front proxy's certificate; 401 without one, 403 for another name."""
            connection = self.connection
            assert isinstance(connection, ssl.SSLSocket)
            der = connection.getpeercert(binary_form=True)  # verified in the handshake
            if not der:
                return 401, status(401, "a client certificate is required")
            subject = x509.load_der_x509_certificate(der).subject
            names = {str(a.value) for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)}
            if not names & metrics.allowed_names:
                return 403, status(403, f"{sorted(names)} may not proxy requests here")
            return 200, {}

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def quantity(value: int | float) -> str:
    """`value` as a Kubernetes quantity: whole numbers as they are, others in thousandths."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def api_group() -> dict[str, Any]:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def resource_list(metrics: list[str]) -> dict[str, Any]:
    """The version's resources: one per metric, as metrics adapters list them."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": metric,
                "singularName": "",
                "namespaced": True,
                "kind": "ExternalMetricValueList",
                "verbs": ["get"],
            }
            for metric in metrics
        ],
    }


def value_list(metric: str, value: str) -> dict[str, Any]:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "kind": "ExternalMetricValueList",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": [{"metricName": metric, "metricLabels": {}, "timestamp": now, "value": value}],
    }


def status(code: int, message: str) -> dict[str, Any]:
    reasons = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reasons.get(code, ""),
        "code": code,
    }
