"""Who may call the service: an optional API key, compared in constant time, and the loopback check for --host.

With a key, every request but the health checks carries `Authorization: Bearer <key>` (or, on /translate,
LibreTranslate's `api_key` body field). hmac.compare_digest takes as long for a near miss as for a far one,
so response times do not leak the key byte by byte.
"""

from __future__ import annotations

import hmac
import ipaddress

PUBLIC_PATHS = ("/health/live", "/health/ready")


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def key_matches(candidate: str | None, key: str) -> bool:
    """True when candidate equals key (constant-time compare of their UTF-8 bytes)."""
    if candidate is None:
        return False
    return hmac.compare_digest(candidate.encode("utf-8"), key.encode("utf-8"))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost; any other address or name counts as reachable from outside."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
