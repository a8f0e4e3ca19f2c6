"""docs/python.md's examples: each self-contained ```python block runs in a fresh interpreter (its asserts
are the test); a block marked <!-- FILE [docs:REGION] --> is that region of a tested file, verbatim."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "python.md"
BLOCKS = re.findall(r"(?:<!-- (\S+) \[docs:(\w+)\] -->\n)?```python\n(.*?)```", DOC.read_text(), re.S)
EXAMPLES = [code for path, _, code in BLOCKS if not path]
REGIONS = [(path, region, code) for path, region, code in BLOCKS if path]


def test_the_page_has_its_examples():
    assert len(EXAMPLES) == 12  # dtypes and progress, composites, the JAX own init, torchtitan, Megatron-core, FSDP2,
    # transformers, zero-copy, Haiku, JAX build, verify, NumPy
    assert [r for _, r, _ in REGIONS] == ["mlp", "init", "nnx", "linen", "spec", "sharded", "multihost"]  # Equinox, NNX, linen, sharded, multi-host


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(index, tmp_path):
    if "torchtitan" in EXAMPLES[index]:
        pytest.importorskip("torchtitan", reason="torchtitan is not installed (scripts/python-test-env installs it)")
    if "megatron" in EXAMPLES[index]:
        pytest.importorskip("megatron.core", reason="megatron-core is not installed (scripts/python-test-env installs it)")
    r = subprocess.run([sys.executable, "-c", EXAMPLES[index]], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"docs/python.md example {index + 1}:\n{EXAMPLES[index]}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("index", range(len(REGIONS)))
def test_region_is_the_tested_file(index):
    path, region, code = REGIONS[index]
    m = re.search(rf"^# \[docs:{region}\]\n(.*?)^# \[end\]\n", (ROOT / path).read_text(), re.S | re.M)
    assert m, f"{path} has no region [docs:{region}]"
    assert code == m.group(1), f"docs/python.md's block differs from {path} [docs:{region}]"
