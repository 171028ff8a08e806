from pipelines.data.sampling import evenly_spaced


def test_evenly_spaced_spreads_over_the_data_in_order():
    assert evenly_spaced(list(range(10)), 4) == [0, 2, 5, 7]
    assert evenly_spaced(list(range(3)), 5) == [0, 1, 2]
    assert evenly_spaced([1, 2], None) == [1, 2]
    assert evenly_spaced(list(range(7)), 7) == list(range(7))
    assert evenly_spaced("abcdef", 2) == ["a", "d"]  # any sequence; the first item always kept
