"""The one error of the computer-use tools: what the agent sent that cannot be done.

:class:`ToolError`'s message is what the model reads in the tool's result (``isError``):
what was wrong and what to send instead, so that it can correct its next call.
"""

from __future__ import annotations


class ToolError(ValueError):
    """A tool call that cannot be done as sent; the message says what to send instead."""
