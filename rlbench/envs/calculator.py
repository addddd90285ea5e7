"""A calculator the model calls by writing `[EXPR]`: when generation emits `]`, the environment
evaluates the integer expression since the last `[` and writes its value after the bracket; the
model then goes on (normally with end-of-sequence: the value is its answer). `5*(3+4)` style
expressions with + - * // % and parentheses; anything else gets `?`. The written value is the
environment's, not the model's: trainers mask it out of the policy's loss (Completion.tool_mask).
"""

from __future__ import annotations

import ast
import operator

OPEN, CLOSE = "[", "]"
ERROR = "?"
MAX_DIGITS = 12  # a longer result is refused: no exponent blow-ups through repeated products
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        value = _OPS[type(node.op)](_eval(node.left), _eval(node.right))
        if len(str(abs(value))) > MAX_DIGITS:
            raise ValueError("result too large")
        return value
    raise ValueError(f"not allowed: {type(node).__name__}")


def calculate(expr: str) -> str:
    """The value of an integer expression as text, or `?` for anything that is not one."""
    if len(expr) > 64:
        return ERROR
    try:
        return str(_eval(ast.parse(expr.strip(), mode="eval")))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return ERROR


class Calculator:
    """The tool a generation loop consults after each `]` (`respond`), and the answer parse that
    goes with it (`final_text`)."""

    name = "calculator"
    stop = CLOSE

    def respond(self, prompt: str, completion: str) -> str:
        """What the environment writes after a completion that ends in `]` (the prompt plays no part)."""
        start = completion.rfind(OPEN)
        return calculate(completion[start + 1:-1]) if start >= 0 else ERROR

    @staticmethod
    def final_text(completion: str) -> str:
        """The part of a completion that holds its answer: after the last call, if any."""
        return completion[completion.rfind(CLOSE) + 1:] if CLOSE in completion else completion
