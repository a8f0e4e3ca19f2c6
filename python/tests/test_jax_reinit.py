"""layerinit.jax.init's life cycle (issue 28): every u64 seed, re-initialization in place of a donated
tree (the new arrays are the old buffers), deleted leaves and calls inside the caller's shard_map
refused, and Ctrl-C stopping an eager init and freeing what it made."""
import signal

import numpy as np
import pytest

jax = pytest.importorskip("jax")
eqx = pytest.importorskip("equinox")
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import layerinit  # noqa: E402
import layerinit.jax as ljax  # noqa: E402

RULES = {"*": "normal(0, 1)"}


def tree():
    return {"w": jax.ShapeDtypeStruct((64, 32), jnp.float32), "b": jax.ShapeDtypeStruct((32,), jnp.bfloat16),
            "s": jax.ShapeDtypeStruct((), jnp.float32)}


def host(x):
    a = np.asarray(x)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def devices(n):
    """n devices of the default backend, else of the host (a 1-GPU machine: XLA_FLAGS gives the host 8)."""
    ds = jax.devices()
    return ds[:n] if len(ds) >= n else jax.devices("cpu")[:n]


def addresses(x):
    return [s.data.unsafe_buffer_pointer() for s in x.addressable_shards]


@pytest.mark.parametrize("seed", [2**63 - 1, 2**63, 2**64 - 1, np.uint64(2**63)])
def test_every_u64_seed(seed):
    """Seeds of 2^63 and more raised std::bad_cast (the attribute was a u64 MLIR integer)."""
    made = ljax.init(tree(), rules=RULES, seed=seed)
    ref = layerinit.build(ljax.spec_of(tree(), rules=RULES), dtype="fp32", seed=int(seed))
    assert np.array_equal(host(made["w"]), host(ref["w"]))
    built = ljax.build("llama-tiny", dtype="bf16", seed=seed)
    ref = layerinit.build("llama-tiny", dtype="bf16", seed=int(seed), orientation="in-out")
    name = "model.layers.0.self_attn.q_proj.weight"
    assert np.array_equal(host(built[name]), host(ref[name]))


def test_donated_tree_is_reinitialized_in_its_own_buffers():
    old = ljax.init(tree(), rules=RULES, seed=1)
    where = {k: addresses(v) for k, v in old.items()}
    new = ljax.init(old, rules=RULES, seed=2, donate=True)
    fresh = ljax.init(tree(), rules=RULES, seed=2)
    for k in ("w", "b", "s"):
        assert old[k].is_deleted(), k
        assert np.array_equal(host(new[k]), host(fresh[k])), k
    assert addresses(new["w"]) == where["w"] and addresses(new["b"]) == where["b"]


def test_donated_sharded_tree_keeps_each_piece_in_place():
    mesh = Mesh(np.array(devices(4)).reshape(2, 2), ("x", "y"))
    sh = NamedSharding(mesh, P("x", "y"))
    old = ljax.init(tree(), rules=RULES, seed=1, sharding={"w": sh})
    where = addresses(old["w"])
    new = ljax.init(old, rules=RULES, seed=2, donate=True)
    assert addresses(new["w"]) == where and new["w"].sharding == sh and old["w"].is_deleted()
    assert np.array_equal(host(new["w"]), host(ljax.init(tree(), rules=RULES, seed=2)["w"]))


def test_donated_under_the_callers_jit():
    old = ljax.init(tree(), rules=RULES, seed=1)
    where = addresses(old["w"])
    new = jax.jit(lambda t: ljax.init(t, rules=RULES, seed=2, donate=True), donate_argnums=0)(old)
    assert addresses(new["w"]) == where
    assert np.array_equal(host(new["w"]), host(ljax.init(tree(), rules=RULES, seed=2)["w"]))


def test_donate_refuses_what_cannot_be_reused():
    mesh = Mesh(np.array(devices(2)), ("x",))
    live = ljax.init(tree(), rules=RULES)
    with pytest.raises(ValueError, match=r"donate=True: leaf 'b' is bfloat16 but is made float32"):
        ljax.init(live, rules=RULES, dtype="fp32", donate=True)
    with pytest.raises(ValueError, match=r"donate=True: leaf 'w' lies on SingleDeviceSharding.* but is made on Named"):
        ljax.init(live, rules=RULES, sharding={"w": NamedSharding(mesh, P("x"))}, donate=True)
    twice = {"a": live["w"], "b": live["w"]}
    with pytest.raises(ValueError, match=r"donate=True: leaves 'a' and 'b' are one array"):
        ljax.init(twice, rules=RULES, donate=True)
    with pytest.raises(ValueError, match=r"donate must be"):
        ljax.init(live, rules=RULES, donate="yes")
    assert not any(x.is_deleted() for x in live.values())  # nothing given up


def test_a_deleted_leaf_is_refused():
    live = ljax.init(tree(), rules=RULES)
    live["w"].delete()
    with pytest.raises(ValueError, match=r"leaf 'w' is a deleted array \(donated to a jitted call or \.delete\(\)d\)"):
        ljax.init(live, rules=RULES)


def test_inside_shard_map_says_what_to_call():
    """Inside the caller's shard_map the leaves are pieces: init raised a bare AssertionError (with a
    sharding) or silently gave every device the same values (without)."""
    mesh = Mesh(np.array(devices(4)), ("d",))

    def body(x, sharded):
        piece = {"w": jax.ShapeDtypeStruct((2, 4), jnp.float32)}
        kw = {"sharding": NamedSharding(mesh, P("d"))} if sharded else {}
        return ljax.init(piece, rules=RULES, **kw)["w"] + x

    for sharded in (False, True):
        f = jax.shard_map(lambda x: body(x, sharded), mesh=mesh, in_specs=P("d"), out_specs=P("d"))
        with pytest.raises(ValueError, match=r"layerinit.jax.init runs inside jax.shard_map \(manual mesh axes 'd'\).*"
                                             r"call layerinit.jax.init outside shard_map with sharding=NamedSharding"):
            f(jnp.zeros((8, 4)))
    with pytest.raises(ValueError, match=r"layerinit.jax.build runs inside jax.shard_map"):
        jax.shard_map(lambda x: ljax.build("llama-tiny")["model.norm.weight"][:2] + x, mesh=mesh, in_specs=P("d"),
                      out_specs=P("d"))(jnp.zeros(8))


def test_ctrl_c_stops_the_init_and_frees_what_it_made():
    """The handler raises SIGINT after its 3rd array (a test hook) and holds every later call: init
    raises KeyboardInterrupt with no array of it alive, before it filled them all."""
    many = {f"l{i}": jax.ShapeDtypeStruct((128, 128), jnp.float32) for i in range(12)}
    # Python's own SIGINT handler, also where the suite runs with SIGINT ignored (a shell's background job).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    ljax.init(many, rules=RULES)  # compiled once: the interrupted call runs the same program
    xla = ljax._xla()
    before = {id(x) for x in jax.live_arrays()}
    xla.record_writes(True)
    xla.interrupt_after(3)
    try:
        with pytest.raises(KeyboardInterrupt):
            ljax.init(many, rules=RULES)
        written = len(xla.take_writes())
    finally:
        xla.interrupt_after(-1)
        xla.record_writes(False)
        signal.signal(signal.SIGINT, handler)
    assert 3 <= written < len(many)
    assert [x for x in jax.live_arrays() if id(x) not in before] == []
    again = ljax.init(many, rules=RULES)  # nothing left cancelled
    assert np.array_equal(host(again["l0"]), host(ljax.init({"l0": many["l0"]}, rules=RULES)["l0"]))
