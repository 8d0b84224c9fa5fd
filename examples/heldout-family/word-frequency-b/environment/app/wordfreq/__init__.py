from wordfreq.count import top_words

__all__ = ["top_words"]
