"""pipelines/evaluate/shards.py: the deal of episodes into shards, the store of finished episodes, the merge."""

from __future__ import annotations

import json

import pytest

from pipelines.evaluate.protocol import ProtocolConfig, run_protocol
from pipelines.evaluate.shards import (EPISODES, MANIFEST, ShardError, ShardSpec, ShardStore, _sum_writers,
                                       data_digest, merge, results_from_records, run_fingerprint, run_shard)
from pipelines.memory import build_strategy
from tests.evaluate.conftest import build_episode

CONFIG = ProtocolConfig(ks=(1, 3), show_progress=False)


def _episodes(n: int):
    base = build_episode()
    return [base.model_copy(update={"id": f"ep-{i}"}) for i in range(n)]


def _fingerprint(data: str = "d", count: int = 1, suite: str = "s") -> dict:
    return run_fingerprint({"suite": suite}, {"bm25": {}}, CONFIG, data, count)


@pytest.mark.parametrize("index,count,message", [(2, 2, r"out of range for 2 shard\(s\)"), (-1, 3, "out of range"),
                                                 (0, 0, "at least 1"), (True, 2, "integer")])
def test_shard_spec_refuses_what_cannot_be_a_shard(index, count, message):
    with pytest.raises(ShardError, match=message):
        ShardSpec(index, count)


def test_round_robin_deal_covers_every_position_once():
    shards = [ShardSpec(i, 3) for i in range(3)]
    for position in range(20):
        assert [s.holds(position) for s in shards].count(True) == 1
        assert shards[position % 3].holds(position)


def test_one_shard_equals_run_protocol_per_strategy():
    episodes = _episodes(3)
    records = run_shard(episodes, ["bm25", "long_context"], lambda name: build_strategy(name), CONFIG)
    results = results_from_records(records.values(), ["bm25", "long_context"])
    for name in ("bm25", "long_context"):
        plain = run_protocol(episodes, name, CONFIG)
        assert results[name].scores == plain.scores
        assert results[name].excluded == plain.excluded
        assert results[name].memory == plain.memory
        assert results[name].episodes == plain.episodes == 3


def test_store_resumes_after_whole_lines_and_drops_a_torn_one(tmp_path):
    episodes = _episodes(4)
    build = lambda name: build_strategy(name)  # noqa: E731
    store = ShardStore(tmp_path / "s", _fingerprint(), ShardSpec(), "s")
    first = run_shard(episodes[:2], ["bm25"], build, CONFIG, store=store)
    assert json.loads((tmp_path / "s" / MANIFEST).read_text())["complete"] is True
    with (tmp_path / "s" / EPISODES).open("a") as f:
        f.write('{"position": 2, "episode": "ep-2", "strat')  # a kill in the middle of a write
    calls = []

    def counting(name):
        calls.append(name)
        return build_strategy(name)

    again = ShardStore(tmp_path / "s", _fingerprint(), ShardSpec(), "s")
    assert sorted(again.done) == [0, 1]
    records = run_shard(episodes, ["bm25"], counting, CONFIG, store=again)
    assert sorted(records) == [0, 1, 2, 3] and records[0] == first[0]
    assert len(calls) == 1 + 2  # one prepare over the 2 episodes left, one memory each; none for the finished ones
    lines = (tmp_path / "s" / EPISODES).read_text().splitlines()
    assert [json.loads(x)["position"] for x in lines] == [0, 1, 2, 3]


def test_store_of_another_run_starts_again(tmp_path):
    store = ShardStore(tmp_path / "s", _fingerprint("old"), ShardSpec(), "s")
    run_shard(_episodes(2), ["bm25"], lambda n: build_strategy(n), CONFIG, store=store)
    fresh = ShardStore(tmp_path / "s", _fingerprint("new"), ShardSpec(), "s")
    assert fresh.done == {}
    assert (tmp_path / "s" / EPISODES).read_text() == ""


