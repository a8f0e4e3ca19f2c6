"""Every ```python block of README.md and docs/*.md (tests/docs/doc_blocks.py reads them and their markers):
each runs in a fresh interpreter in a temporary directory, after its <!-- test: setup --> commands (the CLI
on PATH), and its asserts are the test; a block marked <!-- FILE [docs:REGION] --> is that region of a tested
file, verbatim; a block marked <!-- test: skip REASON --> is reported skipped with its reason. The other
languages run in the ctest docs_blocks (tests/CMakeLists.txt)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "docs"))
import doc_blocks  # noqa: E402

BLOCKS = [b for b in doc_blocks.blocks(ROOT) if b.lang == "python"]
EXAMPLES = [b for b in BLOCKS if not b.region]
REGIONS = [b for b in BLOCKS if b.region]


def test_the_pages_have_their_examples():
    per_doc = {}
    for b in EXAMPLES:
        per_doc[b.doc] = per_doc.get(b.doc, 0) + 1
    # python.md: dtypes and progress, composites, the JAX own init, torchtitan, Megatron-core, FSDP2, transformers, zero-copy, Haiku,
    # JAX build, verify, NumPy; checkpoint.md: h5py, safetensors; sharding.md: rank files, the MPI master
    assert per_doc == {"docs/checkpoint.md": 2, "docs/python.md": 12, "docs/sharding.md": 2}
    assert [b.region[1] for b in REGIONS] == ["mlp", "init", "nnx", "linen", "spec", "sharded", "multihost"]


def python_for(code):
    """This interpreter; for an h5py block without h5py here, .venv's (scripts/python-env installs h5py)."""
    if "import h5py" in code and subprocess.run([sys.executable, "-c", "import h5py"], capture_output=True).returncode:
        venv = ROOT / ".venv" / "bin" / "python"
        if not venv.exists():
            pytest.skip(f"no h5py in {sys.executable} and no {venv} (scripts/python-env makes it)")
        return str(venv)
    return sys.executable


@pytest.mark.parametrize("block", EXAMPLES, ids=[b.where for b in EXAMPLES])
def test_example_runs(block, tmp_path, request):
    if block.skip:
        pytest.skip(f"{block.where}: {block.skip}")
    code = block.runnable_code()
    for client, module in (("torchtitan", "torchtitan"), ("megatron", "megatron.core"), ("haiku", "haiku")):
        if f"import {client}" in code or f"from {client}" in code:  # a test client scripts/python-test-env installs
            pytest.importorskip(module, reason=f"{module} is not installed (scripts/python-test-env installs it)")
    env = dict(os.environ, LAYERINIT_SOURCE_DIR=str(ROOT))
    if block.setup:  # the CLI makes the files the block reads
        cli_dir = Path(request.getfixturevalue("cli")).resolve().parent
        env["PATH"] = f"{cli_dir}{os.pathsep}{env.get('PATH', '')}"
    for s in block.setup:
        r = subprocess.run(["bash", "-ec", s], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{block.where}'s setup {s}: exit {r.returncode}\n{r.stderr[-3000:]}"
    r = subprocess.run([python_for(code), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"{block.where}:\n{code}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("block", REGIONS, ids=[b.where for b in REGIONS])
def test_region_is_the_tested_file(block):
    path, region = block.region
    m = re.search(rf"^# \[docs:{region}\]\n(.*?)^# \[end\]\n", (ROOT / path).read_text(), re.S | re.M)
    assert m, f"{path} has no region [docs:{region}]"
    assert block.code == m.group(1), f"{block.where} differs from {path} [docs:{region}]"
