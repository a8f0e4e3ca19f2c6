"""Every ```python example of docs/python.md runs, each in a fresh interpreter (its asserts are the test)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_its_examples():
    assert len(EXAMPLES) == 7  # composites, torchtitan, FSDP2, transformers, zero-copy, JAX, NumPy


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(index, tmp_path):
    if "torchtitan" in EXAMPLES[index]:
        pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/python-test-env installs it)")
    r = subprocess.run([sys.executable, "-c", EXAMPLES[index]], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"docs/python.md example {index + 1}:\n{EXAMPLES[index]}\n{r.stderr[-3000:]}"
