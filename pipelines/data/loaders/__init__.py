"""Loaders of the published dataset formats, registered by source name.

Each module reads one source's own published files from a local path and returns a
:class:`~pipelines.data.loaders.base.LoadResult` (canonical Episodes plus what was
dropped and why); ``Episode.source`` is the registered name.

| name        | module          | reads                                                      | split              |
| ----------- | --------------- | ---------------------------------------------------------- | ------------------ |
| locomo      | locomo.py       | ``locomo10.json``                                          | all ``test``       |
| longmemeval | longmemeval.py  | ``longmemeval_s*.json``, ``_m*``, ``longmemeval_oracle.json`` | all ``test``    |
| realmem     | realmem.py      | a folder of ``<Name>_dialogues_256k.json`` (or one file)   | all ``test``       |
| convai2     | convai2.py      | ParlAI text files (``*_self_original*.txt`` ...)           | from the file name |
| msc, cc     | msc.py          | session-column jsonl/json, or ParlAI MSC jsonl             | from the file name |
| misc        | misc.py         | ``train.jsonl``, ``val.jsonl``, ``test.jsonl``             | from the file name |
| personaext  | personaext.py   | jsonl of token triplets (+ ``schema.json``)                | from the file name |
| canonical   | canonical.py    | our own episodes jsonl (``schema.write_episodes``)         | as written         |

A loader may also register a streaming reader (:func:`register_stream`): ``stream(path, result)``
yields ``(record locator, Episode)`` one at a time, in the loader's order and equal to its
episodes, counting what it drops or flags into ``result`` as it goes, and holds only what one
episode needs (``pipelines.data.ingest.stream_and_validate`` reads big files through it).
Only ``longmemeval`` has one (the M file is 2.7 GB); the other sources' files fit in memory.

LoCoMo, LongMemEval and RealMem are benchmark-only (no training split is published),
so all their episodes are ``test``. The other sources take the split from the file
name (train / valid|val|validation|dev / test) and default to ``train``.
"""

from __future__ import annotations

from pipelines.data.loaders.base import LoadResult
from pipelines.data.loaders.registry import LOADERS, STREAMERS, Loader, Streamer, get_loader, get_streamer, register, \
    register_stream

# Importing the modules registers them.
from pipelines.data.loaders import (canonical, convai2, locomo, longmemeval, misc, msc,  # noqa: E402,F401
                                    personaext, realmem)
from pipelines.data.loaders.registry import load_loader_plugins  # noqa: E402

load_loader_plugins()  # installed packages' loaders (entry points mnemos.loaders), after the built-ins

__all__ = ["LOADERS", "STREAMERS", "LoadResult", "Loader", "Streamer", "get_loader", "get_streamer", "register",
           "register_stream"]
