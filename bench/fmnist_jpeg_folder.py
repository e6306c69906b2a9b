#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes Fashion-MNIST (Debian's dataset-fashion-mnist) as a folder of JPEG files, for benches
that need a real decoding source: ROOT/train/cK/N.jpg and ROOT/test/cK/N.jpg, the first --train
and --test samples of each split. Read it with `--data folder:ROOT@28x28x1`. Made once; an
existing ROOT with both splits is left as it is.

Usage (the virtualenv's python has PIL):
  ~/.cache/saturate/venv-torch-*/bin/python bench/fmnist_jpeg_folder.py ROOT [--train 20000]
      [--test 2000]
"""
import argparse
import gzip
import os
import struct

SOURCE = "/usr/share/datasets/fashion-mnist"
MAX_SAMPLES = 70000  # both splits of Fashion-MNIST; bounds what a corrupt header can ask for


def read_idx(path, want_dims):
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = magic & 0xFF
        if dims != want_dims:
            raise SystemExit(f"{path}: {dims} dimensions, expected {want_dims}")
        shape = struct.unpack(">" + "I" * dims, f.read(4 * dims))
        if shape[0] > MAX_SAMPLES or any(d > 64 for d in shape[1:]):
            raise SystemExit(f"{path}: shape {shape} is not Fashion-MNIST's")
        return shape, f.read()


def write_split(root, split, prefix, n):
    from PIL import Image
    (count, rows, cols), pixels = read_idx(os.path.join(SOURCE, f"{prefix}-images-idx3-ubyte.gz"), 3)
    (label_count,), labels = read_idx(os.path.join(SOURCE, f"{prefix}-labels-idx1-ubyte.gz"), 1)
    n = min(n, count, label_count)
    size = rows * cols
    for i in range(n):
        d = os.path.join(root, split, f"c{labels[i]}")
        os.makedirs(d, exist_ok=True)
        img = Image.frombytes("L", (cols, rows), pixels[i * size:(i + 1) * size])
        img.save(os.path.join(d, f"{i}.jpg"), quality=95)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--train", type=int, default=20000)
    ap.add_argument("--test", type=int, default=2000)
    a = ap.parse_args()
    if all(os.path.isdir(os.path.join(a.root, s)) for s in ("train", "test")):
        print(f"{a.root}: already there")
        return
    n_train = write_split(a.root, "train", "train", a.train)
    n_test = write_split(a.root, "test", "t10k", a.test)
    print(f"{a.root}: {n_train} training and {n_test} test images")


if __name__ == "__main__":
    main()
