#!/usr/bin/env python3
"""Per-tensor XXH3-64 of the raw bytes of a layerinit checkpoint, read independently of layerinit.

    hash_checkpoint.py hdf5 FILE
    hash_checkpoint.py safetensors DIR

Prints one JSON object {name: {"dtype", "shape", "xxh3_64", ...}}, used by tests/test_cli_reports.cpp to
compare with `layerinit emit --report json` (xxh3_64: the xxhash package's xxh3_64 of the bytes, seed
0, as 16 hex digits like the report's).

HDF5 (h5py): the raw bytes are read with the dataset's own file type as the memory type (no
conversion). For bf16 datasets h5py's ordinary read converts to float32; "bf16_as_f32_exact" says
whether every float32 equals the raw 16 bits shifted left by 16 (bf16 is the top half of a float32).
safetensors: every file named by model.safetensors.index.json (or model.safetensors) goes through
safetensors.deserialize(), which validates the header and offsets and hands back the raw bytes.
"""
import json
import os
import sys

import numpy as np
import xxhash


def xxh3_64(data):
    return "%016x" % xxhash.xxh3_64_intdigest(bytes(data))


def hash_hdf5(path):
    import h5py
    out = {}
    with h5py.File(path, "r") as f:
        for name, ds in f.items():
            ftype = ds.id.get_type()
            size = ftype.get_size()
            raw = np.empty(ds.shape, dtype={1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[size])
            ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=ftype)
            entry = {"dtype": ds.attrs["dtype"], "shape": list(ds.shape), "xxh3_64": xxh3_64(raw.tobytes()),
                     "numpy_dtype": str(ds.dtype)}
            if entry["dtype"] == "bf16":
                as_f32 = np.ascontiguousarray(ds[...], dtype=np.float32).view(np.uint32)
                entry["bf16_as_f32_exact"] = bool(np.array_equal(as_f32, raw.astype(np.uint32) << 16))
            out[name] = entry
    return out


def hash_safetensors(directory):
    from safetensors import deserialize
    index_path = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for file in files:
        with open(os.path.join(directory, file), "rb") as f:
            for name, t in deserialize(f.read()):
                dt = t["dtype"] if isinstance(t["dtype"], str) else str(t["dtype"])
                out[name] = {"dtype": dt.upper(), "shape": list(t["shape"]), "xxh3_64": xxh3_64(t["data"]),
                             "file": file}
    return out


def main():
    kind, path = sys.argv[1], sys.argv[2]
    out = hash_hdf5(path) if kind == "hdf5" else hash_safetensors(path)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
