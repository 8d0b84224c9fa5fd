from spans import merge


def test_overlap():
    assert merge([(1, 3), (2, 5)]) == [(1, 5)]


def test_disjoint():
    assert merge([(1, 2), (5, 6)]) == [(1, 2), (5, 6)]
