"""Tensor x pipeline x data parallel layouts: per-device memory, communication per step, and the layout choice.

Memory per device for a layout TP t x PP p x DP d (t·p·d devices), computed by `fit.layout_memory` (the estimate
`mlstack plan` and the synth-time fit warning use too):
- model states: the t·p-way model-parallel shard (params / (t·p)) under ZeRO over the d data-parallel replicas
  (`memory.model_state_memory`). With ZeRO-1 this is Megatron-LM's distributed optimizer, whose README gives the
  bytes per parameter as 4 + 16/d (fp16 params and grads) and 6 + 12/d (bf16 params, fp32 grads).
- activations: Korthikanti et al. 2022 with sequence parallelism over the TP group (`memory.activation_memory`).
  With a 1F1B pipeline schedule the first stage holds p micro-batches of L/p layers in flight, i.e. L layers' worth
  (Korthikanti et al. §4.2.3), so the total does not shrink with p.
- ZeRO-3 adds two layers of gathered 16-bit weights of the TP shard.

Communication per step and device (bytes), s = sequence length, b = micro-batch, h = hidden, m = micro-batches per
step per data-parallel replica, 2-byte elements:
- TP with sequence parallelism: 4 all-gathers and 4 reduce-scatters per layer per micro-batch (forward and
  backward), each moving (t-1)/t x s·b·h x 2 bytes; inside a node over NVLink / NeuronLink.
- PP: per micro-batch one activation forward and one gradient backward of s·b·h/t x 2 bytes per stage boundary
  (scatter/gather over the TP group); over EFA when the pipeline spans nodes.
- DP: reduce-scatter of gradients + all-gather of parameters of the shard, 2 x (d-1)/d x params/(t·p) x 2 bytes;
  ZeRO-3 re-gathers the parameters for forward and backward of every micro-batch: (2m + 1) x (d-1)/d x ... ;
  over EFA when the layout spans nodes.

Step time used for ranking layouts: compute x (1 + pipeline bubble (p-1)/m) + TP time (not overlapped) + PP time
+ DP time beyond what overlaps with compute. EFA bandwidth per device = the node's EFA bandwidth / devices per node.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlstack.catalog.fit import layout_memory
from mlstack.catalog.memory import ModelShape

__all__ = ["INTRA_NODE_GBPS", "Layout", "LayoutEstimate", "choose_layout", "estimate_layout", "layouts"]

# Device-to-device bandwidth inside a node, GB/s per device per direction (half the bidirectional figure).
INTRA_NODE_GBPS: dict[str, tuple[float, str]] = {
    "A100": (300.0, "NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional"),
    "H100": (450.0, "NVIDIA H100 datasheet: NVLink 900 GB/s bidirectional"),
    "H200": (450.0, "NVIDIA H200 datasheet: NVLink 900 GB/s bidirectional"),
    "B200": (900.0, "NVIDIA B200 datasheet: NVLink 1.8 TB/s bidirectional"),
    "B300": (900.0, "NVIDIA B300 (NVLink 5): 1.8 TB/s bidirectional"),
    "Trainium": (384.0, "AWS Trn1 page: NeuronLink 768 GB/s per instance direction pair, assumed per device"),
    "Trainium2": (512.0, "AWS Trn2 page: NeuronLink-v3 1 TB/s per chip bidirectional"),
}
PCIE_GBPS = 25.0
"""G-series GPUs have no NVLink: TP goes over PCIe Gen4 x16 (~32 GB/s per direction; 25 GB/s achievable)."""


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    def describe(self) -> str:
        return f"TP{self.tp} x PP{self.pp} x DP{self.dp}"


@dataclass(frozen=True)
class LayoutEstimate:
    """Per-device memory (bytes) and per-step communication (bytes, seconds) of one layout."""

    layout: Layout
    states_bytes: float
    activations_bytes: float
    gather_bytes: float
    micro_batches: int
    tp_bytes: float
    pp_bytes: float
    dp_bytes: float
    compute_s: float
    bubble_s: float
    tp_s: float
    pp_s: float
    dp_s: float
    pp_over_efa: bool
    dp_over_efa: bool

    @property
    def total_bytes(self) -> float:
        return self.states_bytes + self.activations_bytes + self.gather_bytes

    @property
    def efa_exposed_s(self) -> float:
        """EFA time per step that does not hide behind compute (PP transfers, DP beyond the compute time)."""
        pp = self.pp_s if self.pp_over_efa else 0.0
        dp = max(0.0, self.dp_s - self.compute_s) if self.dp_over_efa else 0.0
        return pp + dp

    @property
    def step_s(self) -> float:
        pp = self.pp_s if not self.pp_over_efa else 0.0
        dp = max(0.0, self.dp_s - self.compute_s) if not self.dp_over_efa else 0.0
        return self.compute_s + self.bubble_s + self.tp_s + pp + dp + self.efa_exposed_s

    def to_json(self) -> dict[str, object]:
        return {
            "tp": self.layout.tp,
            "pp": self.layout.pp,
            "dp": self.layout.dp,
            "micro_batches_per_step": self.micro_batches,
            "comm_bytes_per_step_per_device": {"tp": self.tp_bytes, "pp": self.pp_bytes, "dp": self.dp_bytes},
            "tp_link": "intra-node",
            "pp_link": "EFA" if self.pp_over_efa else "intra-node",
            "dp_link": "EFA" if self.dp_over_efa else "intra-node",
            "step_seconds": {
                "compute": self.compute_s,
                "bubble": self.bubble_s,
                "tp": self.tp_s,
                "pp": self.pp_s,
                "dp": self.dp_s,
                "efa_exposed": self.efa_exposed_s,
                "total": self.step_s,
            },
        }


def layouts(devices_per_node: int, nodes: int, shape: ModelShape) -> list[Layout]:
    """Layouts of `nodes` x `devices_per_node` devices: TP a power of two within one node dividing the heads, PP a
    power of two up to the layer count (uneven stages allowed), DP the rest."""
    total = devices_per_node * nodes
    out: list[Layout] = []
    tp = 1
    while tp <= devices_per_node:
        if shape.heads % tp == 0 and total % tp == 0:
            pp = 1
            while pp <= shape.layers and tp * pp <= total:
                if total % (tp * pp) == 0:
                    out.append(Layout(tp, pp, total // (tp * pp)))
                pp *= 2
        tp *= 2
    return out


def estimate_layout(
    layout: Layout,
    *,
    params: float,
    shape: ModelShape,
    zero_stage: int,
    param_bytes: float,
    grad_bytes: float,
    optimizer_multiplier: float,
    seq_len: int,
    micro_batch: int,
    global_batch_tokens: float,
    devices_per_node: int,
    peak_tflops: float,
    mfu: float,
    intra_gbps: float,
    efa_gbps_per_node: float,
) -> LayoutEstimate:
    """Memory and communication of one layout (see the module doc for every formula)."""
    t, p, d = layout.tp, layout.pp, layout.dp
    shard = params / (t * p)
    memory = layout_memory(
        params,
        shape=shape,
        tensor_parallel=t,
        pipeline_parallel=p,
        data_parallel=d,
        zero_stage=zero_stage,
        param_bytes=param_bytes,
        grad_bytes=grad_bytes,
        optimizer_multiplier=optimizer_multiplier,
        seq_len=seq_len,
        micro_batch=micro_batch,
    )
    m = max(1, round(global_batch_tokens / (seq_len * micro_batch * d)))
    sbh2 = seq_len * micro_batch * shape.hidden * 2.0
    layers_per_stage = shape.layers / p
    tp_bytes = 8 * (t - 1) / t * sbh2 * layers_per_stage * m if t > 1 else 0.0
    pp_bytes = 2 * sbh2 / t * m if p > 1 else 0.0
    dp_factor = (2 * m + 1) if zero_stage == 3 else 2
    dp_bytes = dp_factor * (d - 1) / d * shard * param_bytes if d > 1 else 0.0
    tokens_per_device = global_batch_tokens / layout.devices
    compute = 6.0 * params * tokens_per_device / (peak_tflops * 1e12 * mfu)
    efa_per_device = efa_gbps_per_node / 8.0 / devices_per_node * 1e9
    intra = intra_gbps * 1e9
    multi_node = layout.devices > devices_per_node
    # Rank order TP, then DP, then PP (Megatron-LM's default): a DP group stays in a node while t x d fits in it.
    pp_over_efa = multi_node and p > 1
    dp_over_efa = d > 1 and t * d > devices_per_node

    def secs(n_bytes: float, over_efa: bool) -> float:
        if n_bytes == 0:
            return 0.0
        bw = efa_per_device if over_efa else intra
        return float("inf") if bw <= 0 else n_bytes / bw

    return LayoutEstimate(
        layout=layout,
        states_bytes=memory.states.total_bytes,
        activations_bytes=memory.activations_bytes,
        gather_bytes=memory.gather_bytes,
        micro_batches=m,
        tp_bytes=tp_bytes,
        pp_bytes=pp_bytes,
        dp_bytes=dp_bytes,
        compute_s=compute,
        bubble_s=compute * (p - 1) / m,
        tp_s=secs(tp_bytes, False),
        pp_s=secs(pp_bytes, pp_over_efa),
        dp_s=secs(dp_bytes, dp_over_efa),
        pp_over_efa=pp_over_efa,
        dp_over_efa=dp_over_efa,
    )


def choose_layout(candidates: list[LayoutEstimate], usable_bytes: float) -> LayoutEstimate | None:
    """The fitting layout with the shortest step; ties: smaller TP x PP (less model parallelism).

    `usable_bytes` is `fit.usable_bytes(device memory, headroom)`: the fit rule of `fit.TrainingFit`."""
    fitting = [c for c in candidates if c.total_bytes <= usable_bytes]
    if not fitting:
        return None
    return min(fitting, key=lambda c: (round(c.step_s, 6), c.layout.tp * c.layout.pp, c.layout.tp))
