"""How the code reads: no function over 100 lines, no citation of the tracker's issue numbers
(a reader cannot look them up) in the code or the docs."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = ("mabp_gym", "agents", "training", "examples", "benchmarks")
MAX_FUNCTION_LINES = 100
ISSUE = re.compile(r"\b[Ii]ssues? #?\d+")


def _python_files() -> list[Path]:
    return sorted(path for root in CODE for path in (ROOT / root).rglob("*.py"))


def test_code__no_function_is_over_100_lines_docstring_included():
    long = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert _python_files(), "no code found: the paths of this test are wrong"
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_code_and_docs__cite_no_issue_numbers():
    # benchmarks/RESULTS.md is the log of measurements by issue, and keeps its headings.
    files = [*_python_files(), ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in files
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if ISSUE.search(line)
    ]
    assert not cited, f"issue numbers cited: {cited}"
