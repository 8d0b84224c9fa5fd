import pytest

from timefmt import format_duration, parse_duration


def test_hours_minutes():
    assert parse_duration("1h30m") == 5400


def test_all_units():
    assert parse_duration("2d3h4m5s") == 2 * 86400 + 3 * 3600 + 4 * 60 + 5


def test_seconds_only():
    assert parse_duration("45s") == 45


def test_whitespace():
    assert parse_duration(" 1h 30m ") == 5400


def test_plain_integer():
    assert parse_duration("90") == 90


@pytest.mark.parametrize("text", ["", "  ", "5x", "1m1h", "1h1h", "-5s", "h", "1.5h"])
def test_invalid(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_round_trip():
    for seconds in (1, 59, 61, 3600, 86399, 90061):
        assert parse_duration(format_duration(seconds)) == seconds
