#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""fmnist-cnn in plain Python PyTorch, as a user would write it, reporting through
saturate_client: the benchmarks' Python peer for `saturate tune --exec` (bench/exec_tune_vs_grid.py).

A per-sample Dataset over Debian's Fashion-MNIST (normalised in __getitem__), a DataLoader,
saturate's fmnist-cnn (two conv blocks, two linear layers), SGD with momentum, optional bf16/fp16
autocast and gradient accumulation, and an evaluation of validation accuracy at the end. Every
setting has the script's own default and takes saturate's when it is passed:
batch 32, 0 workers, fp32, 1 epoch.

Usage: fmnist_cnn_train.py [--epochs N] [--val-samples N] [--data DIR]
"""
import argparse
import gzip
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

import saturate_client as saturate


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


class FashionMnist(Dataset):
    def __init__(self, root, split):
        prefix = "train" if split == "train" else "t10k"
        self.x = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))
        self.y = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz")).long()

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        image = self.x[i].float().div(255).sub(0.2860).div(0.3530).unsqueeze(0)
        return image, self.y[i]


def fmnist_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def loader_for(s, data):
    batch, workers = s.get("batch_size", 32), s.get("num_workers", 0)
    kwargs = dict(batch_size=batch, shuffle=True, drop_last=True, num_workers=workers,
                  pin_memory=s.get("pin_memory", False))
    applied = {"batch_size": batch, "num_workers": workers}
    if workers > 0:
        prefetch = s.get("prefetch", 2 * workers)
        kwargs.update(prefetch_factor=max(1, -(-prefetch // workers)), persistent_workers=True)
        applied["prefetch"] = prefetch
    return s.wrap_loader(DataLoader(data, **kwargs)), applied


def evaluate(model, data, count):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, count, 500):
            x = torch.stack([data[j][0] for j in range(i, min(count, i + 500))])
            y = data.y[i:min(count, i + 500)]
            correct += int((model(x).argmax(1) == y).sum())
    model.train()
    return correct / count


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--val-samples", type=int, default=2000)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    with saturate.session() as s:
        torch.manual_seed(s.get("seed", 0))
        precision, accum = s.get("precision", "fp32"), s.get("grad_accum", 1)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        loader, applied = loader_for(s, FashionMnist(args.data, "train"))
        s.start(applied=dict(applied, precision=precision, grad_accum=accum,
                             seed=s.get("seed", 0)))
        model = fmnist_cnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
        stop = False
        for _ in range(args.epochs if s.get("max_steps") is None else 1 << 30):
            samples, total = 0, 0.0
            for index, (x, y) in enumerate(loader):
                with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                    loss = nn.functional.cross_entropy(model(x), y) / accum
                loss.backward()
                samples, total = samples + len(x), total + loss.detach()
                if (index + 1) % accum:
                    continue
                opt.step()
                opt.zero_grad(set_to_none=True)
                s.step(samples=samples, loss=total)
                samples, total = 0, 0.0
                if s.should_stop():
                    stop = True
                    break
            if stop:
                break
        s.eval("val_accuracy", evaluate(model, FashionMnist(args.data, "test"), args.val_samples),
               higher_is_better=True)


if __name__ == "__main__":
    main()
