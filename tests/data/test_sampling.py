from pipelines.data.sampling import evenly_spaced, seeded_sample


def test_evenly_spaced_spreads_over_the_data_in_order():
    assert evenly_spaced(list(range(10)), 4) == [0, 2, 5, 7]
    assert evenly_spaced(list(range(3)), 5) == [0, 1, 2]
    assert evenly_spaced([1, 2], None) == [1, 2]
    assert evenly_spaced(list(range(7)), 7) == list(range(7))
    assert evenly_spaced("abcdef", 2) == ["a", "d"]  # any sequence; the first item always kept


def test_seeded_sample_keeps_a_seeded_sample_in_its_order():
    items = list(range(50))
    kept = seeded_sample(items, 10, "salt:1")
    assert len(kept) == 10 and kept == sorted(kept) and kept == seeded_sample(items, 10, "salt:1")
    assert kept != seeded_sample(items, 10, "salt:2")
    assert seeded_sample(items, None, "salt:1") == items and seeded_sample(items[:3], 10, "salt:1") == items[:3]
