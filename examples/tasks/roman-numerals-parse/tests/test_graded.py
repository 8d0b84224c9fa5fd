import pytest

from numerals import from_roman, to_roman


def test_examples():
    assert from_roman("MCMXCIV") == 1994
    assert from_roman("XLII") == 42
    assert from_roman("MMMCMXCIX") == 3999


def test_round_trip():
    for number in range(1, 4000):
        assert from_roman(to_roman(number)) == number


@pytest.mark.parametrize("text", ["", "IIII", "IC", "VX", "MMMM", "abc", "xiv", "IIV", "XM"])
def test_invalid(text):
    with pytest.raises(ValueError):
        from_roman(text)
