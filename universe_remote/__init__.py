"""The ``universe-remote`` command: one entry point for both sides.

``serve``, ``health`` and ``list`` come from the remote process (:mod:`envserver.cli`),
``play`` from the agent side (:mod:`remotes.cli`); ``export``, ``mcp`` and ``eval`` (an agent
over tasks x seeds, :mod:`universe_remote.evaluate`) are its own. This package sits above both and is
the only one that knows them both; neither side imports it.
"""
