"""The OpenEnv port (``serve --openenv-port``): OpenEnv's HTTP endpoints and ``/ws``
sessions on the same remote as the rewarder and dm_env_rpc (docs/openenv.md).

``protocol`` (messages, sans I/O), ``schemas`` (each family's action, observation and
state), ``frames`` (the screen as PNG, raw bytes or OpenEnv's flat list), ``session`` (who
drives, what a reset and a step do) and ``server`` (the aiohttp shell).
"""
