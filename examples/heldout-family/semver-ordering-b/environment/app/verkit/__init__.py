from verkit.version import compare, max_version, parse

__all__ = ["compare", "max_version", "parse"]
