from spans import merge


def test_overlap():
    assert merge([(1, 3), (2, 5)]) == [(1, 5)]


def test_unsorted():
    assert merge([(5, 6), (1, 3), (2, 4)]) == [(1, 4), (5, 6)]


def test_touching():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]


def test_contained():
    assert merge([(1, 10), (2, 3)]) == [(1, 10)]


def test_empty():
    assert merge([]) == []
