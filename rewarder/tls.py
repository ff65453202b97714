"""TLS for a remote's ports: the server's context, the agent's verifying one, and what
to say when a certificate is not trusted.

Holds :class:`ServerTLS` (:func:`server_tls` builds it from a certificate and key file),
:func:`client_context`, :func:`untrusted` and :class:`TLSSetupError`. Like the password
(:mod:`.auth`), one certificate serves every port: the rewarder (``wss://``), the browser
viewer (``https://``), VNC (VeNCrypt) and dm_env_rpc (gRPC), so both sides build their
contexts here and hand the same objects to each channel (``vncdriver`` imports nothing
of this package: it only receives an :class:`ssl.SSLContext`).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CERT_ENV: Final = "UNIVERSE_REMOTE_TLS_CERT"
KEY_ENV: Final = "UNIVERSE_REMOTE_TLS_KEY"
#: The CA agents trust for TLS remotes (default: the system's trust store).
CA_ENV: Final = "UNIVERSE_REMOTE_TLS_CA"
#: Oldest TLS either end speaks: 1.0 and 1.1 are deprecated (RFC 8996).
MIN_VERSION: Final = ssl.TLSVersion.TLSv1_2
#: Certificate files larger than this are not PEM certificates (a chain is a few KB).
MAX_PEM_BYTES: Final = 1024 * 1024

_CERT_MARK: Final = b"-----BEGIN CERTIFICATE-----"
_KEY_MARK: Final = b"PRIVATE KEY-----"
_MAKE_ONE: Final = (
    "for a test, `python -m trustme` writes a CA (client.pem) and a certificate for "
    "localhost/127.0.0.1 (server.pem, server.key)"
)


class TLSSetupError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names the file,
    what is wrong with it and what to do."""


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """A remote's certificate: the context the rewarder, viewer and VNC servers take,
    and the PEM bytes gRPC wants (it does not take an :class:`ssl.SSLContext`)."""

    cert: Path
    key: Path
    context: ssl.SSLContext
    cert_pem: bytes
    key_pem: bytes


def _read(path: Path, what: str, source: str) -> bytes:
    """The bytes of a PEM file; ``source`` says where its name came from."""
    try:
        if path.stat().st_size > MAX_PEM_BYTES:
            raise TLSSetupError(
                f"the TLS {what} {path} is {path.stat().st_size} bytes, not a PEM file "
                f"(over {MAX_PEM_BYTES}); pass the PEM file"
            )
        return path.read_bytes()
    except FileNotFoundError:
        raise TLSSetupError(
            f"the TLS {what} {path} does not exist: check {source}"
        ) from None
    except IsADirectoryError:
        raise TLSSetupError(f"the TLS {what} {path} is a directory; pass the PEM file in it") from None
    except PermissionError:
        raise TLSSetupError(
            f"cannot read the TLS {what} {path}: permission denied; make it readable by "
            f"the user running the remote (uid {os.getuid()})"
        ) from None
    except OSError as exc:
        raise TLSSetupError(f"cannot read the TLS {what} {path}: {exc.strerror or exc}") from None


def _encrypted_key() -> bytes:
    """``load_cert_chain``'s password callback: a remote starts unattended, never prompts."""
    raise TLSSetupError("encrypted")


