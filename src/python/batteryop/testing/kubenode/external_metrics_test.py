"""The test external metrics API answers the aggregator as a metrics adapter does, and no one
else; its registration names its own address, port and CA (`external_metrics`)."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from batteryop.testing.kubenode import external_metrics
from batteryop.testing.kubenode.external_metrics import (
    GROUP_VERSION,
    NAMESPACE,
    SERVICE,
    ExternalMetrics,
)
from batteryop.testing.kubenode.names import FRONT_PROXY_CLIENT
from batteryop.tls import CertificateAuthority, KeyPair

HOST = "127.0.0.1"
SERVICE_NAME = f"{SERVICE}.{NAMESPACE}.svc"
"""The name the aggregator checks the serving certificate for."""
METRICS = f"/apis/{GROUP_VERSION}"


@dataclass(frozen=True)
class Served:
    metrics: ExternalMetrics
    front_proxy: CertificateAuthority


@pytest.fixture
def served() -> Iterator[Served]:
    front_proxy = CertificateAuthority.create("front-proxy-ca")
    metrics = ExternalMetrics(front_proxy.cert_pem, host=HOST)
    metrics.start()
    try:
        yield Served(metrics, front_proxy)
    finally:
        metrics.stop()


def get(
    metrics: ExternalMetrics, path: str, client: KeyPair | None, user: str = ""
) -> tuple[int, dict[str, Any]]:
    """GET `path` as the aggregator does: TLS checked for the Service's name against the
    APIService's CA, with `client`'s certificate and `user` in X-Remote-User."""
    context = ssl.create_default_context(cadata=metrics.ca.cert_pem.decode())
    if client is not None:
        with tempfile.TemporaryDirectory() as folder:
            context.load_cert_chain(*client.write(Path(folder), "client"))
    raw = socket.create_connection((HOST, metrics.port), timeout=5)
    connection = http.client.HTTPConnection(HOST, metrics.port, timeout=5)
    try:
        connection.sock = context.wrap_socket(raw, server_hostname=SERVICE_NAME)
        connection.request("GET", path, headers={"X-Remote-User": user} if user else {})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        raw.close()
        connection.close()


def test_the_front_proxy_reads_the_value_set_and_its_user_is_recorded(served: Served) -> None:
    proxy = served.front_proxy.issue(FRONT_PROXY_CLIENT, client=True)
    served.metrics.set("demo", "claims_waiting", 4)
    path = f"{METRICS}/namespaces/demo/claims_waiting?labelSelector="
    code, body = get(served.metrics, path, proxy, user="system:serviceaccount:kube-system:hpa")
    assert code == 200, body
    assert body["kind"] == "ExternalMetricValueList"
    assert body["apiVersion"] == GROUP_VERSION
    (item,) = body["items"]
    assert (item["metricName"], item["value"]) == ("claims_waiting", "4")
    served.metrics.set("demo", "claims_waiting", 0.5)
    assert get(served.metrics, path, proxy)[1]["items"][0]["value"] == "500m"
    # Another namespace, or a metric never set: not found.
    assert get(served.metrics, f"{METRICS}/namespaces/other/claims_waiting", proxy)[0] == 404
    users = [seen.user for seen in served.metrics.requests()]
    assert users[0] == "system:serviceaccount:kube-system:hpa"


def test_discovery_serves_the_group_and_its_metrics_and_no_aggregated_document(
    served: Served,
) -> None:
    proxy = served.front_proxy.issue(FRONT_PROXY_CLIENT, client=True)
    served.metrics.set("demo", "claims_waiting", 1)
    code, body = get(served.metrics, METRICS, proxy)
    assert code == 200
    assert (body["kind"], body["groupVersion"]) == ("APIResourceList", GROUP_VERSION)
    assert [(r["name"], r["namespaced"]) for r in body["resources"]] == [("claims_waiting", True)]
    code, body = get(served.metrics, "/apis/external.metrics.k8s.io", proxy)
    assert (code, body["preferredVersion"]["groupVersion"]) == (200, GROUP_VERSION)
    # The aggregator asks for /apis first; a 404 sends it to the documents above.
    assert get(served.metrics, "/apis", proxy)[0] == 404


@pytest.mark.parametrize(
    ("who", "code"),
    [
        ("no certificate", 401),
        ("the front proxy's CA, another name", 403),
    ],
)
def test_anyone_but_the_front_proxy_is_refused(served: Served, who: str, code: int) -> None:
    client = None if who == "no certificate" else served.front_proxy.issue("kubelet", client=True)
    served.metrics.set("demo", "claims_waiting", 1)
    answer, body = get(served.metrics, f"{METRICS}/namespaces/demo/claims_waiting", client)
    assert (answer, body["code"]) == (code, code)


def test_a_certificate_of_another_ca_fails_the_handshake(served: Served) -> None:
    stranger = CertificateAuthority.create("stranger").issue(FRONT_PROXY_CLIENT, client=True)
    with pytest.raises(OSError):
        get(served.metrics, METRICS, stranger)
    assert served.metrics.requests() == []


def test_its_registration_names_its_address_port_and_ca(served: Served) -> None:
    objects = {o["kind"]: o for o in served.metrics.api_objects()}
    service, slice_, api = objects["Service"], objects["EndpointSlice"], objects["APIService"]
    assert "selector" not in service["spec"]
    (port,) = service["spec"]["ports"]
    (endpoint,) = slice_["endpoints"]
    (slice_port,) = slice_["ports"]
    # The aggregator finds the endpoint by the Service's port name, and dials it.
    assert slice_port["name"] == port["name"]
    assert (endpoint["addresses"], slice_port["port"]) == ([HOST], served.metrics.port)
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == SERVICE
    assert api["metadata"]["name"] == external_metrics.API_SERVICE
    assert api["spec"]["service"] == {
        "namespace": NAMESPACE,
        "name": SERVICE,
        "port": port["port"],
    }
    assert base64.b64decode(api["spec"]["caBundle"]) == served.metrics.ca.cert_pem
    assert "insecureSkipTLSVerify" not in api["spec"]
