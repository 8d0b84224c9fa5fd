import pytest

from minicalc import CalcError, evaluate


def test_precedence():
    assert evaluate("1 + 2 * 3") == 7


def test_parentheses():
    assert evaluate("(1 + 2) * 3") == 9


def test_error():
    with pytest.raises(CalcError):
        evaluate("1 +")
