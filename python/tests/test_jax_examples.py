"""examples/jax: each example runs (its asserts are the test; multihost.py as 2 local processes; the Haiku
example where dm-haiku is installed), and the 7B shape of the Mistral-shaped Equinox model is planned from its
spec without building it."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli

pytest.importorskip("equinox")
pytest.importorskip("flax")
EXAMPLES = ROOT / "examples" / "jax"


@pytest.mark.parametrize("name", ["mlp_equinox.py", "mistral_equinox.py", "nnx_stacked.py", "linen_transformer.py",
                                  "sharded.py"])
def test_example_runs(name):
    r = subprocess.run([sys.executable, name], cwd=EXAMPLES, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"examples/jax/{name}:\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("flags", [[], ["--loop"], ["--batch-norm"]], ids=["layer_stack", "loop", "batch_norm"])
def test_haiku_graph_transformer_runs(flags):
    """Issue 30: the parameters at 414 nodes, where Haiku's own t.init would need GBs; the example asserts
    its peak memory, each leaf's distribution against Haiku's init, and t.apply's output."""
    pytest.importorskip("haiku")
    r = subprocess.run([sys.executable, "graph_transformer_haiku.py", *flags], cwd=EXAMPLES, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f"examples/jax/graph_transformer_haiku.py {' '.join(flags)}:\n{r.stderr[-3000:]}"
    assert "414 nodes, 4 layers" in r.stdout and "1,900,842 parameters" in r.stdout, r.stdout
    assert "t.apply on 64 nodes: logits (64, 10)" in r.stdout, r.stdout


def test_multihost_runs_as_two_local_processes():
    r = subprocess.run([sys.executable, "multihost.py", "--local", "2"], cwd=EXAMPLES, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, f"examples/jax/multihost.py --local 2:\n{r.stdout[-3000:]}{r.stderr[-3000:]}"
    for pid in (0, 1):
        assert (f"[{pid}] process {pid} of 2: 4 of 8 devices, 48 pieces equal to the one-device init; "
                "wq (2, 64, 64) in pieces (2, 16, 32); logits (8, 256)") in r.stdout, r.stdout


def test_the_7b_shape_is_planned(cli, tmp_path):
    spec = tmp_path / "7b.json"
    r = subprocess.run([sys.executable, "mistral_equinox.py", "--config", "7b", "--spec", str(spec)], cwd=EXAMPLES,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = run_cli(cli, "plan", "--spec", str(spec), "--dtype", "bf16", "--recipe", "torchtitan")
    assert re.search(r"7,241,732,096|7241732096", out), out  # Mistral 7B's parameters
