#!/usr/bin/env python3
"""verify against emit of the same model: `layerinit emit` of a preset to safetensors and to HDF5,
then `layerinit verify` of what it wrote; wall time, MB/s of the weights and peak RSS of each process
(os.wait4's rusage of that one process), the median of --reps runs. verify makes every value again
beside the file's and holds a few chunks (checkpoint/verify.hpp): it should run at about emit's
speed or faster (it writes nothing) in memory independent of the model's size.

The file verify reads was just written, so it is read from the page cache unless the machine is short
of memory: this measures verify's own cost, not the disk's.

usage: bench/cpu/verify_bench.py [--binary build/bin/layerinit] [--preset gpt2-large] [--threads 0]
                                 [--reps 3] [--dir /tmp] [--out bench/results/verify-DATE.csv]"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run_rusage(cmd):
    """Wall seconds, peak RSS (KiB, the child's own, from wait4) and stdout of one process that must exit 0."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Read both pipes to their ends, then reap with wait4 (Popen.wait would take the rusage).
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{err.decode()}")
    return wall, usage.ru_maxrss, out.decode()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/layerinit")
    ap.add_argument("--preset", default="gpt2-large")
    ap.add_argument("--threads", default="0")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the checkpoints are written (default: the system's temp dir)")
    ap.add_argument("--out", default=f"bench/results/verify-{datetime.date.today()}.csv")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="layerinit-verify-", dir=a.dir) as tmp:
        for fmt in ("safetensors", "hdf5"):
            path = os.path.join(tmp, "out.h5" if fmt == "hdf5" else "out")
            emit_w, emit_r, verify_w, verify_r = [], [], [], []
            weights = 0
            for _ in range(a.reps):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                elif os.path.exists(path):
                    os.remove(path)
                wall, kib, out = run_rusage([a.binary, "emit", "--preset", a.preset, "--backend", "cpu", "--threads", a.threads,
                                             "--format", fmt, "--report", "json", "-o", path])
                weights = json.loads(out)["total_bytes"]
                emit_w.append(wall)
                emit_r.append(kib)
                wall, kib, out = run_rusage([a.binary, "verify", path, "--threads", a.threads, "--report", "json"])
                report = json.loads(out)
                if not report["ok"] or report["bytes_read"] != weights:
                    sys.exit(f"verify of {path} did not pass: {report['equal']} equal, {report['differs']} differ, "
                             f"{report['missing']} missing, {report['unexpected']} unexpected, {report['bytes_read']} bytes read")
                verify_w.append(wall)
                verify_r.append(kib)
            for cmd, walls, rss in (("emit", emit_w, emit_r), ("verify", verify_w, verify_r)):
                wall = statistics.median(walls)
                row = (a.preset, fmt, cmd, weights, wall, weights / wall / 1e6, statistics.median(rss) / 1024, os.getloadavg()[0])
                rows.append(row)
                print(f"{fmt:<11} {cmd:<6} {weights / 1e9:6.2f} GB  {wall:7.2f} s  {row[5]:7.0f} MB/s  {row[6]:8.1f} MiB peak RSS"
                      f"  (load {row[7]:.2f})", flush=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        f.write(f"# {' '.join(sys.argv)}\n# {datetime.datetime.now().isoformat(timespec='seconds')}\n")
        f.write("preset,format,command,weight_bytes,wall_s,mb_per_s,peak_rss_mib,load1\n")
        for r in rows:
            f.write(f"{r[0]},{r[1]},{r[2]},{r[3]},{r[4]:.3f},{r[5]:.1f},{r[6]:.1f},{r[7]:.2f}\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
