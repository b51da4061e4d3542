"""The README's quick start runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme__quick_start_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "the README has no python quick start"
    namespace: dict = {}
    exec(compile(blocks[0], "README quick start", "exec"), namespace)  # noqa: S102
    stable = namespace["mabp_gym"].stable_load(namespace["records"])
    assert set(stable) == {"bp", "mabp"}


def test_readme__opens_with_the_install_and_test_commands():
    first = re.match(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    assert first is not None
    lines = first.group(1).strip().splitlines()
    assert len(lines) == 2
    # The main job needs the core only; the tests need the learning stack on torch's CPU build.
    assert lines[0].startswith("pip install -e . && ") and "mabp-gym eval" in lines[0]
    assert "torch" not in lines[0]
    assert lines[1].startswith("pip install torch==2.13.0 && pip install -e")
    # Every test, in two stages: the library's, then the examples end to end.
    stages = '&& python -m pytest -m "not examples" && python -m pytest -m examples'
    assert lines[1].endswith(stages)
