"""Fuzzers of a running remote over real sockets: ``make fuzz`` (long) and the test suite (short).

Holds :mod:`fuzz.rewarder` (JSON-over-WebSocket messages, valid, mutated and broken) and
:mod:`fuzz.rfb` (RFB client messages after a real handshake). Each returns counts: what
was sent, what was answered, and crashes, hangs and unanswered requests, which must be 0.
"""
