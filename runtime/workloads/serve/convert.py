"""PyTorch -> OpenVINO IR -> int8 (NNCF post-training quantization), on a data set scikit-learn ships.

    python -m runtime.workloads.serve.convert --out build/digits   # writes fp32/ and int8/ model.xml + model.bin

The reference model is an MLP on scikit-learn's 8x8 handwritten digits (1,797 images, shipped in the package:
no download). Post-training quantization needs no retraining, only a few hundred unlabeled calibration
samples drawn from the training split; accuracy is measured on a held-out split the model never saw.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import nncf
import numpy as np
import openvino as ov
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn


@dataclass(frozen=True)
class Digits:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def digits(seed: int = 0) -> Digits:
    """Scaled to [0, 1]; a stratified 30% held-out test split."""
    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, data.target, test_size=0.3, random_state=seed, stratify=data.target)
    return Digits(x_tr, y_tr.astype(np.int64), x_te, y_te.astype(np.int64))


def mlp(inputs: int, hidden: int, outputs: int, layers: int = 2) -> nn.Sequential:
    mods: list[nn.Module] = []
    width = inputs
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    mods.append(nn.Linear(width, outputs))
    return nn.Sequential(*mods)


def train_digits(data: Digits, *, seed: int = 0, epochs: int = 30, hidden: int = 256) -> nn.Sequential:
    torch.manual_seed(seed)
    model = mlp(data.x_train.shape[1], hidden, 10)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=g).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def to_openvino(model: nn.Module, features: int) -> ov.Model:
    """Trace the PyTorch model into an OpenVINO model with a dynamic batch dimension."""
    with torch.no_grad():
        return ov.convert_model(model, example_input=torch.zeros(1, features), input=[(-1, features)])


def quantize_int8(model: ov.Model, calibration: np.ndarray, *, samples: int = 300) -> ov.Model:
    """NNCF post-training quantization (weights and activations int8) calibrated on `calibration` rows."""
    rows = calibration[:samples]
    dataset = nncf.Dataset([rows[i : i + 1] for i in range(len(rows))])
    return nncf.quantize(model, dataset, subset_size=len(rows))


def compile_cpu(model: ov.Model | Path) -> ov.CompiledModel:
    return ov.Core().compile_model(model, "CPU")


def accuracy(compiled: ov.CompiledModel, x: np.ndarray, y: np.ndarray) -> float:
    logits = compiled(x)[compiled.output(0)]
    return float((np.argmax(logits, axis=1) == y).mean())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="train the digits MLP, write fp32 and int8 OpenVINO IR")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--calibration-samples", type=int, default=300)
    args = p.parse_args(argv)
    data = digits()
    fp32 = to_openvino(train_digits(data, epochs=args.epochs), data.x_train.shape[1])
    int8 = quantize_int8(fp32, data.x_train, samples=args.calibration_samples)
    for name, model in (("fp32", fp32), ("int8", int8)):
        ov.save_model(model, args.out / name / "model.xml", compress_to_fp16=False)
        print(f"{name}: held-out accuracy {accuracy(compile_cpu(model), data.x_test, data.y_test):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
