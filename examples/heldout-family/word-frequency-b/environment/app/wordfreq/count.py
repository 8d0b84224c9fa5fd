"""Word frequencies."""

from collections import Counter


def words(text):
    return text.split()


def top_words(text, n):
    """The n most frequent words as (word, count), most frequent first, ties alphabetical."""
    counts = Counter(words(text))
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
