"""The Mistral-shaped Equinox model over every process of a multi-host JAX run: each process runs this
script, joins the run with jax.distributed.initialize, and makes only its own pieces of the global arrays
with layerinit.jax.init (no process holds the whole model, nothing is sent between them). Each process
then checks its pieces against the same model made whole on its first device, and runs a forward pass
of the sharded model.

    python examples/jax/multihost.py --local 2     # 2 processes on this machine, 4 host devices each
                                                   # (1, 2, 4 or 8: the tiny model's 64 split by them)
    # on each host, by hand or from a launcher:
    python examples/jax/multihost.py --coordinator HOST0:1234 --num-processes N --process-id I
    # under SLURM, Open MPI, on TPU pods...: jax.distributed.initialize() finds all three itself
    python examples/jax/multihost.py

--coordinator, --num-processes and --process-id default to $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES
and $JAX_PROCESS_ID; --host-devices K gives each process K CPU devices (what --local does).
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys


def launch(n: int, host_devices: int) -> int:
    """Runs this script as n processes of a localhost run; their output, process by process (without gloo's
    line per connection; stderr only of a process that failed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "--coordinator", f"127.0.0.1:{port}", "--num-processes",
                               str(n), "--process-id", str(i), "--host-devices", str(host_devices)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    failed = False
    for i, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            err += "\n(timed out after 300 s)"
        if p.returncode != 0:
            failed = True
            out += err
        print("".join(f"[{i}] {line}\n" for line in out.splitlines() if not line.startswith("[Gloo]")), end="")
    return 1 if failed else 0


ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--local", type=int, metavar="N", help="run N processes on this machine (CPU devices)")
ap.add_argument("--coordinator", default=os.environ.get("JAX_COORDINATOR_ADDRESS"))
ap.add_argument("--num-processes", type=int, default=os.environ.get("JAX_NUM_PROCESSES"))
ap.add_argument("--process-id", type=int, default=os.environ.get("JAX_PROCESS_ID"))
ap.add_argument("--host-devices", type=int, metavar="K", help="K CPU devices in this process")
args = ap.parse_args()
if args.local:
    sys.exit(launch(args.local, args.host_devices or 4))
if args.host_devices:  # before jax is imported
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.host_devices}"

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import layerinit.jax  # noqa: E402
from mistral_equinox import RULES, Config, Mistral, spec  # noqa: E402

# The forward pass's collectives between processes' CPU devices (GPUs use NCCL; this changes nothing there).
jax.config.update("jax_cpu_collectives_implementation", "gloo")

# [docs:multihost]
jax.distributed.initialize(args.coordinator, args.num_processes, args.process_id)  # first, in every process
# A global mesh of every process's devices: "fsdp" spans the processes, "tp" each one's own devices.
devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
mesh = Mesh(np.array(devices).reshape(jax.process_count(), -1), ("fsdp", "tp"))

config = Config()
abstract = eqx.filter_eval_shape(Mistral, config, jax.random.key(0))
shardings = jax.tree_util.tree_map_with_path(
    lambda path, _: NamedSharding(mesh, spec(jax.tree_util.keystr(path, simple=True, separator="."))), abstract)
# Every process makes the same call (same seed, same shardings) and gets its own pieces of each array:
# no process holds the whole model, nothing is sent between them.
model = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16,
                           sharding=shardings)
# [end]

me = jax.process_index()
whole = layerinit.jax.init(abstract, seed=0, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16)  # one device
pieces = 0
for a, b in zip(jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)),
                jax.tree_util.tree_leaves(eqx.filter(whole, eqx.is_array))):
    assert {s.device.process_index for s in a.addressable_shards} == {me}
    for s in a.addressable_shards:
        assert np.array_equal(np.asarray(s.data), np.asarray(b)[s.index]), s
        pieces += 1
logits = jax.jit(lambda m, t: m(t), out_shardings=NamedSharding(mesh, P()))(model, jnp.arange(8))
local = np.asarray(logits.addressable_shards[0].data)
assert local.shape == (8, config.vocab) and np.isfinite(local.astype(np.float32)).all()
wq = model.layers.attention.wq.weight
print(f"process {me} of {jax.process_count()}: {len(jax.local_devices())} of {len(devices)} devices, {pieces} "
      f"pieces equal to the one-device init; wq {wq.shape} in pieces {wq.addressable_shards[0].data.shape}; "
      f"logits {local.shape}", flush=True)
