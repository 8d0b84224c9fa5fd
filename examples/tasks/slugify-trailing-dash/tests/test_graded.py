from textkit.slug import slugify


def test_simple_title():
    assert slugify("Hello World") == "hello-world"


def test_trailing_punctuation():
    assert slugify("Hello, World!") == "hello-world"


def test_leading_and_trailing_space():
    assert slugify("  spaced out  ") == "spaced-out"


def test_custom_separator():
    assert slugify("...Dots & Things...", sep="_") == "dots_things"


def test_unicode():
    assert slugify("\u00dcber Caf\u00e9!") == "uber-cafe"
