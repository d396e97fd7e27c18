"""`token_payload`: the claims of a JSON Web Token, read without verifying it.

The one reader of a token's payload: the kubeconfig's (`config.token_expiry`, only to know
when to log in again) and the Exec Agent's (`exec_agent.auth`: the bound Secret and the
audience a token names, before and after the API server has reviewed it). Neither trusts what
it reads for anything the API server does not check. Standard library only, so the client
wheel may import it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any


def token_payload(token: str) -> Mapping[str, Any] | None:
    """The JSON payload of a JWT, unverified; None when `token` is not a JWT (three dot-separated
    segments, the second base64url JSON object)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    segment = parts[1]
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError):
        return None
    return payload if isinstance(payload, Mapping) else None
