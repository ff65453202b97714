"""The pixel channel: our own RFB 3.8 (VNC) client and server.

Sans-I/O core (no asyncio, no sockets): :mod:`.errors`, :mod:`.limits`,
:mod:`.pixelformat`, :mod:`.messages`, :mod:`.streams`, :mod:`.handshake`,
:mod:`.encodings` (Raw, CopyRect, Tight, ZRLE), :mod:`.client_protocol`,
:mod:`.server_protocol`, and :mod:`.keysyms`. The asyncio shells own these objects and
only move bytes.
"""
