import pytest

from confkit import ParseError, loads


def test_sections():
    assert loads("[main]\nalpha = 7\n[extra]\nbeta = 9\n") == {"main": {"alpha": "7"}, "extra": {"beta": "9"}}


def test_inline_hash_comment():
    assert loads("[db]\nuser = admin    # default user\n") == {"db": {"user": "admin"}}


def test_inline_semicolon_comment():
    assert loads("[db]\npath = /var/lib/app.db   ; primary\ntimeout = 30\t; seconds\n") == {
        "db": {"path": "/var/lib/app.db", "timeout": "30"}}


def test_hash_without_space_is_kept():
    assert loads("[ui]\nbg = #00ccff\ntag = v1;beta\n") == {"ui": {"bg": "#00ccff", "tag": "v1;beta"}}


def test_quoted():
    text = '[ui]\ntitle = "hello world"\nhint = "x ; y # z"  ; trailing\nblank = ""\n'
    assert loads(text) == {"ui": {"title": "hello world", "hint": "x ; y # z", "blank": ""}}


def test_full_line_comments():
    assert loads("; header\n# second\n[ui]\n\t; indented\nmode = dark\n") == {"ui": {"mode": "dark"}}


def test_error():
    with pytest.raises(ParseError):
        loads("[ui]\njust a line\n")
