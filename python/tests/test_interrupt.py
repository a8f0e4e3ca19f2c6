"""Long calls answer Python at once: a build that cannot fit is refused before anything is allocated,
with the CLI's numbers (MemoryError), and Ctrl-C stops a build within one layer with its memory
given back (issue 19, items 10 and 11)."""
import os
import signal
import subprocess
import sys
import time

import pytest

import layerinit

# A spec of 2^40 layers: its plan holds one layer, its build would need petabytes.
HUGE = {
    "name": "huge",
    "layer": {"prefix": "blocks.", "count": 2**40,
              "tensors": [{"name": "w", "shape": [64, 64], "role": "linear_weight", "fan_in": 64, "fan_out": 64}]},
}


def test_a_build_that_cannot_fit_is_refused_at_once():
    before = layerinit.memory_stats()["current_bytes"]
    t0 = time.monotonic()
    with pytest.raises(MemoryError, match=r"^not enough memory: needs .* at its peak \(weights .* \+ tensor records .*\), "
                                          r".* available \(.*\)$"):
        layerinit.build(HUGE)
    assert time.monotonic() - t0 < 5
    assert layerinit.memory_stats()["current_bytes"] == before


def test_the_preflight_is_the_clis(monkeypatch, cli):
    # The same numbers as `layerinit build` on the same device (the CLI's default, auto, is the GPU where
    # there is one), against the same (test hook's) available memory.
    monkeypatch.setenv("LAYERINIT_TEST_AVAILABLE_MEMORY", "64MiB")
    with pytest.raises(MemoryError) as e:
        layerinit.build("gpt2", dtype="fp32")
    r = subprocess.run([cli, "build", "--preset", "gpt2", "--dtype", "fp32", "--backend", "cpu"], capture_output=True, text=True,
                       env={**os.environ, "LAYERINIT_TEST_AVAILABLE_MEMORY": "64MiB"})
    assert r.returncode == 2
    assert r.stderr == f"layerinit: error: {e.value}; --no-memory-check to go ahead anyway\n"
    # A rank's pieces are checked alone.
    with pytest.raises(MemoryError, match=r"\(this rank's pieces "):
        layerinit.build("gpt2", dtype="fp32", mesh={"tp": 2}, rank=0)
    monkeypatch.setenv("LAYERINIT_TEST_AVAILABLE_MEMORY", "1GiB")
    assert len(layerinit.build("gpt2-tiny")) > 0


CHILD = r"""
import sys, time, layerinit
print("started", flush=True)
try:
    layerinit.build("gpt2-xl", dtype="fp32", threads=1)
    print("finished", flush=True)
except KeyboardInterrupt:
    stopped = time.monotonic()
    s = layerinit.memory_stats()
    print("interrupted", stopped, s["current_bytes"], s["peak_bytes"], flush=True)
"""


def test_ctrl_c_stops_a_build_within_a_layer():
    # gpt2-xl in fp32: 6.2 GB, layers of 94 MB, several seconds on one thread. SIGINT half a second
    # in: KeyboardInterrupt at the next layer, every byte given back. (It came after the whole build.)
    full = 1_557_611_200 * 4
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "started\n"
        time.sleep(0.5)
        sent = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    finally:
        p.kill()
    words = out.split()
    assert words and words[0] == "interrupted", out
    latency = float(words[1]) - sent  # CLOCK_MONOTONIC: one clock for both processes
    current, peak = int(words[2]), int(words[3])
    print(f"SIGINT to KeyboardInterrupt: {latency:.3f} s; peak {peak} bytes of {full}")
    assert current == 0
    assert 0 < peak < full // 2
    assert latency < 2.0
