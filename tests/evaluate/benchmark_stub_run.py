"""``python -m pipelines run benchmark ARGS`` with the trained methods' sections stubbed (for the concurrency test).

The benchmark stage runs as it is (suites through the temporal protocol, the report, its plots, locks and
MLflow), except that the MDR, G-Long and EMMA sections, which need trained models, are fixed markdown and
metrics built after ``MNEMOS_STUB_SECONDS`` of sleep (the time the real ones take to score, shortened).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pipelines.evaluate.stage as bench  # noqa: E402


def _mdr_generation(ctx, episodes, split):
    time.sleep(float(os.environ.get("MNEMOS_STUB_SECONDS", "1")))
    return {"overall": {"bleu-1": 1.0, "rouge-l": 2.0}, "by_session": {2: {"bleu-1": 1.0, "rouge-l": 2.0}},
            "markdown": "## Response generation (MDR)\n\nstub\n"}


bench._mdr_generation = _mdr_generation
bench._extraction_section = lambda ctx: ("## Triplet extraction (G-Long extractor)\n\nstub\n", {"extraction/f1": 0.5})
bench._emma_section = lambda ctx, split, settings=None: ("## EMMA\n\nstub\n", {"generation/bleu-1": 3.0})

if __name__ == "__main__":
    from pipelines.cli import main

    raise SystemExit(main(["run", "benchmark", *sys.argv[1:]]))
