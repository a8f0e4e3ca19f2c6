"""One rank of test_distributed.py: a transformers Llama on the meta device whose parameters are
DTensors on a gloo CPU mesh, filled by layerinit.torch.init_, gathered with full_tensor() and compared
with the unsharded build. Usage: dist_worker.py CASE... (env RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), cases among shard0,
shard1, mesh2d, fsdp2, buffers, run in one process group. Prints 'rank R: N tensors equal (CASE)' per case
and exits 0, or exits 1 naming the first difference. Case `buffers`: the model given to
distribute_module with a partition function, which also makes the rotary inv_freq buffer a
replicated DTensor (issue 19 item 12), compared the same way, and its inv_freq with transformers'. Case
`fsdp1`: FSDP1's flattened shards, which record no place layerinit reads, refused (prints 'rank R:
refused (fsdp1)')."""
import os
import sys

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

import layerinit
import layerinit.torch as lt

sys.path.insert(0, os.path.dirname(__file__))
from hf_configs import config  # noqa: E402

# Uneven on purpose: 90 rows over 4 ranks are 23, 23, 23, 21; a vocabulary of 510 is 128, 128, 128, 126.
CONFIG = dict(vocab_size=510, intermediate_size=90)


def shard_params(model, mesh, placements_for):
    """Replaces every meta parameter by a meta DTensor with the given placements (no communication)."""
    for name, p in list(model.named_parameters()):
        placements = placements_for(name, p)
        shape, _ = compute_local_shape_and_global_offset(p.shape, mesh, placements)
        local = torch.empty(shape, dtype=p.dtype, device="meta")
        d = DTensor.from_local(local, mesh, placements, run_check=False, shape=p.shape, stride=p.stride())
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, torch.nn.Parameter(d, requires_grad=p.requires_grad))


def fsdp1_refused(world, rank):
    """FSDP1 flattens and shards a module's parameters (use_orig_params gives views of the flat shard):
    init_ refuses both forms, naming them, before writing anything."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    for orig in (False, True):
        m = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.LayerNorm(6), torch.nn.Linear(6, 4))
        f = FullyShardedDataParallel(m, use_orig_params=orig, device_id=torch.device("cpu"))
        before = [p.detach().clone() for p in f.parameters()]
        try:
            lt.init_(f, recipe="pytorch-default", seed=1)
        except ValueError as e:
            if not str(e).startswith(f"{6 if orig else 1} parameter(s) are FSDP1's flattened shards"):
                raise
        else:
            print(f"rank {rank}: FSDP1 (use_orig_params={orig}) filled", flush=True)
            sys.exit(1)
        assert all(torch.equal(a, b) for a, b in zip(before, f.parameters()))
    print(f"rank {rank}: refused (fsdp1)", flush=True)


def check(case, world, rank):
    if case == "fsdp1":
        return fsdp1_refused(world, rank)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config("llama-tiny", **CONFIG)).to(torch.bfloat16)
    if case == "buffers":
        from torch.distributed.tensor import distribute_module, distribute_tensor

        mesh = init_device_mesh("cpu", (world,))

        def partition(name, module, mesh):
            for pname, p in list(module.named_parameters(recurse=False)):
                placements = [Shard(0)] if p.dim() > 1 else [Replicate()]
                module.register_parameter(pname, torch.nn.Parameter(distribute_tensor(p, mesh, placements)))

        distribute_module(model, mesh, partition)
        assert isinstance(model.model.rotary_emb.inv_freq, DTensor)
    elif case == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        if case == "mesh2d":
            mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
            placements = lambda n, p: [Shard(0), Shard(p.dim() - 1)]  # noqa: E731
        else:
            mesh = init_device_mesh("cpu", (world,))
            dim = 0 if case == "shard0" else 1
            placements = lambda n, p: [Shard(min(dim, p.dim() - 1))] if p.dim() > 1 or dim == 0 else [Replicate()]  # noqa: E731
        shard_params(model, mesh, placements)
    lt.init_(model, seed=13)
    ref = layerinit.build(lt.hf_spec(model.config), seed=13)
    n = 0
    for name, p in model.named_parameters():
        assert isinstance(p, DTensor), name
        full = p.full_tensor()
        want = torch.from_dlpack(ref[name])
        if not torch.equal(full.view(torch.int16), want.view(torch.int16)):
            print(f"rank {rank}: {name} differs ({case}, placements {p.placements})", flush=True)
            sys.exit(1)
        n += 1
    if case == "buffers":
        want = transformers.AutoModelForCausalLM.from_config(config("llama-tiny", **CONFIG)).model.rotary_emb.inv_freq
        got = model.model.rotary_emb.inv_freq
        if not (isinstance(got, DTensor) and torch.equal(got.full_tensor(), want.to(got.dtype))):
            print(f"rank {rank}: inv_freq differs ({case})", flush=True)
            sys.exit(1)
    print(f"rank {rank}: {n} tensors equal ({case})", flush=True)


def main():
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    for case in sys.argv[1:]:
        check(case, world, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
