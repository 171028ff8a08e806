import pytest

from pipelines import config as cfg
from pipelines.errors import ConfigError


def write(tmp_path, text):
    p = tmp_path / "params.yaml"
    p.write_text(text)
    return p


def test_resolution_order_profile_then_params_then_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("MNEMOS_PROFILE", raising=False)
    p = write(tmp_path, "profile: tiny\nseed: 1\nbenchmark: {ks: [1, 3], budget_tokens: 10}\n")
    out = cfg.resolve({"benchmark": {"budget_tokens": 99}}, params_file=p)
    assert out["profile"] == "tiny"
    assert out["device"] == "cpu"                       # from the tiny profile
    assert out["benchmark"]["ks"] == [1, 3]             # from params.yaml
    assert out["benchmark"]["budget_tokens"] == 99      # override wins
    assert out["benchmark"]["embedding_batch_size"] == 64  # profile default kept


def test_profile_switch_by_override_and_env(tmp_path, monkeypatch):
    p = write(tmp_path, "profile: tiny\n")
    assert cfg.resolve({"profile": "paper"}, params_file=p)["device"] == "auto"
    monkeypatch.setenv("MNEMOS_PROFILE", "paper")
    assert cfg.resolve(params_file=p)["profile"] == "paper"


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


def test_project_params_resolve():
    out = cfg.resolve()
    assert out["synthetic"]["episodes"] > 0 and out["benchmark"]["suites"]
