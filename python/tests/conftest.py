"""Shared pieces of the Python package's tests: the CLI to compare with, and its reports and files."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

# 8 CPU devices for the JAX tests' meshes: set before any test module imports jax.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

ROOT = Path(__file__).resolve().parents[2]


def find_cli():
    """The layerinit CLI: $LAYERINIT_CLI, else the repository's build-host or build tree, else PATH."""
    env = os.environ.get("LAYERINIT_CLI")
    if env:
        return env
    for d in ("build-host", "build"):
        p = ROOT / d / "bin" / "layerinit"
        if p.exists():
            return str(p)
    return shutil.which("layerinit")


@pytest.fixture(scope="session")
def cli():
    path = find_cli()
    if not path:
        pytest.skip("no layerinit CLI (set LAYERINIT_CLI or build build-host)")
    return path


def run_cli(cli, *args):
    r = subprocess.run([cli, *args], capture_output=True, text=True)
    assert r.returncode == 0, f"layerinit {' '.join(args)}: exit {r.returncode}: {r.stderr}"
    return r.stdout


@pytest.fixture(scope="session")
def report(cli):
    """report(preset, *flags) -> the JSON report of `layerinit build --report json`, cached."""
    cache = {}

    def get(preset, *flags):
        key = (preset, *flags)
        if key not in cache:
            cache[key] = json.loads(run_cli(cli, "build", "--preset", preset, "--backend", "cpu", "--report", "json", *flags))
        return cache[key]

    return get


@pytest.fixture(scope="session")
def emitted(cli, tmp_path_factory):
    """emitted(preset, *flags) -> {name: torch tensor} of `layerinit emit --format safetensors`, cached."""
    from safetensors.torch import load_file

    cache = {}

    def get(preset, *flags):
        key = (preset, *flags)
        if key not in cache:
            out = tmp_path_factory.mktemp("emit") / "out"
            run_cli(cli, "emit", "--preset", preset, "--backend", "cpu", "--format", "safetensors", "-o", str(out), *flags)
            tensors = {}
            for f in sorted(out.glob("*.safetensors")):
                tensors.update(load_file(str(f)))
            cache[key] = tensors
        return cache[key]

    return get
