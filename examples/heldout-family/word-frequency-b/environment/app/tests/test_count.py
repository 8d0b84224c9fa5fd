from wordfreq import top_words


def test_simple():
    assert top_words("b a b", 1) == [("b", 2)]
