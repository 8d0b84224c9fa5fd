from verkit import compare, parse


def test_parse():
    assert parse("1.2.3-rc.1") == ("1", "2", "3", "rc.1")


def test_equal():
    assert compare("1.2.3", "1.2.3") == 0
