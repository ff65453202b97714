"""The remote process: one environment served on the VNC and rewarder ports.

The composition root of a remote: :mod:`envserver.state` (the remote's states as a
transition table), :mod:`envserver.remote` (the wiring of the VNC
server, the rewarder server and the browser viewer; its jobs each in a module, listed in
:mod:`envserver.remote_base`), :mod:`envserver.orders` (what front ends ask of the game,
and its refusal) and :mod:`envserver.cli` (``serve``,
``health``, ``list``). Environments themselves live in :mod:`runtimes`.
"""
