"""The remote process: one environment served on the VNC and rewarder ports.

The composition root of a remote: :mod:`envserver.state` (the remote's states as a
transition table), :mod:`envserver.remote` (the wiring of the VNC server, the rewarder
server and the browser viewer, and of the remote's parts: the game core, recovery,
restores, acting; its docstring lists them), :mod:`envserver.orders` (what front ends
ask of the game, and its refusal) and :mod:`envserver.cli` (``serve``, ``health``,
``list``). Environments themselves live in :mod:`runtimes`.
"""
