"""docs/python.md's examples, run as they are: every ```python block, in
order, in one namespace, from a fresh directory holding the files they
name."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .conftest import REPO

GUIDE = REPO / "docs" / "python.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_guides_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = BLOCK.findall(GUIDE.read_text())
    assert len(blocks) >= 8, "the guide's examples were not found"
    for relative in ("crates/skein-py/tests/data", "crates/skein-recorded/examples/data"):
        shutil.copytree(REPO / relative, tmp_path / relative)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "guide"}
    for number, block in enumerate(blocks):
        code = compile(block, f"{GUIDE}:block {number}", "exec")
        exec(code, namespace)
