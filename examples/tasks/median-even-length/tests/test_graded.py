import pytest

from numstats import mean, median, mode


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert median([5, 1, 3]) == 3


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_median_even_two():
    assert median([10, 20]) == 15


def test_median_empty():
    with pytest.raises(ValueError):
        median([])


def test_mode():
    assert mode([1, 2, 2, 3, 3]) == 2
