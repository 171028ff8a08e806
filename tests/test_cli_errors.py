"""One error boundary (issue #31): every error a user can cause, run through the real CLI in a subprocess, ends as
one ``error:`` line (and at most one ``hint:`` line) on stderr, with the exit code of its kind
(pipelines.errors.EXIT_CODES) and no traceback; ``-v`` shows the traceback, with the same exit code.

Kinds: a bad option or configuration (2), an unknown stage, suite or source (3), a missing input (4), bad data (5),
a busy lock (6), an unreachable language-model server (7), a refused shard (8). ``--set sources.<name>=PATH`` makes
``ingest_<name>`` runnable for that run; without it the error says how to configure the source.
"""

from __future__ import annotations

import socket
import subprocess

import pytest

from pipelines.errors import EXIT_CODES
from tests._cli import LOCOMO_FIXTURE, locomo_without_text, run_cli, tmp_project

SMALL = ["--set", "synthetic.episodes=6", "--set", "synthetic.sessions=2"]


@pytest.fixture
def root(tmp_path):
    return tmp_project(tmp_path / "project")


def refused(proc: subprocess.CompletedProcess, code: int, *needles: str, hint: str | None = None) -> str:
    """The ``error:`` line of a refused command: exit ``code``, no traceback, the message the last one or two lines
    of stderr, each needle in the error line and ``hint`` (when given) in the hint line."""
    assert proc.returncode == code, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    hints = [line for line in lines if line.startswith("hint: ")]
    assert len(errors) == 1 and len(hints) <= 1, proc.stderr[-3000:]
    assert lines[-1 - len(hints):] == errors + hints, proc.stderr[-3000:]   # the last lines: what is wrong, what to do
    for needle in needles:
        assert needle in errors[0], errors[0]
    if hint is not None:
        assert hints and hint in hints[0], hints
    return errors[0]


def test_unknown_stage_lists_close_matches_and_where_stages_come_from(root):
    refused(run_cli(["run", "nosuchstage"], root), 3, "unknown stage 'nosuchstage'", hint="python -m pipelines list")
    refused(run_cli(["run", "synthetc", "--no-track"], root), 3, "did you mean synthetic")


def test_unknown_suite_and_unknown_source(root, tmp_path):
    refused(run_cli(["benchmark", "--suite", "synthtic", "--out", str(tmp_path / "o")], root), 3,
            "benchmark suite 'synthtic' not found", "did you mean synthetic", hint="python -m pipelines suites")
    assert not (tmp_path / "o").exists()
    refused(run_cli(["ingest", "--source", "locomoo", "--path", str(LOCOMO_FIXTURE), "--out", str(tmp_path / "i")],
                    root), 3, "unknown source 'locomoo'", "did you mean locomo")


def test_an_unconfigured_source_says_how_to_configure_it(root):
    refused(run_cli(["run", "ingest_locomo", "--no-track"], root), 3, "source 'locomo' is not configured",
            hint="--set sources.locomo=PATH")


