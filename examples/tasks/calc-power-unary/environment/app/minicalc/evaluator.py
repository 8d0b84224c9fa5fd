"""A recursive-descent evaluator for arithmetic expressions."""

import re


class CalcError(ValueError):
    pass


_TOKEN = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|(.))")


def tokenize(text):
    tokens = []
    for number, op in _TOKEN.findall(text):
        if number:
            tokens.append(float(number) if "." in number else int(number))
        elif op.strip():
            if op not in "+-*/()":
                raise CalcError(f"unexpected character {op!r}")
            tokens.append(op)
    return tokens


class _Parser:
    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self):
        token = self.peek()
        self.pos += 1
        return token

    def expression(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = value + rhs if op == "+" else value - rhs
        return value

    def term(self):
        value = self.atom()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.atom()
            if op == "/" and rhs == 0:
                raise CalcError("division by zero")
            value = value * rhs if op == "*" else value / rhs
        return value

    def atom(self):
        token = self.take()
        if token == "(":
            value = self.expression()
            if self.take() != ")":
                raise CalcError("missing )")
            return value
        if isinstance(token, (int, float)):
            return token
        raise CalcError(f"unexpected token {token!r}")


def evaluate(expression):
    parser = _Parser(tokenize(expression))
    value = parser.expression()
    if parser.peek() is not None:
        raise CalcError(f"unexpected token {parser.peek()!r}")
    return value
