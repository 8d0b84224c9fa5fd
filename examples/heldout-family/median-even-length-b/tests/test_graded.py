import pytest

from numstats import mean, median, mode


def test_mean():
    assert mean([2, 4, 6, 9]) == 5.25


def test_median_odd():
    assert median([9, 2, 7, 4, 5]) == 5


def test_median_even():
    assert median([8, 2, 6, 5]) == 5.5


def test_median_even_two():
    assert median([1, -4]) == -1.5


def test_median_empty():
    with pytest.raises(ValueError):
        median([])


def test_mode():
    assert mode([4, 4, 7, 7, 1]) == 4
