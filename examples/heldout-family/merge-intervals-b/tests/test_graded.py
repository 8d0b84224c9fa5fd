from spans import merge


def test_overlap():
    assert merge([(2, 6), (4, 8)]) == [(2, 8)]


def test_unsorted():
    assert merge([(10, 12), (3, 5), (4, 7)]) == [(3, 7), (10, 12)]


def test_touching():
    assert merge([(4, 7), (7, 9)]) == [(4, 9)]


def test_unsorted_touching_chain():
    assert merge([(6, 8), (1, 3), (3, 6)]) == [(1, 8)]


def test_contained():
    assert merge([(0, 20), (5, 6), (8, 15)]) == [(0, 20)]


def test_empty():
    assert merge([]) == []