def test_set_sources_makes_the_ingest_stage_runnable_for_that_run(root):
    proc = run_cli(["run", "ingest_locomo", "--no-track", "--set", f"sources.locomo={LOCOMO_FIXTURE}"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (root / "data/canonical/locomo").is_dir()
    # a path that does not exist is a missing input naming it
    missing = root / "nowhere" / "locomo10.json"
    refused(run_cli(["run", "ingest_locomo", "--no-track", "--set", f"sources.locomo={missing}"], root), 4,
            str(missing), "does not exist", hint="sources.locomo")


def test_missing_input_names_the_stage_that_makes_it(root, tmp_path):
    refused(run_cli(["run", "ingest_synthetic", "--no-track"], root), 4, "data/raw/synthetic", "run stage synthetic",
            hint="python -m pipelines run synthetic")
    assert not (root / "data").exists()
    missing = tmp_path / "nowhere" / "longmemeval_s.json"
    refused(run_cli(["benchmark", "--suite", "longmemeval_s", "--path", str(missing), "--strategies", "bm25",
                     "--out", str(tmp_path / "o"), "-q"], root), 4, str(missing), "does not exist")


def test_bad_config_and_bad_partition(root):
    refused(run_cli(["run", "synthetic", "--no-track", "--set", "synthetic.episode=3"], root), 2,
            "unknown key synthetic.episode; did you mean synthetic.episodes?", hint="--set")
    refused(run_cli(["run", "synthetic", "--no-track", "--partition", "1"], root), 2, "has no partitions")
    assert not (root / "data").exists()


def test_bad_data_names_file_record_and_rule(root, tmp_path):
    bad = locomo_without_text(tmp_path)
    refused(run_cli(["ingest", "--source", "locomo", "--path", str(bad), "--out", str(tmp_path / "o")], root), 5,
            str(bad), "rule 'load_loss_within_limit'")
    refused(run_cli(["run", "ingest_locomo", "--no-track", "--set", f"sources.locomo={bad}"], root), 5,
            "stage ingest_locomo", "load_loss_within_limit")
    assert not (root / "data/canonical/locomo").exists()


def test_a_busy_lock_refuses_with_exit_6(root):
    from pipelines.locks import stage_lock
    from pipelines.stages import STAGES

    with stage_lock(root, STAGES["synthetic"], STAGES.values()):
        proc = run_cli(["run", "synthetic", "--no-track", "--no-wait"], root)
    refused(proc, 6, "stage synthetic not started", "is held by", hint="--lock-timeout")


def test_a_bad_shard_refuses_with_exit_8(root, tmp_path):
    refused(run_cli(["benchmark", "--suite", "synthetic", "--strategies", "bm25", "--no-answers", "-q", *SMALL,
                     "--out", str(tmp_path / "o"), "--shards", "2", "--shard", "2"], root), 8,
            "shard index 2 is out of range for 2 shard(s)")
    assert not (tmp_path / "o").exists()


def test_a_bad_benchmark_value_names_where_it_came_from(root, tmp_path):
    """Issue #48: a bad value is named by its origin: the command-line option that gave it (not the suite file's key
    it replaces), the --set key, the params.yaml key, or the suite file and its key."""
    bench = ["benchmark", "--suite", "synthetic", "--no-answers", "-q", *SMALL, "--out", str(tmp_path / "o")]
    error = refused(run_cli([*bench, "--strategies", "bm25,nosuch"], root), 2, "--strategies: unknown strategy(ies) "
                                                                               "['nosuch']")
    assert "suite file" not in error
    refused(run_cli([*bench, "--strategies", "bm25", "--max-episodes", "0"], root), 2,
            "--max-episodes: must be a positive integer")
    k1 = "benchmark.strategy_settings.bm25.k1"
    refused(run_cli([*bench, "--strategies", "bm25", "--set", f"{k1}=-1"], root), 2, "(set in --set)", "bm25.k1")
    (root / "params.yaml").write_text((root / "params.yaml").read_text().replace(
        "strategy_settings: {}", "strategy_settings: {bm25: {k1: -2}}"))
    refused(run_cli([*bench, "--strategies", "bm25"], root), 2, f"(set in {root / 'params.yaml'})", "-2")
    suite = tmp_path / "mine.yaml"
    suite.write_text("name: mine\nversion: 1\nsource: synthetic\nstrategies: [bm25, no_history]\n"
                     "strategy_settings: {no_history: {context_k: 0}}\n")
    refused(run_cli([*bench[:2], str(suite), *bench[3:], "--set", f"{k1}=1.2"], root), 2,
            f"suite file {suite}, key 'strategy_settings.no_history.context_k'")
    suite.write_text("name: mine\nversion: 1\nsource: synthetic\nstrategies: [bm25]\n"
                     "strategy_settings: {bm25: {k2: 1}}\n")
    refused(run_cli([*bench[:2], str(suite), *bench[3:], "--set", f"{k1}=1.2"], root), 2,
            f"suite file {suite}, key 'strategy_settings.bm25.k2': memory strategy 'bm25' has no setting(s) ['k2']")
    assert not (tmp_path / "o").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_server_is_one_message_not_a_traceback(root, tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/v1"   # nothing listens there
    proc = run_cli(["benchmark", "--suite", "synthetic", "--strategies", "no_history", "--max-episodes", "1", "-q",
                    *SMALL, "--out", str(tmp_path / "o"), "--llm-cache-dir", str(tmp_path / "llm"),
                    "--set", "llm.reader.backend=openai", "--set", f"llm.reader.base_url={url}",
                    "--set", "llm.reader.model=m", "--set", "llm.reader.max_retries=0"], root)
    refused(proc, 7, f"cannot reach the OpenAI-compatible server at {url}", hint="--no-answers")
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_verbose_shows_the_traceback_with_the_same_exit_code(root):
    proc = run_cli(["-v", "run", "nosuchstage"], root)
    assert proc.returncode == 3
    assert "Traceback" in proc.stderr and "UnknownName" in proc.stderr
    assert proc.stderr.strip().splitlines()[-2].startswith("error: unknown stage 'nosuchstage'")


def test_help_lists_the_exit_codes(root):
    proc = run_cli(["--help"], root)
    assert proc.returncode == 0
    for code, what in EXIT_CODES.items():
        assert f"  {code}  {what}" in proc.stdout
