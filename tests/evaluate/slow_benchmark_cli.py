"""``python -m pipelines ARGS`` with one more strategy, ``slow_bm25``: bm25 that sleeps ``MNEMOS_SLOW_SECONDS``
(default 0.3) per observed session, so that a test can kill a real benchmark process in the middle of a run.

Its figures are bm25's (the sleep changes no score), so a run of ``slow_bm25`` killed and resumed must report
what an uninterrupted run reports. With ``MNEMOS_STUB_SECTIONS=1`` the benchmark stage's trained-method sections
are stubbed as in benchmark_stub_run.py (a project without trained models).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipelines.cli import main  # noqa: E402
from pipelines.memory.base import register_strategy  # noqa: E402
from pipelines.memory.bm25 import BM25  # noqa: E402


@register_strategy("slow_bm25")
class SlowBM25(BM25):
    """bm25, slowly."""

    def observe(self, episode, session) -> None:
        time.sleep(float(os.environ.get("MNEMOS_SLOW_SECONDS", "0.3")))
        super().observe(episode, session)


if os.environ.get("MNEMOS_STUB_SECTIONS") == "1":
    import tests.evaluate.benchmark_stub_run  # noqa: E402, F401 - patches the sections on import

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
