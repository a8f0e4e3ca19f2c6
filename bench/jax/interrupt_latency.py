#!/usr/bin/env python3
"""How soon Ctrl-C stops an eager layerinit.jax.init: a child process inits 48 fp32 [4096, 4096] arrays
(3.2 GB, a second or more on the CPU); SIGINT is sent --after seconds after it starts the init. Prints
when the child's KeyboardInterrupt came (seconds into the init), how many arrays were still alive after
it, and how long the child took to exit after the signal.

    python bench/jax/interrupt_latency.py [--after 0.3]
"""
import argparse
import os
import signal
import subprocess
import sys
import time

CHILD = r"""
import time, jax, jax.numpy as jnp
import layerinit.jax as lj
rules = {"*": "normal(0, 1)"}
tree = {f"l{i}": jax.ShapeDtypeStruct((4096, 4096), jnp.float32) for i in range(48)}
lj.init({"a": jax.ShapeDtypeStruct((4, 4), jnp.float32)}, rules=rules)  # the handlers registered
t = time.time()
print("start", flush=True)
try:
    jax.block_until_ready(lj.init(tree, rules=rules))
    print(f"finished {time.time() - t:.2f}", flush=True)
except KeyboardInterrupt:
    print(f"interrupted {time.time() - t:.2f} live {len(jax.live_arrays())}", flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--after", type=float, default=0.3, help="seconds into the init to send SIGINT")
    a = ap.parse_args()
    p = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not ignored
    if not p.stdout.readline().startswith("start"):
        raise SystemExit("the child did not start")
    time.sleep(a.after)
    sent = time.time()
    p.send_signal(signal.SIGINT)
    out = p.stdout.read().strip()
    p.wait()
    print(f"SIGINT {a.after} s in: child says '{out}'; exit {time.time() - sent:.2f} s after the signal, "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
