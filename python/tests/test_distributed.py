"""DTensor parameters on a gloo CPU mesh (2 and 4 processes), filled by layerinit.torch.init_: each
gathered tensor equals the unsharded build bitwise; FSDP1's flattened shards are refused
(python/tests/dist_worker.py does the work)."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")
pytest.importorskip("transformers")

WORKER = Path(__file__).with_name("dist_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cases, world, worker=WORKER):
    """Runs `worker` with arguments `cases` as `world` gloo ranks; [(exit code, output)] per rank."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(worker), *cases], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out))
    return outs


# One process group per world size runs its cases in turn: starting processes (importing torch and
# transformers) is most of the cost.
@pytest.mark.parametrize("world, cases", [(2, ("shard0", "shard1", "fsdp2", "buffers", "fsdp1")),
                                                (4, ("shard0", "shard1", "mesh2d", "fsdp2", "buffers"))])
def test_dtensor_init_equals_unsharded(world, cases):
    outs = run_ranks(cases, world)
    for rank, (code, out) in enumerate(outs):
        assert code == 0, f"rank {rank} ({world} processes) exit {code}:\n{out[-3000:]}"
        for case in cases:
            done = f"rank {rank}: refused (fsdp1)" if case == "fsdp1" else f"tensors equal ({case})"
            assert f"rank {rank}: " in out and done in out, out[-2000:]
