#!/usr/bin/env python3
"""Independent reader for layerinit checkpoints, used by tests/test_checkpoint_*.cpp.

    read_checkpoint.py hdf5 FILE
    read_checkpoint.py safetensors DIR

Prints one JSON object: {"metadata": {...}, "files": [...], "tensors": {name: {"dtype", "shape",
"bits"}}} where bits are the float32 bit patterns (uint32) of the values as the reader converts
them. HDF5 goes through h5py (its own libhdf5); safetensors through the `safetensors` package:
deserialize() validates each file's header and offsets, safe_open() reads metadata and F16/F32
tensors as numpy (numpy has no bf16, so BF16 bytes are widened by hand: bits << 16).
"""
import json
import os
import sys

import numpy as np


def f32_bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


def read_hdf5(path):
    import h5py
    out = {"metadata": {}, "files": [os.path.basename(path)], "tensors": {}}
    with h5py.File(path, "r") as f:
        for k, v in f.attrs.items():
            out["metadata"][k] = v if isinstance(v, str) else v.decode()
        for name, ds in f.items():
            a = ds[...]
            out["tensors"][name] = {"dtype": ds.attrs["dtype"], "shape": list(ds.shape),
                                    "numpy_dtype": str(a.dtype), "chunks": list(ds.chunks or []),
                                    "compression": ds.compression, "bits": f32_bits(a)}
    return out


def read_safetensors(directory):
    from safetensors import deserialize, safe_open
    index_path = os.path.join(directory, "model.safetensors.index.json")
    out = {"metadata": {}, "files": sorted(os.listdir(directory)), "tensors": {}, "index": None}
    if os.path.exists(index_path):
        with open(index_path) as f:
            out["index"] = json.load(f)
        files = sorted(set(out["index"]["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for file in files:
        path = os.path.join(directory, file)
        with open(path, "rb") as f:
            raw = {name: t for name, t in deserialize(f.read())}
        with safe_open(path, framework="numpy") as f:
            out["metadata"] = f.metadata()
            for name in f.keys():
                t = raw[name]
                dt = t["dtype"].upper() if isinstance(t["dtype"], str) else str(t["dtype"])
                if "BF16" in dt:
                    a = (np.frombuffer(bytes(t["data"]), dtype="<u2").astype(np.uint32) << 16).view(np.float32)
                else:
                    a = f.get_tensor(name)
                out["tensors"][name] = {"dtype": dt, "shape": list(t["shape"]), "file": file,
                                        "bits": f32_bits(a)}
    return out


def main():
    kind, path = sys.argv[1], sys.argv[2]
    out = read_hdf5(path) if kind == "hdf5" else read_safetensors(path)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
