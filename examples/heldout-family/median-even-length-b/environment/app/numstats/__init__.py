from numstats.core import mean, median, mode

__all__ = ["mean", "median", "mode"]
