"""One rank of test_torch_titan.py's distributed test: torchtitan models on the meta device, sharded
on a gloo CPU mesh (fsdp2: each layer and the root given to fully_shard; tp: tensor parallel
placements as torchtitan's plans give them, Shard(0) for column-parallel maps, embeddings, the head
and the experts, Shard(1) for the row-parallel wo and w2, norms replicated), filled by
layerinit.torch.init_ (recipe torchtitan, seed 9, bf16), gathered with full_tensor() and compared
with the emitted checkpoint as torchtitan's adapter loaded it on one process. Usage: titan_worker.py
REFS.pt FLAVOR... (env RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Prints 'rank R: FLAVOR (MODE):
N tensors equal' per flavour and mode, and exits 0, or exits 1 naming the first difference."""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

import layerinit.torch as lt

sys.path.insert(0, os.path.dirname(__file__))
from titan_models import meta_model  # noqa: E402


def tensor_parallel(model, mesh):
    """Replaces every meta parameter by a meta DTensor with a tensor-parallel placement."""
    for name, p in list(model.named_parameters()):
        if p.dim() == 1:
            placements = [Replicate()]
        else:
            placements = [Shard(1 if name.endswith(("wo.weight", "w2.weight")) else 0)]
        shape, _ = compute_local_shape_and_global_offset(p.shape, mesh, placements)
        local = torch.empty(shape, dtype=p.dtype, device="meta")
        d = DTensor.from_local(local, mesh, placements, run_check=False, shape=p.shape, stride=p.stride())
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, torch.nn.Parameter(d))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    refs = torch.load(sys.argv[1])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for flavor in sys.argv[2:]:
        for mode in ("fsdp2", "tp"):
            model = meta_model(flavor, torch.bfloat16)
            if mode == "fsdp2":
                for layer in model.layers.values():
                    fully_shard(layer, mesh=mesh)
                fully_shard(model, mesh=mesh)
            else:
                tensor_parallel(model, mesh)
            lt.init_(model, recipe="torchtitan", seed=9)
            n = 0
            for name, p in model.named_parameters():
                assert isinstance(p, DTensor), name
                full = p.full_tensor()
                if not torch.equal(full.view(torch.int16), refs[flavor][name].view(torch.int16)):
                    print(f"rank {rank}: {flavor} ({mode}): {name} differs (placements {p.placements})", flush=True)
                    sys.exit(1)
                n += 1
            print(f"rank {rank}: {flavor} ({mode}): {n} tensors equal", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
