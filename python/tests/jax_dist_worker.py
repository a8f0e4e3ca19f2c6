"""One process of test_jax_distributed.py: jax.distributed.initialize with a localhost coordinator, a
small Mistral-shaped Equinox model (blocks stacked by eqx.filter_vmap) and a Flax NNX one made by
layerinit.jax.init over global meshes, every addressable shard written to a file.

Usage: jax_dist_worker.py PROCESS_ID NUM_PROCESSES PORT OUT_FILE. NUM_PROCESSES 1 is the reference: no
jax.distributed, every leaf made whole on one device, no sharding. Otherwise each case of CASES makes the
models over a mesh of every process's devices, and each process checks that its shards are exactly what
`sharding.addressable_devices_indices_map` says. OUT_FILE (a pickle) gets one row per addressable shard,
(case, leaf, device id, ((start, stop) per dimension), dtype, bytes); the test compares every row with the
reference bitwise and checks that the processes' rows cover every element. Prints 'process P: N shards
(CASE)' per case and exits 0; exits 1 on an error (its traceback printed), 77 when the platform asked
for is absent.

Environment: LAYERINIT_JAX_DIST_PLATFORM ("cpu", the default, or "cuda": every process on the one GPU,
which they share) and LAYERINIT_JAX_DIST_DEVICES (devices per process; default 4 on the CPU, 1 on a GPU).
"""
import os
import pickle
import sys
import traceback

PLATFORM = os.environ.get("LAYERINIT_JAX_DIST_PLATFORM", "cpu")
LOCAL = int(os.environ.get("LAYERINIT_JAX_DIST_DEVICES", "4" if PLATFORM == "cpu" else "1"))
os.environ["JAX_PLATFORMS"] = PLATFORM
if PLATFORM == "cpu":
    # LOCAL host devices, one Eigen thread each: the CI machine has 2 cores for every process.
    os.environ["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={LOCAL} --xla_cpu_multi_thread_eigen=false "
                               "intra_op_parallelism_threads=1")
else:
    # Several processes on one GPU: each takes only what it uses.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.1")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import layerinit.jax  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "jax"))
from mistral_equinox import RULES, Config, Mistral  # noqa: E402

# Every split below divides these: 48 / 16 = 3-row pieces (a piece starting inside a Philox block of
# 4), 24 / 12 = 2, 12 layers over 2, 3 or 4 processes.
CONFIG = Config(vocab=192, dim=48, layers=12, heads=4, kv_heads=2, hidden=96)
SEED = 7
CASES = ("split", "layers", "fsdp_tp", "replicated", "mixed", "jit", "donate", "nnx")


class Block(nnx.Module):
    def __init__(self, dim, rngs):
        self.norm = nnx.RMSNorm(dim, rngs=rngs)
        self.up = nnx.Linear(dim, 2 * dim, rngs=rngs)
        self.down = nnx.Linear(2 * dim, dim, rngs=rngs)


class NnxModel(nnx.Module):
    def __init__(self, vocab, dim, layers, rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)

        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def blocks(rngs):
            return Block(dim, rngs)

        self.blocks = blocks(rngs)  # every leaf [layers, ...]
        self.head = nnx.Linear(dim, vocab, use_bias=False, rngs=rngs)


def abstract_eqx():
    return eqx.filter_eval_shape(Mistral, CONFIG, jax.random.key(0))


def abstract_nnx():
    return nnx.eval_shape(lambda: NnxModel(vocab=192, dim=48, layers=12, rngs=nnx.Rngs(0)))


def init_eqx(sharding=None):
    return layerinit.jax.init(abstract_eqx(), seed=SEED, recipe="torchtitan", rules=RULES, dtype=jnp.bfloat16,
                              sharding=sharding)


def init_nnx(sharding=None):
    return layerinit.jax.init(abstract_nnx(), seed=SEED, recipe="flax", rules={"head.kernel": "head_weight"},
                              sharding=sharding)


