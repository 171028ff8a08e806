import pytest

from pipelines import config as cfg
from pipelines.errors import ConfigError


def write(tmp_path, text):
    p = tmp_path / "params.yaml"
    p.write_text(text)
    return p


def test_resolution_order_profile_then_params_then_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    p = write(tmp_path, "profile: tiny\nseed: 1\nsynthetic: {episodes: 5, turns: 4}\n")
    out = cfg.resolve({"synthetic": {"turns": 8}}, params_file=p)
    assert out["profile"] == "tiny"
    assert out["device"] == "cpu"                       # from the tiny profile
    assert out["synthetic"]["episodes"] == 5            # from params.yaml
    assert out["synthetic"]["turns"] == 8               # override wins
    assert out["benchmark"]["embedding_batch_size"] is None  # profile default kept (by device)


def test_profile_switch_by_override_and_env(tmp_path, monkeypatch):
    p = write(tmp_path, "profile: tiny\n")
    assert cfg.resolve({"profile": "paper"}, params_file=p)["device"] == "auto"
    monkeypatch.setenv("MNEMOS_PROFILE", "paper")
    assert cfg.resolve(params_file=p)["profile"] == "paper"


def test_small_profile_is_tiny_with_smollm2_where_a_paper_starts_from_a_pretrained_model(monkeypatch):
    monkeypatch.setenv("MNEMOS_PROFILE", "small")
    out = cfg.resolve()
    assert out["profile"] == "small"
    assert out["glong"]["extractor"]["model"] == out["glong"]["summariser"]["model"] == cfg.SMALL_BASE
    assert out["emma"]["dialogue"]["model"] == cfg.SMALL_BASE and out["glong"]["summariser"]["arch"] == "causal"
    tiny = cfg.resolve({"profile": "tiny"})
    assert out["mdr"] == tiny["mdr"] and out["emma"]["retriever"] == tiny["emma"]["retriever"]   # MDR stays tiny


def test_unknown_profile_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    p = write(tmp_path, "profile: huge\n")
    with pytest.raises(ConfigError, match="profile 'huge' is unknown"):
        cfg.resolve(params_file=p)


@pytest.mark.parametrize("text,expected", [
    ("a.b=3", {"a": {"b": 3}}),
    ("benchmark.ks=[1,5]", {"benchmark": {"ks": [1, 5]}}),
    ("profile=paper", {"profile": "paper"}),
    ("x.y.z=hello", {"x": {"y": {"z": "hello"}}}),
])
def test_parse_override(text, expected):
    assert cfg.parse_override(text) == expected


def test_parse_override_rejects_missing_equals():
    with pytest.raises(ConfigError):
        cfg.parse_override("a.b")


def test_stage_config_names_missing_section():
    with pytest.raises(ConfigError, match="no section 'nope'"):
        cfg.stage_config({"profile": "tiny"}, ("nope",))


