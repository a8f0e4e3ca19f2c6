"""One rank of test_torch_titan.py's distributed test: torchtitan models on the meta device, sharded
on a gloo CPU mesh (fsdp2: each layer and the root given to fully_shard; tp: DTensor placements as
torchtitan's plans give them, Shard(0) for column-parallel maps, embeddings, the head and the
experts, Shard(1) for the row-parallel wo and w2, norms replicated; titan-tp: torchtitan's own
Module.parallelize with tp 2 on its default spmd_types backend, whose shards are plain local
tensors with a PartitionSpec), filled by
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
from spmd_types.runtime import get_partition_spec  # noqa: E402
from titan_models import config, meta_model  # noqa: E402


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


def titan_tensor_parallel(flavor):
    """The model as torchtitan's trainer makes it for tp 2: sharding configs set on the config,
    built on the meta device, Module.parallelize."""
    import torchtitan.distributed.parallel_dims as parallel_dims
    from torchtitan.distributed import ParallelDims

    cfg = config(flavor)
    package = type(cfg).__module__.split(".")[2]
    if package == "llama3":
        from torchtitan.models.llama3.sharding import set_llama3_sharding_config as set_sharding
    elif package == "qwen3":
        from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config as set_sharding
    else:
        from torchtitan.models.deepseek_v3.sharding import set_deepseek_v3_sharding_config as set_sharding
    kwargs = {} if package == "llama3" else {"enable_ep": False}
    set_sharding(cfg, enable_sp=False, **kwargs)
    with torch.device("meta"):
        model = cfg.build().to(torch.bfloat16)
    parallel_dims.device_type = "cpu"  # torchtitan picks cuda when the torch build has it, GPU or not
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=dist.get_world_size(), pp=1, ep=1,
                        world_size=dist.get_world_size())
    dims.build_mesh()
    model.parallelize(dims)
    return model


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    refs = torch.load(sys.argv[1])
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for flavor in sys.argv[2:]:
        for mode in ("fsdp2", "tp", "titan-tp"):
            if mode == "titan-tp":
                model = titan_tensor_parallel(flavor)
                specs = {n: get_partition_spec(p) for n, p in model.named_parameters()}
            else:
                model = meta_model(flavor, torch.bfloat16)
            if mode == "fsdp2":
                for layer in model.layers.values():
                    fully_shard(layer, mesh=mesh)
                fully_shard(model, mesh=mesh)
            elif mode == "tp":
                tensor_parallel(model, mesh)
            lt.init_(model, recipe="torchtitan", seed=9)
            n = 0
            for name, p in model.named_parameters():
                if mode == "titan-tp":  # this rank's chunks, as the PartitionSpec (kept by init_) says
                    assert get_partition_spec(p) == specs[name], name
                    want = refs[flavor][name]
                    for dim, axis in enumerate(specs[name] or ()):
                        if axis is not None:
                            want = torch.chunk(want, dist.get_world_size(), dim)[rank]
                    got = p.detach()
                else:
                    assert isinstance(p, DTensor), name
                    got, want = p.full_tensor(), refs[flavor][name]
                if not torch.equal(got.view(torch.int16), want.view(torch.int16)):
                    print(f"rank {rank}: {flavor} ({mode}): {name} differs", flush=True)
                    sys.exit(1)
                n += 1
            print(f"rank {rank}: {flavor} ({mode}): {n} tensors equal", flush=True)
        # After torchtitan's own to_empty the shards have lost their PartitionSpec: refused, not guessed.
        model = titan_tensor_parallel(flavor)
        model.to_empty(device="cpu")
        try:
            lt.init_(model, recipe="torchtitan", seed=9)
            print(f"rank {rank}: {flavor}: local shards without a PartitionSpec were filled", flush=True)
            sys.exit(1)
        except ValueError as e:
            assert "hold a part of their module's weight" in str(e), e
            print(f"rank {rank}: {flavor}: local shards without a PartitionSpec refused", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
