"""DDP communication hooks chosen by name, and a counter of the bytes every collective sends.

The counter wraps the `torch.distributed` collectives that DDP hooks and FSDP call from Python
(`all_reduce`, `all_gather_into_tensor`, `reduce_scatter_tensor`), so "bytes" is what each rank hands to the
collective library per step, summed over calls: the payload size, not the wire bytes of a particular algorithm
(a ring all-reduce moves 2(n-1)/n times the payload). DDP's built-in C++ all-reduce bypasses Python, so the
uncompressed baseline uses the equivalent Python `allreduce_hook` to be counted the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

HOOKS = ("none", "fp16", "bf16", "powersgd")
_COUNTED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")


class ByteCounter:
    """Bytes handed to collectives since the last `take()`."""

    def __init__(self) -> None:
        self.bytes = 0
        self.calls = 0

    def add(self, tensor: torch.Tensor) -> None:
        self.bytes += tensor.numel() * tensor.element_size()
        self.calls += 1

    def take(self) -> int:
        value, self.bytes, self.calls = self.bytes, 0, 0
        return value


@contextmanager
def counting(counter: ByteCounter) -> Iterator[ByteCounter]:
    """Wrap the collectives for the duration (restores the originals on exit, also after an error)."""
    originals: dict[str, Callable[..., Any]] = {name: getattr(dist, name) for name in _COUNTED}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def counted(*args: Any, **kwargs: Any) -> Any:
            # all_reduce(tensor), reduce_scatter_tensor(output, input): count what this rank contributes.
            tensor = args[1] if name == "reduce_scatter_tensor" else args[0]
            if name == "all_gather_into_tensor":
                tensor = args[1]  # (output, input): this rank's shard
            counter.add(tensor)
            return fn(*args, **kwargs)

        return counted

    try:
        for name, fn in originals.items():
            setattr(dist, name, wrap(name, fn))
        yield counter
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)


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
