"""Computer-use agents' tools on a remote: MCP (``serve --mcp-port``), docs/computer-use.md.

Modules: :mod:`.keys` (xdotool's and OpenAI's key names as X keysyms), :mod:`.actions`
(Anthropic's ``computer`` actions and OpenAI's action objects as input events, the
screenshot's scaling; sans-I/O), :mod:`.tools` (the tools, who drives, what a call does
to the remote), :mod:`.server` (the MCP endpoint: MCP's streamable HTTP on aiohttp in
the remote's loop, no SDK), :mod:`.leases` (its sessions as leases; sans-I/O),
:mod:`.jsonrpc` (the JSON-RPC answers, which OpenEnv's ``{"type": "mcp"}`` messages get
too).

Named ``computer_use``, not ``mcp``: that is the SDK's import name.
"""
