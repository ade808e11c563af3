"""Lines of the same two-tool durable, resumable agent on parlour and on Pydantic AI.

Counts code lines: not blank, not only a comment, not a docstring's continuation.

    python benchmarks/agent_lines/count.py
"""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {"parlour": HERE / "parlour_agent.py", "pydantic-ai": HERE / "pydantic_ai_agent.py"}


def code_lines(path: Path) -> int:
    """Non-blank lines that are not only a comment and not inside a module docstring."""
    source = path.read_text()
    tree = ast.parse(source)
    skip: set[int] = set()
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        skip.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = source.splitlines()
    return sum(
        1
        for n, line in enumerate(lines, 1)
        if n not in skip and line.strip() and not line.strip().startswith("#")
    )


def main() -> None:
    counts = {name: code_lines(path) for name, path in FILES.items()}
    for name, count in counts.items():
        print(f"{name:<12}{count:>4} lines")
    print(f"parlour / pydantic-ai: {counts['parlour'] / counts['pydantic-ai']:.2f}")


if __name__ == "__main__":
    main()
