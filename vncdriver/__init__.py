"""The pixel channel: our own RFB 3.8 (VNC) client and server.

Sans-I/O core (no asyncio, no sockets): :mod:`.errors`, :mod:`.limits`,
:mod:`.pixelformat`, :mod:`.messages`, :mod:`.streams`, :mod:`.handshake`,
:mod:`.encodings` (Raw, CopyRect, Tight, ZRLE), :mod:`.client_protocol`,
:mod:`.server_protocol`, :mod:`.tiles` (the server's change tracking) and
:mod:`.keysyms`. The asyncio shells own these objects and only move bytes: the client
(:mod:`.client`, :mod:`.client_connection`) and the server (:mod:`.server`,
:mod:`.server_connection`, :mod:`.server_attached`).
"""
