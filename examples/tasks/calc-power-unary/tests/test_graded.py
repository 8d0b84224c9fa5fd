import pytest

from minicalc import CalcError, evaluate


def test_basics():
    assert evaluate("1 + 2 * 3") == 7
    assert evaluate("(1 + 2) * 3") == 9
    assert evaluate("7 / 2") == 3.5


def test_unary_minus():
    assert evaluate("-3") == -3
    assert evaluate("2 * -3") == -6
    assert evaluate("-(1 + 2)") == -3
    assert evaluate("--4") == 4
    assert evaluate("+5") == 5


def test_power():
    assert evaluate("2 ** 10") == 1024
    assert evaluate("2 ** 3 ** 2") == 512
    assert evaluate("(2 ** 3) ** 2") == 64


def test_power_and_unary():
    assert evaluate("-2 ** 2") == -4
    assert evaluate("(-2) ** 2") == 4
    assert evaluate("2 ** -1") == 0.5


@pytest.mark.parametrize("text", ["1 +", "2 ** ", "* 3", "(1", "1 / 0", "2 $ 3", "3 4"])
def test_errors(text):
    with pytest.raises(CalcError):
        evaluate(text)
