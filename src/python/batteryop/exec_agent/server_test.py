from __future__ import annotations

import pytest

from batteryop.exec_agent.config import AgentConfigError
from batteryop.exec_agent.server import check_serving_certificate
from batteryop.tls import CertificateAuthority


@pytest.mark.req("EA-002")
def test_the_serving_certificate_must_name_the_serving_address() -> None:
    ca = CertificateAuthority.create("serving-ca")
    good = ca.issue(
        "host-a", hosts=["10.0.0.7", "spiffe://td/flintlock/client/exec-agent/a"], server=True
    )
    check_serving_certificate(good.cert_pem, "10.0.0.7")
    other = ca.issue("host-a", hosts=["10.0.0.8"], server=True)
    with pytest.raises(
        AgentConfigError, match="--tls-cert-file: the certificate does not name 10.0.0.7"
    ):
        check_serving_certificate(other.cert_pem, "10.0.0.7")
    with pytest.raises(AgentConfigError, match="not a PEM certificate"):
        check_serving_certificate(b"nonsense", "10.0.0.7")
