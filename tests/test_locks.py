"""pipelines.locks: one execution per stage (and per shared output), waiting, refusing, naming the holder."""

import json
import os
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from pipelines.errors import ConfigError
from pipelines.locks import StageBusy, lock_names, overlap, stage_lock, timeout_from_env


def stage(name, *outputs):
    return SimpleNamespace(name=name, outputs=outputs)


BENCH = stage("benchmark", "reports/benchmark.md", "reports/metrics.json", "reports/plots")
INGEST = stage("ingest_locomo", "data/canonical/locomo")
SUMMARY = stage("summary", "reports")  # a stage writing the folder the benchmark writes into
STAGES = [BENCH, INGEST, SUMMARY]


@pytest.mark.parametrize("a,b,expected", [
    ("reports/plots", "reports/plots", True), ("reports", "reports/plots/x.png", True),
    ("reports/plots/", "./reports/plots", True), ("reports/benchmark.md", "reports/metrics.json", False),
    ("data/canonical/locomo", "data/canonical/locomo2", False),
])
def test_overlap(a, b, expected):
    assert overlap(a, b) is expected and overlap(b, a) is expected


def test_a_stage_takes_the_locks_of_the_stages_sharing_its_outputs():
    assert lock_names(BENCH, STAGES) == ["benchmark", "summary"]
    assert lock_names(SUMMARY, STAGES) == ["benchmark", "summary"]
    assert lock_names(INGEST, STAGES) == ["ingest_locomo"]


def test_second_run_refuses_naming_the_holder(tmp_path):
    with stage_lock(tmp_path, BENCH, STAGES) as held:
        assert held.identity == f"{socket.gethostname()}:{(tmp_path / '.mnemos/locks/benchmark.lock').resolve()}"
        recorded = json.loads((tmp_path / ".mnemos/locks/benchmark.lock").read_text())
        assert recorded["pid"] == os.getpid() and recorded["stage"] == "benchmark"
        for other in (BENCH, SUMMARY):  # the same stage, and a stage writing the same folder
            with pytest.raises(StageBusy) as err:
                with stage_lock(tmp_path, other, STAGES, timeout=0):
                    pass
            assert f"pid {os.getpid()} on {socket.gethostname()}" in str(err.value)
            assert "held by stage benchmark" in str(err.value) and "--no-wait" in str(err.value)
        with stage_lock(tmp_path, INGEST, STAGES, timeout=0):  # disjoint outputs: runs side by side
            pass
    with stage_lock(tmp_path, BENCH, STAGES, timeout=0):  # released at the end of the first
        pass
    assert (tmp_path / ".mnemos/locks/benchmark.lock").read_text() == ""  # no stale holder once released


def test_a_bounded_wait_gives_up_and_an_unbounded_one_gets_the_lock(tmp_path, caplog):
    release = threading.Event()

    def hold():
        with stage_lock(tmp_path, BENCH, STAGES):
            held.set()
            release.wait(10)

    held = threading.Event()
    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    started = time.monotonic()
    with pytest.raises(StageBusy, match="still held by stage benchmark"):
        with stage_lock(tmp_path, BENCH, STAGES, timeout=0.3):
            pass
    assert time.monotonic() - started >= 0.3
    threading.Timer(0.3, release.set).start()
    with caplog.at_level("WARNING", logger="mnemos"):
        with stage_lock(tmp_path, BENCH, STAGES):  # waits until the holder ends
            assert release.is_set()
    holder.join(10)
    assert "stage benchmark waits: its lock" in caplog.text and f"pid {os.getpid()}" in caplog.text


def test_timeout_from_env():
    assert timeout_from_env({}) is None
    assert timeout_from_env({"MNEMOS_LOCK_TIMEOUT": "0"}) == 0.0
    assert timeout_from_env({"MNEMOS_LOCK_TIMEOUT": "90"}) == 90.0
    with pytest.raises(ConfigError, match="MNEMOS_LOCK_TIMEOUT='soon'"):
        timeout_from_env({"MNEMOS_LOCK_TIMEOUT": "soon"})
