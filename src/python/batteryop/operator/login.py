"""kopf's login: the operator's own credentials (`KubeConfig`), handed to kopf from its
`@kopf.on.login` handler so kopf's watches and our client act as the same identity.
"""

from __future__ import annotations

import kopf

from batteryop.kube.config import KubeConfig


def kopf_connection_info(config: KubeConfig) -> kopf.ConnectionInfo:
    """The same credentials for kopf. A token file is read now; kopf calls its login handlers
    again when the server answers 401 and before `expiration`, so a rotated token is picked
    up."""
    token = config.bearer_token()
    return kopf.ConnectionInfo(
        server=config.server,
        ca_data=config.ca_data,
        insecure=config.insecure or None,
        scheme="Bearer" if token else None,
        token=token,
        certificate_data=config.cert_data,
        private_key_data=config.key_data,
        expiration=config.login_expiry(),
    )
