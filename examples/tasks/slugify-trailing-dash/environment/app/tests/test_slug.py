from textkit.slug import slugify


def test_simple_title():
    assert slugify("Hello World") == "hello-world"


def test_accents_are_folded():
    assert slugify("Creme Brulee") == "creme-brulee"
