"""The Dagster code location loads, and its assets are exactly the registry's stages."""

import dagster as dg

from assets.definitions import defs
from pipelines.stages import STAGES, upstream


def test_definitions_load_with_one_asset_per_stage():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == set(STAGES)


def test_assets_carry_group_description_deps_and_checks():
    graph = defs.resolve_asset_graph()
    for name, stage in STAGES.items():
        node = graph.get(dg.AssetKey(name))
        assert node.group_name == stage.group
        assert node.description == stage.description
        assert {k.to_user_string() for k in node.parent_keys} == set(upstream(stage))
        checks = {k.name for k in node.check_keys}
        assert checks == {c.name for c in stage.checks}
    ingest = graph.get(dg.AssetKey("ingest_synthetic"))
    assert ingest.check_keys, "validation rules are asset checks"
