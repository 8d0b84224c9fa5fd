import pytest

from confkit import ParseError, loads


def test_sections():
    assert loads("[a]\nx = 1\n[b]\ny = 2\n") == {"a": {"x": "1"}, "b": {"y": "2"}}


def test_inline_hash_comment():
    assert loads("[s]\nhost = example.org   # production\n") == {"s": {"host": "example.org"}}


def test_inline_semicolon_comment():
    assert loads("[s]\nport = 8080 ; default\n") == {"s": {"port": "8080"}}


def test_hash_without_space_is_kept():
    assert loads("[s]\ncolor = #ff0000\nurl = a#b\n") == {"s": {"color": "#ff0000", "url": "a#b"}}


def test_quoted():
    text = '[s]\nname = "my app"\nmotto = "a # b ; c"  # trailing\nempty = ""\n'
    assert loads(text) == {"s": {"name": "my app", "motto": "a # b ; c", "empty": ""}}


def test_full_line_comments():
    assert loads("# top\n; also\n[s]\n  # indented\nk = v\n") == {"s": {"k": "v"}}


def test_error():
    with pytest.raises(ParseError):
        loads("[s]\nnot a pair\n")
