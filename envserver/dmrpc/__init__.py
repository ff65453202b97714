"""The remote's dm_env_rpc port: DeepMind's protocol over gRPC, on the same runtime.

``universe-remote serve ENV --dm-env-rpc-port 16000`` (needs the ``dmenv`` extra:
``pip install 'universe-remote[dmenv]'``). :mod:`.specs` turns a runtime into tensor
specs and actions into input events, :mod:`.properties` holds the Properties extension's
table, :mod:`.world` the one world of a remote, :mod:`.session` one connection's
requests, and :mod:`.server` the gRPC shell. See ``docs/dm_env_rpc.md``.
"""
