from timefmt import format_duration, parse_duration


def test_hours_minutes():
    assert parse_duration("1h30m") == 5400


def test_format():
    assert format_duration(5400) == "1h30m"
