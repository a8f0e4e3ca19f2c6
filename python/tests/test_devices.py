"""Device selection on a simulated node of 4 GPUs (LAYERINIT_TEST_SIMULATED_CUDA_DEVICES, backends/
backend.hpp): the binding's cuda:N makes each device's arrays there, fills arrays on the device they
are on, and refuses a device past the node before anything is allocated. In a subprocess: a
simulated device's backend is kept for the life of the process."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import gc
    import layerinit
    from layerinit import _core

    assert _core.cuda_device_count() == 4
    _core._simulated_device_events()

    a = layerinit.build("llama-tiny", device="cuda:1", seed=3)
    total = sum(x.nbytes for x in a.values())
    events = _core._simulated_device_events()
    assert {d for d, _, _ in events} == {1}, events
    assert sum(n for _, what, n in events if what == "fill") == total, (events, total)
    assert sum(n for _, what, n in events if what == "allocate") == total, (events, total)
    # The plan's peak reserved before the first allocation; one synchronization, at the end.
    assert events[0] == (1, "reserve", total) and events[-1] == (1, "synchronize", 0), events
    assert sum(1 for _, what, _ in events if what == "synchronize") == 1, events
    assert all(x.__dlpack_device__() == (2, 1) and x.device == "cuda:1" for x in a.values())
    assert layerinit.memory_stats("cuda:1")["current_bytes"] == total

    b = layerinit.build("llama-tiny", device="cuda:3", seed=3)
    assert {d for d, _, _ in _core._simulated_device_events()} == {3}
    assert all(x.__dlpack_device__() == (2, 3) for x in b.values())

    # An array is filled on the device it is on; one call over arrays of two devices fills each on its own.
    name = "model.layers.0.mlp.up_proj.weight"
    n = b[name].nbytes
    layerinit.fill_(b[name], name, "normal(0, 1)", seed=3)
    assert _core._simulated_device_events() == [(3, "fill", n), (3, "synchronize", 0)]
    c = layerinit.plan("llama-tiny", seed=3).composite(name)
    _core.fill_composites([b[name], a[name]], [c, c], 3, [[0, 0], [0, 0]], False)
    assert _core._simulated_device_events() == [(3, "fill", n), (3, "synchronize", 0), (1, "fill", n), (1, "synchronize", 0)]

    # A device past the node: ValueError naming it, nothing allocated or filled.
    try:
        layerinit.build("llama-tiny", device="cuda:4")
        raise SystemExit("cuda:4 of a node of 4 was built")
    except ValueError as e:
        assert str(e) == "device 'cuda:4' does not exist: this process sees 4 CUDA devices (cuda:0 to cuda:3)", e
    for bad in ("cuda:x", "gpu", "auto"):
        try:
            layerinit.build("llama-tiny", device=bad)
            raise SystemExit(bad + " was built")
        except ValueError as e:
            assert str(e).startswith(f"device '{bad}' is "), e
    assert _core._simulated_device_events() == []

    del a, b
    gc.collect()
    assert layerinit.memory_stats("cuda:1")["current_bytes"] == 0
    assert layerinit.memory_stats("cuda:3")["current_bytes"] == 0
    print("ok")
''')


def test_binding_puts_each_array_on_its_device_of_a_simulated_node():
    env = dict(os.environ, LAYERINIT_TEST_SIMULATED_CUDA_DEVICES="4")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_a_device_past_the_node_is_refused_without_a_simulated_node():
    import pytest

    import layerinit

    if layerinit.cuda_available():
        pytest.skip("a real GPU: the simulated test covers a missing index")
    with pytest.raises(Exception, match="CUDA backend unusable"):
        layerinit.build("llama-tiny", device="cuda:1")
    with pytest.raises(ValueError, match="device 'cuda:01' is not a device"):
        layerinit.build("llama-tiny", device="cuda:01")
