"""A toy tool-use task: arithmetic questions, a calculator tool, and its reward.

The agent (actors/sessions/agent.py) asks the model; a reply containing ``CALC(<expression>)`` is a tool call, one
containing ``ANSWER: <n>`` ends the episode.
"""

from __future__ import annotations

import ast
import random
import re
from typing import Any

SYSTEM_PROMPT = "Tools: CALC(expr). End with ANSWER: n."
CALL = re.compile(r"CALC\(([^()]{1,64})\)")
ANSWER = re.compile(r"ANSWER:\s*(-?\d{1,12})")
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}
MAX_OPERANDS = 8


class CalculatorError(ValueError):
    """The expression is not one the calculator computes."""


def calculate(expression: str) -> int:
    """The value of ``expression`` (integers, ``+ - *``, parentheses; at most 8 operands of at most 6 digits),
    parsed by :mod:`ast`: a model's text is never given to ``eval``."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r}") from None
    operands = 0

    def value(node: ast.AST) -> int:
        nonlocal operands
        if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value < 10**6:
            operands += 1
            if operands > MAX_OPERANDS:
                raise CalculatorError(f"more than {MAX_OPERANDS} numbers in {expression!r}")
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise CalculatorError(f"only integers with + - * are allowed, got {expression!r}")

    return value(tree.body)


def tool_reply(reply: str) -> str | None:
    """The ``tool`` message for an assistant ``reply``: the result of its CALC call, an error, or None for an
    answer."""
    if ANSWER.search(reply):
        return None
    call = CALL.search(reply)
    if call is None:
        return "error: no CALC(expr)"
    try:
        return f"{call.group(1).strip()} = {calculate(call.group(1))}"
    except CalculatorError as exc:
        return f"error: {exc}"


def make_questions(count: int, *, seed: int = 0, max_operand: int = 9) -> list[dict[str, Any]]:
    """``count`` prompts ``{"question": "3+4=?", "label": 7}``."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        a, b, op = rng.randint(0, max_operand), rng.randint(0, max_operand), rng.choice("+-*")
        prompts.append({"question": f"{a}{op}{b}=?", "label": calculate(f"{a}{op}{b}")})
    return prompts


def calculator_reward(final_reply: str, label: Any) -> float:
    """1 for ``ANSWER: <label>``, 0.5 for the right number written otherwise, else a small credit per digit
    (so a random policy gets a signal at once)."""
    found = ANSWER.search(final_reply)
    if found is not None and int(found.group(1)) == int(label):
        return 1.0
    if str(int(label)) in re.findall(r"-?\d+", final_reply):
        return 0.5
    digits = sum(ch.isdigit() for ch in final_reply)
    return 0.2 * digits / max(1, len(final_reply))
