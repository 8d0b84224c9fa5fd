from wordfreq import top_words


def test_simple():
    assert top_words("b a b", 2) == [("b", 2), ("a", 1)]


def test_case_insensitive():
    assert top_words("The cat and the hat. THE end", 1) == [("the", 3)]


def test_punctuation():
    assert top_words("stop, stop! stop? go", 2) == [("stop", 3), ("go", 1)]


def test_apostrophe():
    assert top_words("don't Don't do", 1) == [("don't", 2)]


def test_ties_alphabetical():
    assert top_words("b a c", 3) == [("a", 1), ("b", 1), ("c", 1)]