def _shards(tmp_path, count: int, data: str = "d") -> list:
    folders = []
    for i in range(count):
        spec = ShardSpec(i, count)
        store = ShardStore(tmp_path / spec.label, _fingerprint(data, count), spec, "s")
        run_shard(_episodes(5), ["bm25"], lambda n: build_strategy(n), CONFIG, spec, store)
        folders.append(tmp_path / spec.label)
    return folders


def test_merge_puts_the_episodes_back_in_order(tmp_path):
    merged = merge(_shards(tmp_path, 2))
    assert [r["position"] for r in merged.records] == [0, 1, 2, 3, 4]
    assert [r["episode"] for r in merged.records] == [f"ep-{i}" for i in range(5)]
    result = results_from_records(merged.records, ["bm25"])["bm25"]
    assert result.scores == run_protocol(_episodes(5), "bm25", CONFIG).scores


def test_merge_refusals(tmp_path):
    folders = _shards(tmp_path / "a", 3)
    with pytest.raises(ShardError, match="missing shard.*1-of-3"):
        merge([folders[0], folders[2]])
    with pytest.raises(ShardError, match="given twice"):
        merge([folders[0], folders[0]])
    other = _shards(tmp_path / "b", 3, data="other")
    with pytest.raises(ShardError, match="different runs.*data"):
        merge([folders[0], folders[1], other[2]])
    manifest = folders[2] / MANIFEST
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "complete": False}))
    with pytest.raises(ShardError, match="2-of-3.*did not finish"):
        merge(folders)
    with pytest.raises(ShardError, match="no readable shard manifest"):
        merge([tmp_path / "nothing"])


def test_writer_reports_add_up_per_role_and_model():
    a = [{"role": "extractor", "model": "m", "calls": 2, "seconds": 1.5, "parse": {"valid": 1, "dropped": 1}}]
    b = [{"role": "extractor", "model": "m", "calls": 3, "seconds": 0.5, "parse": {"valid": 2}},
         {"role": "summary", "model": "m", "calls": 1}]
    total = _sum_writers(_sum_writers([], a), b)
    assert total == [{"role": "extractor", "model": "m", "calls": 5, "seconds": 2.0,
                      "parse": {"valid": 3, "dropped": 1}}, {"role": "summary", "model": "m", "calls": 1}]


