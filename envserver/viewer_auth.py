"""Who may use the browser viewer, and how a page that got in keeps its files coming.

Holds :class:`ViewerAuth` (passwords, the page's session cookie, the bridge's single-use
tokens, refusals that say what to do), :func:`credentials`, :func:`cross_site` and the
limits. :class:`envserver.viewer.Viewer` asks it about every request.

A page is opened with the password (HTTP Basic auth, or ``?password=`` as Universe's
viewer URL had it). Its scripts, styles and noVNC's modules are then fetched by the
browser without it, so the page's response sets a **session cookie**: random, kept
server-side with its role and an idle expiry (:data:`SESSION_LIFETIME`, renewed by each
use: the page polls its status every 2 s), ``HttpOnly``, ``SameSite=Strict``, and
``Secure`` (with the ``__Host-`` prefix) over https. Every viewer file needs the password
or that cookie; without a password configured, only this machine (loopback) may watch.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable
from typing import Final

from aiohttp import web

from vncdriver.addresses import is_loopback
from vncdriver.server import AuthGuard

#: Seconds a session token may wait before it opens the bridge (the page uses it at once).
TOKEN_LIFETIME: Final = 60.0
#: Idle seconds before a page's session cookie stops opening the viewer's files; each
#: request with it renews it, so an open page (it polls every 2 s) keeps it.
SESSION_LIFETIME: Final = 300.0
#: Sessions remembered at once; past it the least recently used is forgotten (that page
#: needs the password again). Each is a few dozen bytes.
MAX_SESSIONS: Final = 1024
#: Bytes of randomness in a session cookie.
SESSION_BYTES: Final = 32

REALM: Final = "universe-remote viewer"
#: The request key where :meth:`ViewerAuth.role` leaves why the throttle refused it.
BLOCKED: Final = web.RequestKey("blocked", str)
CONTROL, VIEW = "control", "view"
#: The role of the control password (``serve --control-password``): input from the
#: browser, whatever the viewer's view-only default.
PLAY: Final = "play"
#: The role of player N's password on a multi-player remote: ``player-N``.
PLAYER_PREFIX: Final = "player-"


def player_role(player: int) -> str:
    return f"{PLAYER_PREFIX}{player}"


def role_player(role: str) -> int | None:
    """The player a ``player-N`` role drives, else None."""
    number = role.removeprefix(PLAYER_PREFIX)
    return int(number) if role.startswith(PLAYER_PREFIX) and number.isdigit() else None


def valid_role(role: str) -> bool:
    return role in (CONTROL, VIEW, PLAY) or role_player(role) is not None


def credentials(request: web.BaseRequest) -> list[str]:
    """Passwords a request offers: both fields of Basic auth, and ``?password=``."""
    offered = []
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(token.strip(), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user = password = ""
        offered += [s for s in (user, password) if s]
    if request.query.get("password"):
        offered.append(request.query["password"])
    return offered


def cross_site(request: web.BaseRequest) -> str | None:
    """Why a request that a web page elsewhere made must be refused, else None.

    WebSockets ignore the same-origin policy, so any site a local user visits could open
    the bridge: a browser's ``Origin`` must be this server. Without a password, the
    ``Host`` must also be a loopback name, or a site that rebinds its DNS name to
    127.0.0.1 would count as this server.
    """
    origin = request.headers.get("Origin")
    # Host only, not the scheme: a TLS proxy in front makes it https outside, http here.
    if origin is not None and origin.partition("://")[2].lower() != request.host.lower():
        return f"a page from {origin} may not open this remote's viewer"
    return None


class ViewerAuth:
    """Passwords, session cookies and bridge tokens of one viewer.

    ``secure``: the viewer serves https, so its cookie is ``Secure``. Call
    :meth:`bind` with the port once it is known: the cookie's name carries it, since
    browsers share cookies between the ports of a host (two remotes' viewers on one
    machine must not overwrite each other's).
    """

    def __init__(
        self,
        password: str | None = None,
        view_only_password: str | None = None,
        auth_guard: AuthGuard | None = None,
        *,
        secure: bool = False,
    ) -> None:
        self.password, self.view_only_password = password, view_only_password
        #: Passwords whose browsers may play (:meth:`allow_control`).
        self.control_password: str | None = None
        self.player_passwords: dict[int, str] = {}
        #: Wrong-password throttling shared with the remote's other ports.
        self.auth_guard = auth_guard
        self.secure = secure
        self.cookie = "universe-remote-viewer"
        #: Seconds, for session expiry (tests move it).
        self.clock: Callable[[], float] = time.monotonic
        self._secret = secrets.token_bytes(32)
        #: Nonces of redeemed tokens, with their expiry: a token opens one bridge.
        self._used_tokens: dict[str, float] = {}
        #: Session cookie value -> (role, idle expiry), least recently used first.
        self._sessions: dict[str, tuple[str, float]] = {}

    @property
    def open(self) -> bool:
        """No password at all: loopback peers only, and no cookie needed."""
        return self.password is None and self.view_only_password is None

    def allow_control(self, control_password: str | None = None,
                      player_passwords: dict[int, str] | None = None) -> None:
        """Passwords that open the page with input: ``control_password`` (role PLAY,
        player 0) and player N's (role ``player-N``, N >= 1) of a multi-player remote."""
        self.control_password = control_password
        self.player_passwords = {n: pw for n, pw in (player_passwords or {}).items() if n >= 1}

    def bind(self, port: int) -> None:
        """Name the cookie after the viewer's port (``__Host-`` over https)."""
        self.cookie = f"{'__Host-' if self.secure else ''}universe-remote-viewer-{port}"

    # Passwords --------------------------------------------------------------------------

    def role(self, request: web.BaseRequest) -> str | None:
        """CONTROL or VIEW for a request whose password (or loopback peer, without a
        password) lets it watch, else None. Counts wrong passwords toward the throttle."""
        if cross_site(request) is not None:
            return None
        if self.open:  # this machine only; a control password offered still counts
            if not (is_loopback(request.remote) and is_loopback(request.url.host)):
                return None
            return self._password_role(request) or CONTROL
        guard = self.auth_guard
        if guard is None or not credentials(request):
            return self._password_role(request)
        # Decided as the password is compared: a blocked address is refused (refusal()
        # says for how long), its password never compared.
        if (blocked := guard.admit(request.remote)) is not None:
            request[BLOCKED] = blocked  # for refusal()
            return None
        role = self._password_role(request)
        if role is not None:
            guard.succeeded(request.remote)
        else:
            guard.failed(request.remote, "the viewer port")
        return role

    def _password_role(self, request: web.BaseRequest) -> str | None:
        """The role of the first password offered that is one of ours (each compared in
        constant time; the control password wins over the full one if they are equal)."""
        roles = [(self.control_password, PLAY), (self.password, CONTROL),
                 *((pw, player_role(n)) for n, pw in sorted(self.player_passwords.items())),
                 (self.view_only_password, VIEW)]
        for given in credentials(request):
            for password, role in roles:
                if password is not None and hmac.compare_digest(given.encode(), password.encode()):
                    return role
        return None

    def authorise(self, request: web.BaseRequest) -> tuple[str | None, str | None]:
        """The role a request has, from its session cookie or else its password, and
        the session it used (renewed), if any."""
        if cross_site(request) is not None:
            return None, None
        session = request.cookies.get(self.cookie)
        role = self.session_role(session)
        if role is not None:
            return role, session
        return self.role(request), None

    # Sessions ---------------------------------------------------------------------------

    def open_session(self, role: str) -> str:
        """A new session cookie value for a page authorised as ``role``."""
        now = self.clock()
        if len(self._sessions) >= MAX_SESSIONS:
            self._sessions = {s: v for s, v in self._sessions.items() if v[1] > now}
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
        session = secrets.token_urlsafe(SESSION_BYTES)
        self._sessions[session] = (role, now + SESSION_LIFETIME)
        return session

    def session_role(self, session: str | None) -> str | None:
        """The role of a live session (renewing it), else None."""
        found = self._sessions.pop(session, None) if session else None
        if found is None or session is None:
            return None
        role, expires = found
        now = self.clock()
        if expires < now:
            return None
        self._sessions[session] = (role, now + SESSION_LIFETIME)  # most recently used: last
        return role

    def set_cookie(self, response: web.StreamResponse, session: str) -> None:
        response.set_cookie(
            self.cookie, session, path="/", max_age=int(SESSION_LIFETIME),
            httponly=True, samesite="Strict", secure=self.secure,
        )

    # Bridge tokens ----------------------------------------------------------------------

    def token(self, role: str) -> str:
        """A signed, single-use token for the bridge: ``expires.role.nonce.signature``."""
        claim = f"{int(time.time() + TOKEN_LIFETIME)}.{role}.{secrets.token_urlsafe(9)}"
        return f"{claim}.{self._sign(claim)}"

    def _sign(self, claim: str) -> str:
        digest = hmac.new(self._secret, claim.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest[:18]).decode()

    def token_role(self, token: str | None) -> str | None:
        """The role a valid, unexpired, unused token grants, else None."""
        parts = (token or "").split(".")
        if len(parts) != 4:
            return None
        expires, role, nonce, signature = parts
        if not (expires.isdigit() and valid_role(role)):
            return None
        if not hmac.compare_digest(signature, self._sign(f"{expires}.{role}.{nonce}")):
            return None
        if int(expires) < time.time() or nonce in self._used_tokens:
            return None
        return role

    def redeem(self, token: str | None) -> str | None:
        """:meth:`token_role`, and the token cannot open another bridge."""
        role = self.token_role(token)
        if role is not None:
            now = time.time()
            self._used_tokens = {n: t for n, t in self._used_tokens.items() if t >= now}
            expires, _, nonce, _ = (token or "").split(".")
            self._used_tokens[nonce] = float(expires)
        return role

    # Refusals ---------------------------------------------------------------------------

    def refusal(self, request: web.BaseRequest, *, page_file: bool = False) -> web.Response:
        """403, 429 or 401 saying why and what to do; ``page_file``: a file the page loads.
        A blocked address (too many wrong passwords) hears so, and for how long, even
        with the right password: 429 with ``Retry-After``."""
        if (why := cross_site(request)) is not None:
            return web.Response(status=403, text=why + "\n")
        if self.open:
            return web.Response(
                status=403,
                text="This remote has no password, so its viewer serves only this machine "
                "at 127.0.0.1 or localhost. Serve it with --password to watch "
                "from elsewhere.\n",
            )
        guard = self.auth_guard
        blocked: str | None = request.get(BLOCKED)
        if blocked is None and guard is not None and not credentials(request):
            blocked = guard.refusal(request.remote)
        if blocked is not None and guard is not None:
            return web.Response(
                status=429, text=blocked + "\n",
                headers={"Retry-After": str(math.ceil(guard.blocked(request.remote)))},
            )
        if request.cookies.get(self.cookie) and not credentials(request):
            why = (
                f"the viewer's session has expired ({SESSION_LIFETIME:g} s unused) or the "
                "remote restarted: open /viewer/?password=<password> again"
            )
        elif page_file and not credentials(request):
            why = (
                f"{request.path} is part of the viewer page, which needs the password: open "
                f"/viewer/?password=<password> (or log in there); the page gives this browser a "
                f"session cookie for its files, valid {SESSION_LIFETIME:g} s after its last use"
            )
        else:
            why = "wrong password" if credentials(request) else "this remote needs a password"
            why += (": log in with the remote's password (as user name or password), "
                    "or open /viewer/?password=<password>")
        return web.Response(
            status=401,
            text=why + "\n",
            headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
        )