def server_tls(cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> ServerTLS:
    """Load ``cert`` (PEM, the server's certificate first, then any intermediates) and
    its private ``key``, once, for every port; TLS 1.2 or newer.

    Raises :class:`TLSSetupError` saying which file is missing, unreadable, not PEM,
    encrypted, or not the key of that certificate.
    """
    cert_path, key_path = Path(cert).expanduser(), Path(key).expanduser()
    cert_pem = _read(cert_path, "certificate", f"--tls-cert or ${CERT_ENV}")
    key_pem = _read(key_path, "key", f"--tls-key or ${KEY_ENV}")
    if _CERT_MARK not in cert_pem:
        swapped = _KEY_MARK in cert_pem
        hint = " (it holds a private key: are --tls-cert and --tls-key swapped?)" if swapped else ""
        raise TLSSetupError(
            f"the TLS certificate {cert_path} holds no PEM certificate "
            f"('-----BEGIN CERTIFICATE-----'){hint}; {_MAKE_ONE}"
        )
    if _KEY_MARK not in key_pem:
        raise TLSSetupError(
            f"the TLS key {key_path} holds no PEM private key ('-----BEGIN ... PRIVATE "
            f"KEY-----'); pass the key the certificate {cert_path} was issued for"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = MIN_VERSION
    # No TLS 1.3 session tickets: TigerVNC's viewer (1.12) stalls about every other time
    # when a ticket and the first VNC bytes (the challenge) arrive in one read (measured:
    # 4 in 6 connections hung until our handshake deadline). Nothing here resumes sessions.
    context.num_tickets = 0
    try:
        context.load_cert_chain(cert_path, key_path, password=_encrypted_key)
    except TLSSetupError:
        raise TLSSetupError(
            f"the TLS key {key_path} is encrypted and a remote starts without a prompt: "
            f"decrypt it (openssl pkey -in {key_path} -out plain.key) and keep it readable "
            "only by the remote's user"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TLSSetupError(
                f"the TLS key {key_path} is not the key of the certificate {cert_path}: "
                "pass the key the certificate was issued for"
            ) from None
        raise TLSSetupError(
            f"cannot load the TLS certificate {cert_path} with the key {key_path}: "
            f"{exc.reason or exc}; both must be PEM"
        ) from None
    return ServerTLS(cert_path, key_path, context, cert_pem, key_pem)


def pinned_context(cert: str | os.PathLike[str]) -> ssl.SSLContext:
    """A context that trusts exactly the certificate in ``cert`` (the server's own file),
    whatever the name dialled: how a remote's own health check (the Docker image's
    HEALTHCHECK) reaches it on 127.0.0.1 when it serves TLS with a certificate for
    another name, and from a CA the container does not hold."""
    path = Path(cert).expanduser()
    pem = _read(path, "certificate", f"--tls-cert or ${CERT_ENV}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = MIN_VERSION
    context.check_hostname = False  # the pin is the check: only this certificate passes
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a leaf is its own anchor
    try:
        context.load_verify_locations(cadata=pem.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise TLSSetupError(f"cannot load the TLS certificate {path}: {exc.reason or exc}") from None
    return context


def client_context(ca: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """A context that verifies the remote's certificate and name: against ``ca`` (a PEM
    file of CA certificates), else $UNIVERSE_REMOTE_TLS_CA, else the system's trust store.

    Raises :class:`TLSSetupError` for a CA file that cannot be used.
    """
    chosen = ca if ca is not None else os.environ.get(CA_ENV) or None
    context = ssl.create_default_context()
    context.minimum_version = MIN_VERSION
    if chosen is None:
        return context
    path = Path(chosen).expanduser()
    pem = _read(path, "CA file", f"tls_ca= (--tls-ca) or ${CA_ENV}")
    if _CERT_MARK not in pem:
        raise TLSSetupError(
            f"the TLS CA file {path} holds no PEM certificate: pass the CA certificate that "
            f"issued the remote's (tls_ca= or ${CA_ENV})"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies certificate and host name
    context.minimum_version = MIN_VERSION
    try:
        context.load_verify_locations(cadata=pem.decode("ascii", errors="replace"))
    except ssl.SSLError as exc:
        raise TLSSetupError(f"cannot load the TLS CA file {path}: {exc.reason or exc}") from None
    return context


def verification_error(exc: BaseException | None) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind ``exc`` (its causes and contexts
    included), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


#: OpenSSL's reasons when what answered a TLS client speaks something else (plain
#: HTTP, RFB): a remote served without a certificate.
_NOT_TLS: Final = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                             "HTTP_REQUEST", "UNKNOWN_PROTOCOL"})


def tls_failure(where: str, exc: ssl.SSLError) -> str:
    """What to tell an agent whose TLS handshake with ``where`` (H:P) failed."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return untrusted(where, exc)
    if exc.reason in _NOT_TLS:
        return not_tls(where, exc.reason)
    return f"the TLS handshake with {where} failed: {exc.reason or exc}"


def not_tls(where: str, why: str) -> str:
    """What to tell an agent that asked ``where`` (H:P) for TLS and got none."""
    return (
        f"{where} does not speak TLS ({why}): is it a remote served without --tls-cert? "
        "Then its address is vnc://, not vnc+tls://"
    )


def untrusted(where: str, exc: ssl.SSLCertVerificationError) -> str:
    """What to tell an agent whose client refused the certificate of ``where`` (H:P)."""
    why = exc.verify_message or exc.reason or str(exc)
    return (
        f"certificate of {where} not trusted ({why}): pass tls_ca=CA.pem (the CA that "
        f"issued it) or set ${CA_ENV}"
    )
