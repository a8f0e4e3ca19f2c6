"""One rank of test_torch_titan.py's FSDP2 test: torchtitan models on the meta device, each layer and
the root given to fully_shard on a gloo CPU mesh, filled by layerinit.torch.init_ (recipe
torchtitan, seed 9, bf16), gathered with full_tensor() and compared with the emitted checkpoint as
torchtitan's adapter loaded it on one process. Usage: titan_worker.py REFS.pt FLAVOR... (env RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Prints 'rank R: FLAVOR: N tensors equal' per flavour and
exits 0, or exits 1 naming the first difference."""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import layerinit.torch as lt

sys.path.insert(0, os.path.dirname(__file__))
from titan_models import meta_model  # noqa: E402


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    refs = torch.load(sys.argv[1])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for flavor in sys.argv[2:]:
        model = meta_model(flavor, torch.bfloat16)
        for layer in model.layers.values():
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        lt.init_(model, recipe="torchtitan", seed=9)
        n = 0
        for name, p in model.named_parameters():
            assert isinstance(p, DTensor), name
            full = p.full_tensor()
            if not torch.equal(full.view(torch.int16), refs[flavor][name].view(torch.int16)):
                print(f"rank {rank}: {flavor}: {name} differs (placements {p.placements})", flush=True)
                sys.exit(1)
            n += 1
        print(f"rank {rank}: {flavor}: {n} tensors equal", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
