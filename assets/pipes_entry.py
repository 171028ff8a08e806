"""Entry point of a launched training stage: ``<launcher> -m assets.pipes_entry STAGE``.

Every rank runs the stage (the training engine synchronises them) with the overrides the
asset put in ``MNEMOS_OVERRIDES`` (JSON); rank 0 alone opens the Dagster Pipes channel and
reports the materialisation and the check results back to the asset.
"""

from __future__ import annotations

import json
import os
import sys

from pipelines.ranks import is_rank_zero
from pipelines.runner import run_stage


def _plain(value):
    return value if isinstance(value, (int, float, str, bool)) or value is None else json.dumps(value, default=str)


def main(name: str) -> int:
    overrides = json.loads(os.environ.get("MNEMOS_OVERRIDES", "{}"))
    track = os.environ.get("MNEMOS_TRACK", "1") == "1"
    if not is_rank_zero():
        run_stage(name, overrides, track=False, enforce_checks=False)
        return 0
    from dagster_pipes import open_dagster_pipes

    with open_dagster_pipes() as pipes:
        result = run_stage(name, overrides, track=track, enforce_checks=False)
        meta = {k: _plain(v) for k, v in result.metadata.items()}
        meta.update({f"metric.{k}": float(v) for k, v in result.metrics.items()})
        pipes.report_asset_materialization(metadata=meta)
        for check in result.checks:
            pipes.report_asset_check(check_name=check.name, passed=check.passed,
                                     severity="ERROR" if check.blocking else "WARN",
                                     metadata={"failing_records": check.count,
                                               "examples": "\n".join(check.examples)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
