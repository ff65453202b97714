"""Recorded episodes: the on-disk format (:mod:`recordings.format`), the writer a remote
records with (:mod:`recordings.writer`), the reader for everyone else
(:mod:`recordings.reader`) and the Minari export (:mod:`recordings.minari_export`).

Sits at the bottom with ``rewarder`` and ``vncdriver``: it imports none of the project.
The format is described in ``docs/recording.md``.
"""

from .format import FormatError
from .reader import Episode, RecordedEvent, Recording, Step, open_recording

__all__ = ["Episode", "FormatError", "RecordedEvent", "Recording", "Step", "open_recording"]
