import pytest

from numerals import from_roman, to_roman


def test_examples():
    assert from_roman("MMXXIV") == 2024
    assert from_roman("LXXVII") == 77
    assert from_roman("CDXLIV") == 444
    assert from_roman("MMMDCCCLXXXVIII") == 3888


def test_round_trip():
    for number in range(1, 4000):
        assert from_roman(to_roman(number)) == number


@pytest.mark.parametrize("text", ["", "VV", "XD", "LC", "CCCC", "xyz", "mcm", "IIX", "DM", "MMMMI", "IL"])
def test_invalid(text):
    with pytest.raises(ValueError):
        from_roman(text)
