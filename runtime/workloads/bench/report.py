"""Plain-text tables, the process tree's CPU time and the CPU's int8 instructions for the bench output."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from pathlib import Path


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("-|-".join("-" * w for w in widths))
    lines += [" | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class Clock:
    """Wall time and the CPU time (user + sys) of this process and every child it has waited for: the figure that
    matters on a shared machine, where wall time depends on the neighbours."""

    wall: float
    cpu: float

    @staticmethod
    def now() -> Clock:
        own = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
        return Clock(time.perf_counter(), cpu)

    def since(self, start: Clock) -> Clock:
        return Clock(self.wall - start.wall, self.cpu - start.cpu)


INT8_FLAGS = {
    "avx512_vnni": "AVX-512 VNNI (int8 dot products, 512-bit)",
    "avx_vnni": "AVX-VNNI (256-bit)",
    "amx_int8": "AMX int8 tiles",
    "avx512_bf16": "AVX-512 BF16",
    "avx512f": "AVX-512F",
    "avx2": "AVX2 (int8 via vpmaddubsw, no VNNI)",
}
"""/proc/cpuinfo flags that decide OpenVINO's int8 kernels (Intel "Deep Learning Boost" is VNNI; AMX on Sapphire
Rapids and later). Without VNNI or AMX, int8 matrix products fall back to AVX2/AVX-512 multiply-add sequences and
the int8 speed-up shrinks."""


def cpu_int8_instructions(cpuinfo: str | None = None) -> tuple[str, list[str]]:
    """(model name, the int8-relevant flags it has, in INT8_FLAGS order)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            return "unknown (no /proc/cpuinfo)", []
    model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")), "?")
    flags = set(cpuinfo.split())
    return model, [f for f in INT8_FLAGS if f in flags]


def has_vnni(flags: list[str]) -> bool:
    return any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))
