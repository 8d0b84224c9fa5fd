from wordfreq import top_words


def test_simple():
    assert top_words("y x y z y", 2) == [("y", 3), ("x", 1)]


def test_case_insensitive():
    assert top_words("A dog saw a Dog. DOG ran", 1) == [("dog", 3)]


def test_punctuation():
    assert top_words("go; go... (go) stop!", 2) == [("go", 3), ("stop", 1)]


def test_apostrophe():
    assert top_words("It's it's its", 1) == [("it's", 2)]


def test_ties_alphabetical():
    assert top_words("delta alpha charlie bravo", 2) == [("alpha", 1), ("bravo", 1)]
