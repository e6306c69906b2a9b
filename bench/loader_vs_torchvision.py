#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""saturate's input pipeline against torchvision's DataLoader on the same JPEG folder.

Both sides decode each JPEG, take a random crop, flip at random, normalise and collate batches,
with the same number of worker processes/threads on the same cores. The folder is made once from
Fashion-MNIST (upscaled to --size, saved as RGB JPEG) and reused. Each repeat runs torchvision
then saturate, so drift in the machine's speed hits both; the table gives the medians and the
median of the per-repeat ratios.

  bench/loader_vs_torchvision.py --saturate build/saturate [--workers 0,2] [--repeats 5]

torchvision is timed over one epoch after a warm-up epoch with persistent workers (its best
case); saturate is timed by `saturate profile --loader-only` over two epochs from a cold start,
worker start-up included.
"""

import argparse
import gzip
import json
import os
import statistics
import struct
import subprocess
import sys
import time

FMNIST = os.environ.get("SATURATE_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">i", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "i" * dims, data[4:4 + 4 * dims])
    import numpy as np
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def make_folder(root, images, size):
    stamp = os.path.join(root, ".made-%d-%d" % (images, size))
    if os.path.exists(stamp):
        return
    from PIL import Image
    for split, prefix, count in (("train", "train", images), ("test", "t10k", max(images // 10, 20))):
        x = read_idx(os.path.join(FMNIST, prefix + "-images-idx3-ubyte.gz"))[:count]
        y = read_idx(os.path.join(FMNIST, prefix + "-labels-idx1-ubyte.gz"))[:count]
        for i, (img, label) in enumerate(zip(x, y)):
            d = os.path.join(root, split, "class%d" % label)
            os.makedirs(d, exist_ok=True)
            im = Image.fromarray(img, "L").resize((size, size), Image.BILINEAR).convert("RGB")
            im.save(os.path.join(d, "%05d.jpg" % i), quality=90)
    open(stamp, "w").close()


def torchvision_epoch_rate(root, batch, workers, crop):
    import torch
    import torchvision
    from torchvision import transforms
    t = transforms.Compose([
        transforms.RandomCrop(crop),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize((0.29,) * 3, (0.35,) * 3),
    ])
    ds = torchvision.datasets.ImageFolder(os.path.join(root, "train"), transform=t)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers,
                                         persistent_workers=workers > 0)
    for _ in loader:  # warm-up epoch: worker start-up, page cache
        pass
    t0 = time.perf_counter()
    n = 0
    for x, _ in loader:
        n += x.shape[0]
    return n / (time.perf_counter() - t0)


def saturate_rate(binary, root, size, batch, workers, crop, images):
    steps = 2 * ((images + batch - 1) // batch)
    out = subprocess.run(
        [binary, "profile", "--loader-only", "--json", "--data",
         "folder:%s@%dx%dx3" % (root, size, size), "--batch-size", str(batch), "--workers",
         str(workers), "--prefetch", str(max(2, 2 * workers)), "--crop", str(crop), "--flip",
         "--steps", str(steps)],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--saturate", required=True, help="the saturate binary")
    ap.add_argument("--dir", default="/tmp/saturate-bench-jpeg", help="JPEG folder (made once)")
    ap.add_argument("--images", type=int, default=10000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--crop", type=int, default=56)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", default="0,2", help="comma-separated worker counts")
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    import torch
    try:
        import torchvision
    except ImportError:
        sys.exit("loader_vs_torchvision: torchvision is missing; install the build matching the "
                 "pinned torch into the venv: pip install torchvision==0.26.0 (for torch 2.11)")
    torch.set_num_threads(os.cpu_count())
    make_folder(a.dir, a.images, a.size)
    print("# JPEG folder %s: %d train images %dx%d RGB, crop %d + flip + normalise, batch %d, "
          "%d cores, torch %s, torchvision %s" % (a.dir, a.images, a.size, a.size, a.crop, a.batch,
                                                   os.cpu_count(), torch.__version__,
                                                   torchvision.__version__))
    print("| workers | torchvision samples/s | saturate samples/s | ratio (median of %d) |"
          % a.repeats)
    print("|---|---|---|---|")
    for w in (int(s) for s in a.workers.split(",")):
        tv, sat, ratios = [], [], []
        for _ in range(a.repeats):
            tv.append(torchvision_epoch_rate(a.dir, a.batch, w, a.crop))
            sat.append(saturate_rate(a.saturate, a.dir, a.size, a.batch, w, a.crop, a.images))
            ratios.append(sat[-1] / tv[-1])
        print("| %d | %.0f | %.0f | %.2fx (range %.2f-%.2f) |" % (
            w, statistics.median(tv), statistics.median(sat), statistics.median(ratios),
            min(ratios), max(ratios)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
