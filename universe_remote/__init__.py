"""The ``universe-remote`` command: one entry point for both sides.

``serve``, ``health`` and ``list`` come from the remote process (:mod:`envserver.cli`),
``play`` from the agent side (:mod:`remotes.cli`). This package sits above both and is
the only one that knows them both; neither side imports it.
"""
