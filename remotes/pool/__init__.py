"""A pool of warm remotes handed out as leases (issue 44; docs/cluster.md, "A warm pool").

``universe-remote pool ENV_ID --size N --port PORT`` keeps remotes warm
(:mod:`remotes.pool.service`, around the sans-I/O lease table :mod:`remotes.pool.table`);
agents claim them with ``pool://HOST:PORT`` addresses (:mod:`remotes.pool.client`);
sessions of the remotes' OpenEnv and MCP ports hold leases too (:mod:`remotes.pool.sessions`).
"""

from .client import POOL_SCHEME, PoolClient, PooledRemotes, PoolError, claim_remotes, is_pool, parse_pool
from .sessions import PoolSession, claim_session

__all__ = [
    "POOL_SCHEME", "PoolClient", "PoolError", "PoolSession", "PooledRemotes", "claim_remotes",
    "claim_session", "is_pool", "parse_pool",
]
