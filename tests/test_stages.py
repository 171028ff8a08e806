"""The one registry and the views derived from it."""

import yaml

from pipelines.config import CODE_ROOT, resolve
from pipelines.stages import STAGES, dvc_yaml, upstream


def test_committed_dvc_yaml_matches_the_registry():
    committed = (CODE_ROOT / "dvc.yaml").read_text()
    assert committed == dvc_yaml(), "dvc.yaml drifted from pipelines/stages.py: run `make dvc-yaml` and commit"


def test_every_stage_is_complete():
    params = resolve()
    outputs = {}
    for stage in STAGES.values():
        assert stage.description, f"{stage.name} needs a docstring (it is the asset description)"
        assert stage.outputs, f"{stage.name} declares no output"
        for section in stage.params:
            assert section in params, f"{stage.name} reads params section {section!r} missing from params.yaml"
        for out in stage.outputs:
            assert out not in outputs, f"{out} is written by both {outputs.get(out)} and {stage.name}"
            outputs[out] = stage.name


def test_dependencies_are_derived_from_paths_and_acyclic():
    order = list(STAGES)
    for stage in STAGES.values():
        for dep in upstream(stage):
            assert order.index(dep) < order.index(stage.name), f"{dep} must be registered before {stage.name}"
    assert upstream(STAGES["ingest_synthetic"]) == ["synthetic"]
    assert "ingest_synthetic" in upstream(STAGES["benchmark"])


def test_dvc_yaml_runs_the_cli_and_tracks_metrics_and_plots():
    doc = yaml.safe_load(dvc_yaml())
    assert set(doc["stages"]) == set(STAGES)
    for name, entry in doc["stages"].items():
        assert entry["cmd"] == f"python -m pipelines run {name}"
        assert "profile" in entry["params"]
    assert {"reports/metrics.json": {"cache": False}} in doc["stages"]["benchmark"]["metrics"]
    assert doc["plots"], "the benchmark plots are DVC plots"
