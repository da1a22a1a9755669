"""A tiny causal transformer language model and a deterministic synthetic corpus.

The corpus is a fixed random Markov chain over a byte vocabulary: each token has a few likely successors, so
the loss can fall from ln(vocab) towards the chain's entropy. A batch is a pure function of (seed, step, rank),
which is what makes resuming from a checkpoint bit-identical: no data-loader state to save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class LMConfig:
    vocab: int = 256
    d_model: int = 64
    heads: int = 4
    layers: int = 2
    seq_len: int = 64
    successors: int = 4
    """Likely next tokens per token in the synthetic chain (entropy floor about ln(successors))."""


class TinyLM(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        layer = nn.TransformerEncoderLayer(
            cfg.d_model, cfg.heads, dim_feedforward=4 * cfg.d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        x = self.embed(tokens) + self.pos(torch.arange(seq, device=tokens.device))
        x = self.blocks(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))  # type: ignore[no-any-return]


def transition_table(cfg: LMConfig, seed: int) -> torch.Tensor:
    """[vocab, successors] token ids: the chain's likely successors of each token (same on every rank)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab, (cfg.vocab, cfg.successors), generator=g)


def batch(cfg: LMConfig, table: torch.Tensor, *, seed: int, step: int, rank: int, size: int) -> torch.Tensor:
    """[size, seq_len + 1] tokens for (step, rank): inputs are [:, :-1], targets [:, 1:]."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank + 1)
    out = torch.empty(size, cfg.seq_len + 1, dtype=torch.long)
    out[:, 0] = torch.randint(0, cfg.vocab, (size,), generator=g)
    choice = torch.randint(0, cfg.successors, (size, cfg.seq_len), generator=g)
    for t in range(cfg.seq_len):
        out[:, t + 1] = table[out[:, t], choice[:, t]]
    return out


def loss_fn(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def entropy_floor(cfg: LMConfig) -> float:
    """The loss a perfect model reaches (ignoring repeated successors): ln(successors)."""
    return math.log(cfg.successors)
