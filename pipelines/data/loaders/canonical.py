"""Our own canonical episodes (``<split>.jsonl`` written by ``schema.write_episodes``).

``path`` is one such file or a folder holding ``train.jsonl`` / ``valid.jsonl`` /
``test.jsonl``. Every line is validated by :func:`pipelines.data.schema.iter_episodes`,
which raises DataError naming the file, the line and the field; nothing is dropped.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.data.loaders.registry import register
from pipelines.data.loaders.base import LoadResult, files_in
from pipelines.data.schema import iter_numbered_episodes


@register("canonical")
def load(path: str | Path) -> LoadResult:
    result = LoadResult()
    for file in files_in(path, "*.jsonl"):
        for lineno, episode in iter_numbered_episodes(file):
            result.episodes.append(episode)
            result.records[episode.id] = f"{Path(file).name} line {lineno}"
    return result