def test_data_digest_follows_the_bytes(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text("x")
    first = data_digest([tmp_path / "d"])
    assert data_digest([tmp_path / "d"]) == first
    (tmp_path / "d" / "a.jsonl").write_text("y")
    assert data_digest([tmp_path / "d"]) != first
    assert data_digest(extra={"seed": 1}) != data_digest(extra={"seed": 2})


def test_streamed_blocks_give_the_same_records_and_release_earlier_episodes():
    import gc
    import weakref

    alive: list[weakref.ref] = []
    seen_at_prepare: list[int] = []

    def stream():  # made one at a time, as a streaming loader yields them
        for i in range(6):
            episode = _episodes(1)[0].model_copy(update={"id": f"ep-{i}"})
            alive.append(weakref.ref(episode))
            yield episode

    def build(name):
        strategy = build_strategy(name)
        original = strategy.prepare

        def prepare(episodes):
            gc.collect()
            seen_at_prepare.append(sum(1 for ref in alive if ref() is not None))
            return original(episodes)

        strategy.prepare = prepare
        return strategy

    streamed = run_shard(stream(), ["bm25"], build, CONFIG, prepare_block=2)
    listed = run_shard(_episodes(6), ["bm25"], lambda n: build_strategy(n), CONFIG)
    assert results_from_records(streamed.values(), ["bm25"])["bm25"].scores == \
        results_from_records(listed.values(), ["bm25"])["bm25"].scores
    assert seen_at_prepare == [2, 2, 2]  # one block of 2 in memory at a time, the earlier ones released
    with pytest.raises(ValueError, match="prepare_block"):
        run_shard(_episodes(1), ["bm25"], build, CONFIG, prepare_block=0)


def test_a_writers_longest_prompt_is_the_larger_not_the_sum():
    a = [{"role": "peer.llm", "model": "m", "calls": 19, "longest_prompt": 2507}]
    b = [{"role": "peer.llm", "model": "m", "calls": 32, "longest_prompt": 1900}]
    assert _sum_writers(_sum_writers([], a), b) == [{"role": "peer.llm", "model": "m", "calls": 51,
                                                      "longest_prompt": 2507}]


def test_where_a_cache_lives_is_not_part_of_a_run(tmp_path):
    """Issue #48: the embedding cache, the language-model response cache and the exported encoders are where caches
    live, not what is computed: any folder (or none) gives the same run; a setting that changes results does not."""
    exported = tmp_path / "encoders"
    (exported / "minilm").mkdir(parents=True)
    (exported / "minilm" / "model.onnx").write_bytes(b"x")   # a cache that filled as a run went: not a model

    def run(**dense) -> dict:
        peer = {"llm": {"model": "m", "llm_cache_dir": dense.get("cache_dir")}}   # a nested cache location
        return run_fingerprint({"suite": "s"}, {"bm25": {}, "dense": {"batch_size": 32, **dense}, "peer": peer},
                               CONFIG, "d", 2)

    plain = run(cache_dir=None)
    for caches in ({"cache_dir": str(tmp_path / "a")}, {"cache_dir": "D", "llm_cache_dir": "L"},
                   {"cache_dir": str(tmp_path / "b"), "export_dir": str(exported), "judge_cache_dir": "J"}):
        assert run(**caches)["run"] == plain["run"], caches
    assert run(batch_size=8)["run"] != plain["run"]   # a setting, not a cache location
    assert not any(k.endswith(("cache_dir", "export_dir")) for k in plain["values"])
    from pipelines.evaluate.shards import CACHE_LOCATIONS, is_cache_location

    assert {"cache_dir", "llm_cache_dir", "export_dir"} <= CACHE_LOCATIONS and is_cache_location("judge_cache_dir")
    assert not is_cache_location("model_path") and not is_cache_location("cache_features")


def test_merge_names_what_differs_where_it_came_from_and_both_values(tmp_path):
    """Issue #48: shards of runs that differ are refused naming each differing value as the user gave it, with the
    value of each shard, not an internal part name ("strategies")."""
    def shard(folder, index: int, k1: float, origin: str, budget: int):
        spec = ShardSpec(index, 2)
        fingerprint = run_fingerprint({"suite": "s", "budget_tokens": budget}, {"bm25": {"k1": k1}}, CONFIG, "d", 2,
                                      origins={"settings.bm25.k1": origin,
                                               "suite.budget_tokens": "suite file s.yaml, key 'budget_tokens'"})
        store = ShardStore(folder / spec.label, fingerprint, spec, "s")
        run_shard(_episodes(3), ["bm25"], lambda n: build_strategy(n, k1=k1), CONFIG, spec, store)
        return folder / spec.label

    folders = [shard(tmp_path, 0, 1.2, "benchmark.strategy_settings.bm25.k1 in params.yaml", 1024),
               shard(tmp_path, 1, 0.5, "--set benchmark.strategy_settings.bm25.k1", 512)]
    with pytest.raises(ShardError) as refused:
        merge(folders)
    message = str(refused.value)
    assert "benchmark.strategy_settings.bm25.k1 in params.yaml: 1.2 in shard 0-of-2" in message
    assert "--set benchmark.strategy_settings.bm25.k1: 0.5 in shard 1-of-2" in message
    assert "suite file s.yaml, key 'budget_tokens': 1024 in shard 0-of-2, 512 in shard 1-of-2" in message
    assert "they differ in: strategies" not in message and "code" not in message
