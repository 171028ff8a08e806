"""A bad config given to the Dagster ``mnemos`` resource (or in params.yaml) fails the asset with a ConfigError
before any of its outputs is touched, for in-process and launched (Pipes) assets alike: real materialisations
over a temp project. The asset fails with a ``dg.Failure`` whose description is the CLI's ``error:`` / ``hint:`` lines
(issue #31), the ConfigError named in its metadata with exit code 2 and its traceback."""

from __future__ import annotations

import shutil

import dagster as dg
import pytest

from assets.factory import build_asset
from assets.resources import MnemosResource
from pipelines.config import CODE_ROOT
from pipelines.stages import STAGES

DAGSTER = "Dagster run config (resources.mnemos.config.overrides)"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A temp project holding params.yaml and the outputs of an earlier run of synthetic and mdr_teacher."""
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    shutil.copy(CODE_ROOT / "params.yaml", tmp_path / "params.yaml")
    for rel in ("data/raw/synthetic/train.jsonl", "models/mdr_teacher/config.json"):
        (tmp_path / rel).parent.mkdir(parents=True)
        (tmp_path / rel).write_text("written by an earlier run\n")
    return tmp_path


def config_failure(err) -> str:
    """The description of a ``dg.Failure`` of a ConfigError: its one error line (and hint), checked."""
    failure = err.value
    assert failure.metadata["error"].value == "ConfigError" and failure.metadata["exit_code"].value == 2
    assert "Traceback" not in failure.description and failure.description.startswith("error: ")
    assert len(failure.description.splitlines()) <= 2
    return failure.description


def materialize(stage: str, root, overrides: list[str]):
    resources = {"mnemos": MnemosResource(root=str(root), track=False, overrides=overrides),
                 "pipes_subprocess_client": dg.PipesSubprocessClient()}
    return dg.materialize([build_asset(STAGES[stage])], resources=resources)


@pytest.mark.parametrize("stage,output", [("synthetic", "data/raw/synthetic/train.jsonl"),
                                          ("mdr_teacher", "models/mdr_teacher/config.json")])
@pytest.mark.parametrize("overrides,message", [
    (["synthetic.episode=48"], f"{DAGSTER} 'synthetic.episode=48': unknown key synthetic.episode; "
                               "did you mean synthetic.episodes?"),
    (["synthetic.episodes=-3"], "synthetic.episodes must be at least 1, got -3."),
    (["nosuch.key=1"], f"{DAGSTER} 'nosuch.key=1': unknown key nosuch;"),
])
def test_bad_run_config_fails_the_asset_before_its_outputs_are_touched(project, stage, output, overrides, message):
    with pytest.raises(dg.Failure) as err:
        materialize(stage, project, overrides)
    assert message in config_failure(err)
    assert (project / output).read_text() == "written by an earlier run\n"


def test_bad_params_yaml_fails_the_asset_too_and_good_overrides_run(project):
    params = project / "params.yaml"
    shipped = params.read_text()
    assert "\n  turns: " in shipped
    params.write_text(shipped.replace("\n  turns: ", "\n  turn: "))
    with pytest.raises(dg.Failure) as err:
        materialize("synthetic", project, [])
    assert "params.yaml: unknown key synthetic.turn; did you mean synthetic.turns?" in config_failure(err)
    assert (project / "data/raw/synthetic/train.jsonl").read_text() == "written by an earlier run\n"
    params.write_text(shipped)
    result = materialize("synthetic", project, ["synthetic.episodes=6", "synthetic.sessions=3"])
    assert result.success
    assert (project / "data/raw/synthetic/train.jsonl").read_text().startswith('{"schema"')
