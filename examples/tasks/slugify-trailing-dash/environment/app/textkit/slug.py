"""URL slugs."""

import re
import unicodedata


def slugify(text: str, sep: str = "-") -> str:
    """Turn a title into a lowercase ASCII slug: 'Hello World' -> 'hello-world'."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^A-Za-z0-9]+", sep, text)
    return text.lower()