def leaves(tree):
    """(leaf name, leaf) of every leaf with a shape, named by its path as layerinit names it."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path, simple=True, separator=".").removesuffix(".value"), x)
            for path, x in flat if hasattr(x, "shape")]


def arrays(tree):
    return [(name, x) for name, x in leaves(tree) if isinstance(x, jax.Array)]


def spec(case, name, ndim):
    """The PartitionSpec of leaf `name` (ndim dimensions) in `case`; the stacked leaves are [L, out, in]
    (Equinox) or [L, in, out] (NNX), norms [L, D], embeddings and the head 2-D, the last norm 1-D."""
    if case == "split":        # one axis over every device of every process: 3- and 2-row pieces of wk, wv
        return {3: P(None, "x", None), 2: P(None, "x")}.get(ndim, P("x"))
    if case == "layers":       # the process axis, last process first, splits the stacked layer axis
        return {3: P("proc", None, "local"), 2: P(None, "local")}.get(ndim, P())
    if case in ("fsdp_tp", "jit", "donate", "nnx"):  # sharded.py's FSDP x TP: "fsdp" spans the processes
        if name.endswith(("wq.weight", "wk.weight", "wv.weight", "w1.weight", "w3.weight", "up.kernel")):
            return P(None, "tp", "fsdp")
        if name.endswith(("wo.weight", "w2.weight", "down.kernel")):
            return P(None, "fsdp", "tp")
        if ndim == 2 and not name.startswith(("layers.", "blocks.")):
            return P("tp", "fsdp")
        return P()              # norms and biases: replicated on every device of every process
    if case == "replicated":   # "dp" spans the processes and no spec names it: processes hold the same pieces
        return {3: P(None, "tp", None), 2: P(None, "tp")}.get(ndim, P("tp"))
    if case == "mixed":        # a transposed mesh: "b" spans processes, "a" each one's devices; two axes on one dim
        return {3: P("a", "b", None), 2: P(None, ("b", "a"))}.get(ndim, P("b"))
    raise ValueError(case)


def mesh(case, n):
    devices = np.array(jax.devices()).reshape(n, LOCAL)
    for p, row in enumerate(devices):
        assert {d.process_index for d in row} == {p}, [(d.id, d.process_index) for d in row]
    if case == "split":
        return Mesh(devices.reshape(-1), ("x",))
    if case == "layers":
        return Mesh(devices[::-1], ("proc", "local"))
    if case == "replicated":
        return Mesh(devices, ("dp", "tp"))
    if case == "mixed":
        return Mesh(devices.T, ("a", "b"))
    return Mesh(devices, ("fsdp", "tp"))


def shardings_of(case, m, abstract):
    """A pytree of the model's structure, one NamedSharding per leaf (what jax.jit's out_shardings takes)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, x: NamedSharding(m, spec(case, jax.tree_util.keystr(path, simple=True, separator="."),
                                              len(x.shape))), abstract)


def make(case, n):
    m = mesh(case, n)
    by_name = lambda name, shape: NamedSharding(m, spec(case, name, len(shape)))  # noqa: E731
    if case == "jit":
        sh = shardings_of(case, m, abstract_eqx())
        return jax.jit(lambda: init_eqx(sh), out_shardings=sh)()
    if case == "donate":  # made with another seed, then re-initialized in place, each leaf on its own sharding
        first = layerinit.jax.init(abstract_eqx(), seed=SEED + 1, recipe="torchtitan", rules=RULES,
                                   dtype=jnp.bfloat16, sharding=shardings_of(case, m, abstract_eqx()))
        again = layerinit.jax.init(first, seed=SEED, recipe="torchtitan", rules=RULES, donate=True)
        assert all(x.is_deleted() for _, x in arrays(first))
        return again
    shapes = {name: x.shape for name, x in leaves(abstract_nnx() if case == "nnx" else abstract_eqx())}
    return (init_nnx if case == "nnx" else init_eqx)(lambda name: by_name(name, shapes[name]))


def bounds(index, shape):
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape))


def rows(case, tree):
    """One row per addressable shard, each checked against addressable_devices_indices_map."""
    out = []
    for name, x in arrays(tree):
        jax.block_until_ready(x)  # a CPU handler's error surfaces here
        want = {d: bounds(i, x.shape) for d, i in x.sharding.addressable_devices_indices_map(x.shape).items()}
        got = {s.device: bounds(s.index, x.shape) for s in x.addressable_shards}
        if got != want or len(got) != len(x.addressable_shards):
            raise AssertionError(f"{case} {name}: shards {got} but the sharding's addressable map is {want}")
        for s in x.addressable_shards:
            b = bounds(s.index, x.shape)
            data = np.asarray(s.data)
            if data.shape != tuple(hi - lo for lo, hi in b):
                raise AssertionError(f"{case} {name}: the shard of {s.device} is {data.shape} for {b}")
            out.append((case, name, s.device.id, b, str(data.dtype), data.tobytes()))
    return out


def main():
    pid, n, port, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if n > 1:
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n, process_id=pid)
    try:
        platform = jax.devices()[0].platform
    except Exception as e:  # noqa: BLE001 (RuntimeError, or jax's AssertionError without a plugin for it)
        platform = f"none ({type(e).__name__}: {e})"
    if platform != {"cuda": "gpu"}.get(PLATFORM, PLATFORM):
        print(f"process {pid}: no {PLATFORM} platform for JAX: {platform}", flush=True)
        sys.exit(77)
    out = []
    try:
        if n == 1:
            out += rows("eqx", init_eqx())
            out += rows("nnx", init_nnx())
            print(f"process {pid}: {len(out)} shards (reference)", flush=True)
        else:
            assert jax.process_count() == n and len(jax.local_devices()) == LOCAL, (jax.process_count(),
                                                                                   jax.local_devices())
            for case in CASES:
                r = rows(case, make(case, n))
                print(f"process {pid}: {len(r)} shards ({case})", flush=True)
                out += r
    except Exception:
        traceback.print_exc()
        sys.stdout.flush()
        sys.exit(1)
    with open(path, "wb") as f:
        pickle.dump(out, f)


if __name__ == "__main__":
    main()
