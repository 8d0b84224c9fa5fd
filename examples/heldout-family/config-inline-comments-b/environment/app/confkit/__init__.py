from confkit.parser import ParseError, loads

__all__ = ["ParseError", "loads"]
