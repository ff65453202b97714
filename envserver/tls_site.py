"""What the remote's HTTP ports (the browser viewer, OpenEnv) share: their limits, and
aiohttp's TCPSite with TLS through :class:`rewarder.tls.TLSPort`, where a plain
``http://`` request gets a 400 saying the port speaks ``https://`` instead of a closed
connection."""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp import web

from rewarder.tls import TLSPort

#: Seconds between an HTTP port's WebSocket pings, so a vanished browser or session is
#: noticed (OpenEnv's client pings every 20 s too).
HEARTBEAT: Final = 30.0
#: Seconds a stopping HTTP port gives its handlers, sessions and requests to finish.
SHUTDOWN_TIMEOUT: Final = 2.0


class TLSPortSite(web.BaseSite):
    """Serves ``runner`` on ``host:port``, every connection through ``tls_port`` first."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, tls_port: TLSPort) -> None:
        super().__init__(runner)
        self.host, self.port, self.tls_port = host, port, tls_port

    @property
    def name(self) -> str:
        return f"https://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self.tls_port.factory(server), self.host, self.port, backlog=self._backlog
        )