def test_flatten():
    assert cfg.flatten({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": "x"}) == {"a.b": "1", "a.c.d": "[1, 2]", "e": "x"}


@pytest.mark.parametrize("profile", sorted(cfg.PROFILES))
def test_project_params_resolve_and_pass_the_check_under_every_profile(profile, monkeypatch):
    """Every key the shipped params.yaml and each profile's defaults set is declared, every value accepted."""
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    out = cfg.resolve({"profile": profile})
    assert out["synthetic"]["episodes"] > 0 and out["benchmark"]["suites"] and out["profile"] == profile


# --- the check of the whole config (pipelines/config_schema.py) ----------------------------------------------------

@pytest.mark.parametrize("text,message", [
    ("synthetic.episode=48",
     "--set 'synthetic.episode=48': unknown key synthetic.episode; did you mean synthetic.episodes?"),
    ("nosuch.key=1", "--set 'nosuch.key=1': unknown key nosuch; known keys at the top level: benchmark, device, emma"),
    ("mdr.teacher.epoch=3", "unknown key mdr.teacher.epoch; did you mean mdr.teacher.epochs?"),
    ("mdr.teacher.output_dir=/tmp/x", "unknown key mdr.teacher.output_dir"),  # set by the stage, not a knob
    ("episodes=48", "unknown key episodes; did you mean synthetic.episodes?"),  # a key of another section
    ("sources.locomoo=/data/locomo10.json", "unknown key sources.locomoo; did you mean sources.locomo?"),  # loaders
    ("benchmark.strategy_settings.grpah.k_anchor=3",  # registered strategies
     "unknown key benchmark.strategy_settings.grpah; did you mean benchmark.strategy_settings.graph?"),
    ("benchmark.strategy_settings.graph.k_anchr=3",  # the strategy's config fields
     "unknown key benchmark.strategy_settings.graph.k_anchr; did you mean benchmark.strategy_settings.graph.k_anchor?"),
])
def test_unknown_override_key_names_the_key_its_origin_and_the_closest_known_one(text, message):
    with pytest.raises(ConfigError) as err:
        cfg.parse_overrides([text], "--set")
    assert message in str(err.value)


def test_unknown_keys_in_params_yaml_are_all_named_with_the_file(tmp_path):
    p = write(tmp_path, "profile: tiny\nmdr:\n  teacher: {epoch: 3}\nglong: {eval_example: 8}\n")
    with pytest.raises(ConfigError) as err:
        cfg.resolve(params_file=p)
    lines = str(err.value).splitlines()
    assert lines == [f"{p}: unknown key mdr.teacher.epoch; did you mean mdr.teacher.epochs?",
                     f"{p}: unknown key glong.eval_example; did you mean glong.eval_examples?"]


def test_unknown_key_in_an_overrides_mapping_is_refused_too(tmp_path):
    """run_stage(name, overrides) and the launched training process (MNEMOS_OVERRIDES) pass a mapping."""
    with pytest.raises(ConfigError, match=r"run-time overrides .*: unknown key synthetic\.episode; did you mean"):
        cfg.resolve({"synthetic": {"episode": 48}}, params_file=write(tmp_path, "profile: tiny\n"))


def test_a_section_given_a_value_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"--set 'synthetic=3': synthetic is a section, a mapping of keys"):
        cfg.parse_overrides(["synthetic=3"], "--set")
    with pytest.raises(ConfigError, match=r"params.yaml: glong is a section"):
        cfg.resolve(params_file=write(tmp_path, "profile: tiny\nglong: 3\n"))


@pytest.mark.parametrize("text,message", [
    ("synthetic.episodes=-3", "synthetic (set in run-time overrides (--set, Dagster run config)): "
                              "synthetic.episodes must be at least 1, got -3."),
    ("synthetic.episodes=ten", "synthetic.episodes must be an integer, got 'ten'."),
    ("synthetic.distractor_density=.nan", "synthetic.distractor_density must be a finite number, got nan."),
    ("seed=1.5", "seed must be an integer, got 1.5."),
    ("mdr.teacher.lr=1e-4", "mdr.teacher.lr must be a number, got '1e-4' (YAML reads a number like 1e-4 as a string"),
    ("mdr.teacher.epochs=0", "mdr.teacher (set in run-time overrides (--set, Dagster run config)): "
                             "TrainConfig.epochs is 0: it must be at least 1."),
    ("mdr.max_history_rounds=all", "mdr.max_history_rounds must be an integer or null, got 'all'."),
    ("mdr.sources=[3]", "mdr.sources must be a list of strings or a string or null, got [3]."),
    ("mdr.vocab_size=0", "mdr.vocab_size must be a positive integer, got 0."),
    ("mdr.generation.max_new_tokens=0", "mdr.generation.max_new_tokens must be a positive integer, got 0."),
    ("emma.formats.turn_tags=speakers", "emma.formats.turn_tags must be one of 'names', 'roles', got 'speakers'."),
    ("emma.dialogue_train.warmup_steps=-1", "TrainConfig.warmup_steps is -1: it cannot be negative."),
    ("emma.eval_examples=0", "emma.eval_examples must be a positive integer, got 0."),
    ("glong.extractor.max_new_tokens=300", "glong.extractor.max_new_tokens (300) must be below max_length (256)"),
    ("benchmark.embedding_batch_size=0", "benchmark.embedding_batch_size must be a positive integer, got 0."),
    ("benchmark.strategy_settings.graph.context_k=9", "graph.context_k (9) cannot exceed coarse_n (5)"),
    ("benchmark.strategy_settings.egocentric.agents=everyone", "egocentric.agents must be one of 'main', 'all'"),
    ("sources.locomo=3", "sources.locomo must be a string or null, got 3."),
    ("ingest.max_dropped_turn_share=2", "ingest.max_dropped_turn_share must lie in [0, 1]"),
    ("llm.reader.modle=x", "unknown key llm.reader.modle; did you mean llm.reader.model?"),
    ("llm.readr.model=x", "unknown key llm.readr; did you mean llm.reader?"),
    ("llm.judge.backend=nope", "llm.judge (set in run-time overrides (--set, Dagster run config)): llm.backend is "
                               "'nope': choose one of local, openai."),
    ("llm.reader.max_new_tokens=0", "llm.reader (set in run-time overrides (--set, Dagster run config)): "
                                    "llm.max_new_tokens is 0: it must be a positive integer."),
    ("llm.max_questions=0", "llm.max_questions must be a positive integer, got 0."),
    ("llm.full_history_tokens=-5", "llm.full_history_tokens must be a positive integer, got -5."),
    ("llm.trace_sample=2", "llm.trace_sample must lie in [0, 1]"),
    ("llm.judge=3", "llm.judge is a section, a mapping of keys (write {} for none, or null), got 3."),
    ("llm.reader=null", "llm.reader is a section, a mapping of keys (write {} for none), got None."),
])
def test_values_are_checked_against_the_config_that_reads_them(text, message, monkeypatch):
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    with pytest.raises(ConfigError) as err:
        cfg.resolve(cfg.parse_overrides([text], "--set"))
    assert message in str(err.value)


@pytest.mark.parametrize("texts", [
    ["mdr.model={n_layer: 2, n_embd: 32}"],              # a GPT2Spec as a mapping (pipelines.models.gpt2)
    ["mdr.max_history_rounds=null", "mdr.sources=convai2"],
    ["mdr.teacher.adam_betas=[0.9, 0.98]", "mdr.teacher.lr=1", "emma.formats.tasks=[generation, link]"],
    ["benchmark.suites=[synthetic]", "benchmark.strategy_settings.graph={k_anchor: 3, hops: 2}"],
    ["sources.locomo=locomo10.json", "ingest.max_dropped_turn_share=0", "profile=paper"],
])
def test_legitimate_values_pass(texts, monkeypatch):
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    cfg.resolve(cfg.parse_overrides(texts, "--set"))


def test_suites_are_checked_in_params_yaml_and_refused_as_a_run_time_override(tmp_path, monkeypatch):
    # benchmark.suites decides the benchmark stage's inputs when the registry is built: an override would be
    # silently ignored, so it is refused; in params.yaml a suite that does not exist is named.
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    with pytest.raises(ConfigError, match=r"benchmark.suites=\['locomo'\] would be ignored.*Set it there"):
        cfg.resolve(cfg.parse_overrides(["benchmark.suites=[locomo]"], "--set"))
    params = tmp_path / "params.yaml"
    params.write_text("profile: tiny\nbenchmark: {suites: [nosuite]}\n")
    with pytest.raises(ConfigError, match="benchmark suite 'nosuite' not found"):
        cfg.resolve(params_file=params)


def test_ingest_default_is_the_loss_rule_default():
    from pipelines.data.ingest import IngestSettings
    from pipelines.validate.rules import MAX_DROPPED_TURN_SHARE

    assert IngestSettings().max_dropped_turn_share == MAX_DROPPED_TURN_SHARE


# --- a real stage run: a refused config leaves every output in place ----------------------------------------------

@pytest.fixture
def project(tmp_path, monkeypatch):
    """A temp project (a copy of params.yaml) whose synthetic stage already wrote data/raw/synthetic."""
    from tests._cli import tmp_project

    root = tmp_project(tmp_path / "project")
    raw = root / "data" / "raw" / "synthetic"
    raw.mkdir(parents=True)
    (raw / "train.jsonl").write_text("written by an earlier run\n")
    monkeypatch.setattr(cfg, "ROOT", root)
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    return root


@pytest.mark.parametrize("text,message", [
    ("synthetic.episodes=-3", "synthetic.episodes must be at least 1, got -3."),
    ("synthetic.episode=48", "--set 'synthetic.episode=48': unknown key synthetic.episode; "
                             "did you mean synthetic.episodes?"),
    ("nosuch.key=1", "--set 'nosuch.key=1': unknown key nosuch;"),
])
def test_cli_run_refuses_a_bad_config_before_touching_outputs(project, capsys, text, message):
    from pipelines.cli import main

    assert main(["run", "synthetic", "--no-track", "--set", text]) == 2   # a ConfigError (pipelines.errors)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert (project / "data/raw/synthetic/train.jsonl").read_text() == "written by an earlier run\n"
    # The same stage with a good override runs and replaces the data.
    small = ["--set", "synthetic.episodes=6", "--set", "synthetic.sessions=3"]
    assert main(["run", "synthetic", "--no-track", *small]) == 0
    assert (project / "data/raw/synthetic/train.jsonl").read_text().startswith('{"schema"')


def test_cli_benchmark_refuses_a_bad_config_before_writing(project, capsys, tmp_path):
    from pipelines.cli import main

    out = tmp_path / "report"
    typo = "benchmark.strategy_settings.bm25.k=1"
    assert main(["benchmark", "--suite", "synthetic", "--out", str(out), "--set", typo]) == 2
    assert "unknown key benchmark.strategy_settings.bm25.k; did you mean benchmark.strategy_settings.bm25.k1?" \
        in capsys.readouterr().err
    assert not out.exists()


# --- llm: the reader and the judge of answer-level evaluation ------------------------------------------------------


def test_llm_defaults_per_profile_and_a_judge_of_its_own(monkeypatch):
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    tiny, paper = cfg.resolve({"profile": "tiny"}), cfg.resolve({"profile": "paper"})
    assert tiny["llm"]["max_questions"] == 2 and paper["llm"]["max_questions"] is None  # make run stays short
    assert tiny["llm"]["reader"]["max_new_tokens"] == 32 and paper["llm"]["reader"]["max_new_tokens"] == 64
    assert tiny["llm"]["judge"] is None and tiny["llm"]["reader"]["model"] == "smollm2-135m-instruct"
    out = cfg.resolve(cfg.parse_overrides(["llm.judge={backend: openai, base_url: 'http://127.0.0.1:8000/v1', "
                                           "model: judge-model}", "llm.max_questions=null"], "--set"))
    assert out["llm"]["judge"]["model"] == "judge-model" and out["llm"]["max_questions"] is None
    assert out["llm"]["reader"]["backend"] == "local"
