#!/usr/bin/env python3
"""emit and verify against what bounds them, side by side in one run (issue 42's targets): `layerinit
emit` of a preset to safetensors and to HDF5 against `dd ... conv=fsync` of the same bytes to the same
disk (target: emit <= 1.25x dd); `layerinit verify` of what emit wrote against `layerinit build` of
the same model plus reading the file (`dd ... of=/dev/null`; target: verify <= 1.2x their sum). Wall
time, MB/s of the weights, peak RSS and minor page faults of each process (os.wait4's rusage of that
one process), the median of --reps runs; the commands of one rep run one after the other, so that a
change of load touches them alike. verify makes every value again beside the file's and holds a few
chunks (checkpoint/verify.hpp).

The file verify reads was just written, so it is read from the page cache unless the machine is short
of memory: this measures verify's own cost, not the disk's (the read beside it is the same).

usage: bench/cpu/verify_bench.py [--binary build/bin/layerinit] [--preset gpt2-large | --hf-config FILE] [--threads 0]
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
    return wall, usage.ru_maxrss, out.decode(), usage.ru_minflt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="build/bin/layerinit")
    ap.add_argument("--preset", default="gpt2-large")
    ap.add_argument("--hf-config", default=None, help="a config.json instead of --preset (bench/cpu/qwen3-moe-1.6gb.json: an MoE "
                    "of gpt2-large's bytes, 1,344 expert tensors)")
    ap.add_argument("--threads", default="0")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the checkpoints are written (default: the system's temp dir)")
    ap.add_argument("--out", default=f"bench/results/verify-{datetime.date.today()}.csv")
    a = ap.parse_args()
    model = ["--hf-config", a.hf_config] if a.hf_config else ["--preset", a.preset]
    name = os.path.basename(a.hf_config) if a.hf_config else a.preset
    rows = []
    with tempfile.TemporaryDirectory(prefix="layerinit-verify-", dir=a.dir) as tmp:
        for fmt in ("safetensors", "hdf5"):
            path = os.path.join(tmp, "out.h5" if fmt == "hdf5" else "out")
            data = path if fmt == "hdf5" else os.path.join(path, "model.safetensors")
            copy = os.path.join(tmp, "dd.bin")
            runs = {c: [] for c in ("emit", "dd", "verify", "build", "read")}
            weights = 0
            for _ in range(a.reps):
                if os.path.isdir(path):
                    shutil.rmtree(path)
                elif os.path.exists(path):
                    os.remove(path)
                wall, kib, out, faults = run_rusage([a.binary, "emit", *model, "--backend", "cpu", "--threads",
                                                     a.threads, "--format", fmt, "--report", "json", "-o", path])
                weights = json.loads(out)["total_bytes"]
                runs["emit"].append((wall, kib, faults))
                if os.path.exists(copy):
                    os.remove(copy)
                # The same bytes to the same disk, 16 MiB at a time, fsync'd at the end, as emit does.
                wall, kib, _, faults = run_rusage(["dd", f"if={data}", f"of={copy}", "bs=16M", "conv=fsync", "status=none"])
                runs["dd"].append((wall, kib, faults))
                os.remove(copy)
                wall, kib, out, faults = run_rusage([a.binary, "verify", path, "--threads", a.threads, "--report", "json"])
                report = json.loads(out)
                if not report["ok"] or report["bytes_read"] != weights:
                    sys.exit(f"verify of {path} did not pass: {report['equal']} equal, {report['differs']} differ, "
                             f"{report['missing']} missing, {report['unexpected']} unexpected, {report['bytes_read']} bytes read")
                runs["verify"].append((wall, kib, faults))
                wall, kib, _, faults = run_rusage([a.binary, "build", *model, "--backend", "cpu", "--threads",
                                                   a.threads, "--report", "json"])
                runs["build"].append((wall, kib, faults))
                wall, kib, _, faults = run_rusage(["dd", f"if={data}", "of=/dev/null", "bs=16M", "status=none"])
                runs["read"].append((wall, kib, faults))
            med = {c: statistics.median(w for w, _, _ in r) for c, r in runs.items()}
            for cmd, r in runs.items():
                wall = med[cmd]
                row = (name, fmt, cmd, weights, wall, weights / wall / 1e6, statistics.median(k for _, k, _ in r) / 1024,
                       statistics.median(f for _, _, f in r), os.getloadavg()[0])
                rows.append(row)
                print(f"{fmt:<11} {cmd:<6} {weights / 1e9:6.2f} GB  {wall:7.2f} s  {row[5]:7.0f} MB/s  {row[6]:8.1f} MiB peak RSS"
                      f"  {row[7]:9.0f} minor faults  (load {row[8]:.2f})", flush=True)
            print(f"{fmt:<11} emit / dd = {med['emit'] / med['dd']:.2f} (target <= 1.25); verify / (build + read) = "
                  f"{med['verify'] / (med['build'] + med['read']):.2f} (target <= 1.2); emit's minor faults per 4 KiB of "
                  f"weights = {statistics.median(f for _, _, f in runs['emit']) / (weights / 4096):.3f}", flush=True)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        f.write(f"# {' '.join(sys.argv)}\n# {datetime.datetime.now().isoformat(timespec='seconds')}\n")
        f.write("preset,format,command,weight_bytes,wall_s,mb_per_s,peak_rss_mib,minor_faults,load1\n")
        for r in rows:
            f.write(f"{r[0]},{r[1]},{r[2]},{r[3]},{r[4]:.3f},{r[5]:.1f},{r[6]:.1f},{r[7]:.0f},{r[8]:.2f}\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
