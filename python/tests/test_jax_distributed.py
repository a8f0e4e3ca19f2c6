"""layerinit.jax.init on every process of a multi-process JAX run (jax.distributed.initialize, a localhost
coordinator): 2 and 3 processes of 4 CPU devices each, meshes that split across the processes, that
replicate across them, 2-D and transposed ones, eagerly, under jax.jit and re-initialized in place
(donate=True). Each process's shards equal the
same model made whole in one process, bitwise, and together the processes' shards cover every element
(python/tests/jax_dist_worker.py does the work).

LAYERINIT_JAX_DIST_PLATFORM=cuda runs the processes on the GPU instead, 1 device each, all of them on
the one GPU (scripts/gpu-check); the test skips where that platform is absent."""
import os
import pickle
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("equinox")
pytest.importorskip("flax")

WORKER = Path(__file__).with_name("jax_dist_worker.py")
PLATFORM = os.environ.get("LAYERINIT_JAX_DIST_PLATFORM", "cpu")
# On a GPU every process has the one device: 4 processes give the 2-D meshes two processes per axis.
WORLDS = (2, 3) if PLATFORM == "cpu" else (2, 4)
SKIP = 77  # the worker's exit code where the platform is absent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(n, tmp_path):
    """Runs n worker processes (1: the reference, no jax.distributed); [(exit code, output, rows)]."""
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.pop("XLA_FLAGS", None)  # the worker sets its own device count
    procs = []
    for pid in range(n):
        path = tmp_path / f"n{n}-p{pid}.pkl"
        procs.append((path, subprocess.Popen([sys.executable, str(WORKER), str(pid), str(n), str(port), str(path)],
                                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    outs = []
    for path, p in procs:
        try:
            out, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for _, q in procs:
                q.kill()
            rest = [q.communicate()[0] for _, q in procs]
            pytest.fail(f"{n} processes: timed out after 120 s:\n" + "\n".join(f"--- process {i}:\n{o[-2000:]}"
                                                                                 for i, o in enumerate(rest)))
        rows = pickle.loads(path.read_bytes()) if p.returncode == 0 else None
        outs.append((p.returncode, out, rows))
    if any(code == SKIP for code, _, _ in outs):
        pytest.skip(outs[0][1].strip().splitlines()[-1])  # "process 0: no cuda platform for JAX: ..."
    for pid, (code, out, _) in enumerate(outs):
        assert code == 0, f"process {pid} of {n}: exit {code}:\n{out[-4000:]}"
    return outs


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """{(model, leaf): the whole array} made by layerinit.jax.init in one process, without sharding."""
    [(_, _, rows)] = run_processes(1, tmp_path_factory.mktemp("ref"))
    ref = {}
    for model, name, _, bounds, dtype, data in rows:
        assert all(lo == 0 for lo, _ in bounds)
        ref[model, name] = np.frombuffer(data, dtype=np.uint8).reshape(*[hi for _, hi in bounds], -1)
    return ref


@pytest.mark.parametrize("n", WORLDS)
def test_every_process_makes_its_shards_of_the_one_process_init(n, reference, tmp_path):
    outs = run_processes(n, tmp_path)
    covered = {}  # (case, leaf) -> element count per covered element, from every process
    cases = set()
    for pid, (_, out, rows) in enumerate(outs):
        assert rows, f"process {pid} wrote no shard:\n{out[-2000:]}"
        for case, name, device, bounds, dtype, data in rows:
            cases.add(case)
            model = "nnx" if case == "nnx" else "eqx"
            whole = reference[model, name]  # [*shape, bytes per element]
            want = whole[tuple(slice(lo, hi) for lo, hi in bounds)]
            assert data == want.tobytes(), (f"process {pid} of {n}, case {case}: {name}{list(bounds)} on device "
                                            f"{device} differs from the one-process init")
            seen = covered.setdefault((case, name), np.zeros(whole.shape[:-1], np.int32))
            seen[tuple(slice(lo, hi) for lo, hi in bounds)] += 1
    assert cases == {"split", "layers", "fsdp_tp", "replicated", "mixed", "jit", "donate", "nnx"}
    for (case, name), seen in covered.items():
        assert seen.min() > 0, f"{n} processes, case {case}: elements of {name} that no process made"
    # Replicated across the processes ("dp" left out): every element once per process; split: once.
    assert np.all(covered["replicated", "layers.attention.wq.weight"] == n)
    assert np.all(covered["split", "layers.attention.wk.weight"] == 1)
    assert {pid: out.count("shards (") for pid, (_, out, _) in enumerate(outs)} == {p: 8 for p in range(n)}
