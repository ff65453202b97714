"""Credentials: Universe's Basic-auth header and where a remote's password comes from.

Both channels of a remote share one password (VNC uses its first 8 characters), and the
commands on both sides (``serve``, ``health``, ``play``) read it from the same places.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Final

PASSWORD_ENV: Final = "UNIVERSE_REMOTE_PASSWORD"
#: A file holding the password (Docker and Kubernetes secrets: /run/secrets/...).
PASSWORD_FILE_ENV: Final = "UNIVERSE_REMOTE_PASSWORD_FILE"
VIEW_ONLY_PASSWORD_ENV: Final = "UNIVERSE_REMOTE_VIEW_ONLY_PASSWORD"


def basic_auth_password(header: str | None) -> str | None:
    """The password of a Universe ``Basic base64("<password>:")`` header, or None."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[0]


def given_password(header: str | None) -> str | None:
    """The password in ``Authorization: Bearer <pw>`` or ``Basic base64("<pw>:")``, or None
    (the HTTP ports': OpenEnv's and MCP's)."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer":
        return token.strip() or None
    return basic_auth_password(header)


def default_password() -> str | None:
    """$UNIVERSE_REMOTE_PASSWORD, else the contents of the file $UNIVERSE_REMOTE_PASSWORD_FILE names.

    Raises SystemExit with what to fix when that file cannot be read: a remote started
    without the password its operator meant to give it must not start open.
    """
    password = os.environ.get(PASSWORD_ENV)
    if password:
        return password
    path = os.environ.get(PASSWORD_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError as exc:
            raise SystemExit(
                f"universe-remote: cannot read ${PASSWORD_FILE_ENV} ({path}): {exc}"
            ) from None
    return None
