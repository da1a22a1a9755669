"""DDP communication hooks chosen by name, and a counter of the bytes every collective sends.

The counter wraps the `torch.distributed` collectives that DDP hooks, FSDP and DeepSpeed call from Python, so
"bytes" is what each rank hands to the collective library per step, summed over calls: the payload size (an
all-reduce's tensor, an all-gather's own shard, a reduce-scatter's whole input, a broadcast on its source), not
the wire bytes of a particular algorithm (a ring all-reduce moves 2(n-1)/n times the payload). DDP's built-in C++
all-reduce bypasses Python, so the uncompressed baseline uses the equivalent Python `allreduce_hook` to be counted
the same way.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

HOOKS = ("none", "fp16", "bf16", "powersgd")
_COUNTED: dict[str, tuple[str, Callable[[int], float]]] = {
    "all_reduce": ("tensor", lambda n: 2 * (n - 1) / n),
    "all_reduce_coalesced": ("tensors", lambda n: 2 * (n - 1) / n),
    "reduce": ("tensor", lambda n: (n - 1) / n),
    "broadcast": ("tensor", lambda n: 1.0),
    "all_gather": ("tensor", lambda n: n - 1),
    "all_gather_into_tensor": ("input_tensor", lambda n: n - 1),
    "all_gather_single": ("input_tensor", lambda n: n - 1),
    "_all_gather_base": ("input_tensor", lambda n: n - 1),
    "reduce_scatter": ("input_list", lambda n: (n - 1) / n),
    "reduce_scatter_tensor": ("input", lambda n: (n - 1) / n),
    "reduce_scatter_single": ("input", lambda n: (n - 1) / n),
    "_reduce_scatter_base": ("input", lambda n: (n - 1) / n),
}
"""Collective -> (the parameter holding this rank's contribution, what a ring algorithm sends per rank as a
multiple of it in a group of n: the factors behind nccl-tests' bus bandwidth, "PERFORMANCE.md" in NVIDIA/nccl-tests).
Both `torch.distributed` and its `distributed_c10d` module are wrapped: FSDP2 calls `dist.all_gather_single` and
`dist.reduce_scatter_single` (torch >= 2.10 names), DeepSpeed passes keywords (`all_reduce(tensor=...)`) and keeps
its own reference to `all_gather_into_tensor`, which calls `distributed_c10d.all_gather_single` inside. Only the
outermost wrapped call of a thread is counted, so a collective that delegates to another is counted once."""


class ByteCounter:
    """Bytes handed to collectives since the last `take()`, and what a ring algorithm would send for them."""

    def __init__(self) -> None:
        self.bytes = 0
        self.ring_bytes = 0.0
        self.calls = 0

    def add(self, tensors: torch.Tensor | list[torch.Tensor], ring_factor: float = 1.0) -> None:
        for tensor in tensors if isinstance(tensors, list | tuple) else [tensors]:
            size = tensor.numel() * tensor.element_size()
            self.bytes += size
            self.ring_bytes += size * ring_factor
        self.calls += 1

    def take(self) -> int:
        value, self.bytes, self.ring_bytes, self.calls = self.bytes, 0, 0.0, 0
        return value


def _contribution(
    name: str, sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, float]:
    """This rank's tensor(s) in a call of collective `name` (by parameter name, positional or keyword) and the
    ring factor for its group."""
    bound = sig.bind(*args, **kwargs)
    param, factor = _COUNTED[name]
    if name == "broadcast" and bound.arguments.get("src", bound.arguments.get("group_src")) != dist.get_rank():
        return [], 0.0  # a broadcast receiver hands over nothing
    return bound.arguments[param], factor(dist.get_world_size(bound.arguments.get("group")))


@contextmanager
def counting(counter: ByteCounter) -> Iterator[ByteCounter]:
    """Wrap the collectives for the duration (restores the originals on exit, also after an error)."""
    modules = (dist, dist.distributed_c10d)
    originals = [(m, name, getattr(m, name)) for m in modules for name in _COUNTED if hasattr(m, name)]
    local = threading.local()

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "inside", False):
                return fn(*args, **kwargs)
            counter.add(*_contribution(name, sig, args, kwargs))
            local.inside = True
            try:
                return fn(*args, **kwargs)
            finally:
                local.inside = False

        return counted

    try:
        for module, name, fn in originals:
            setattr(module, name, wrap(name, fn))
        yield counter
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)


def bf16_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """All-reduce the bucket in bfloat16 (half the bytes of fp32), average, and write back in fp32."""
    group = state if isinstance(state, dist.ProcessGroup) else dist.group.WORLD
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(dist.get_world_size(group))
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()  # type: ignore[union-attr]

    def decompress(f: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        buffer.copy_(f.value()[0])
        return buffer

    return fut.then(decompress)


# DDP compares these annotations with the real classes; `from __future__ import annotations` made them strings.
bf16_hook.__annotations__ = {"state": object, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


def powersgd_hook_one_bucket_at_a_time(
    state: powerSGD_hook.PowerSGDState, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """torch's PowerSGD hook, finished before the hook returns: the variant for gloo (CPU) process groups.

    The PowerSGD hook issues its P and Q all-reduces from callbacks of the previous all-reduce's future and blocks
    in them (`dist.all_reduce(...).get_future().wait()`). With gloo a future completes on one of the process
    group's worker threads (2 by default) and its callbacks run there, so once two buckets are in flight both
    workers sit in `wait()` on all-reduces that only a worker could run: a deadlock (seen with 2 buckets, i.e. a
    model over DDP's 1 MiB first bucket; one bucket trains). Callbacks also run on whichever worker is free, so
    the ranks could issue the buckets' collectives in different orders, which gloo matches by sequence number.
    Waiting here keeps one bucket's chain in flight (one worker blocked, one running it) and the collective order
    the same on every rank, at the cost of overlapping the all-reduce with the rest of the backward pass. NCCL
    completes a future on the issuing thread, which is why torch's hook works there and is used unchanged.
    """
    tensor = powerSGD_hook.powerSGD_hook(state, bucket).wait()
    done: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    done.set_result(tensor)
    return done


powersgd_hook_one_bucket_at_a_time.__annotations__ = {
    "state": powerSGD_hook.PowerSGDState,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


def register_hook(
    model: DistributedDataParallel, hook: str, *, powersgd_rank: int = 1, warm_start: bool = True, start_iter: int = 2
) -> powerSGD_hook.PowerSGDState | None:
    """Register the named hook; returns PowerSGD's state (it holds error feedback that a checkpoint must keep)."""
    if hook == "none":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
        return None
    if hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if hook == "bf16":
        # torch's bf16_compress_hook refuses anything but NCCL/XCCL; this is the same cast-all-reduce-cast for any
        # backend (gloo all-reduces bf16 tensors on CPU).
        model.register_comm_hook(None, bf16_hook)
        return None
    if hook == "powersgd":
        # start_powerSGD_iter: plain all-reduce for the first iterations (the paper's warm-up); warm_start reuses
        # last step's Q as the next power iteration's start (Vogels et al., 2019, "PowerSGD").
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=powersgd_rank,
            start_powerSGD_iter=start_iter,
            warm_start=warm_start,
            use_error_feedback=True,
            random_seed=0,
        )
        nccl = dist.get_backend() == "nccl"
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook if nccl else powersgd_hook_one_bucket_at_a_time)
        return state
    raise ValueError(f"unknown hook {hook!r}; use one of {', '.join(HOOKS)}")
