"""What a vLLM server on Neuron (Inferentia2, Trainium) needs beyond the GPU server, without the CDK.

The image is the AWS Neuron vLLM Deep Learning Container (`mlstack.config.inference_eks.NEURON_VLLM_TAG`: vLLM
0.16.0 with the vllm-neuron plugin over NxD Inference). Differences from the CUDA server, each from the plugin's
source and README (github.com/vllm-project/vllm-neuron):
- `--tensor-parallel-size` counts NeuronCores (`tp_degree` of the NxD Inference config it builds);
- no `--gpu-memory-utilization`: the KV cache is sized by blocks, and the README's known issue 2 asks for
  `--num-gpu-blocks-override` = ceil(max_model_len / block_size) x max_num_seqs; with prefix caching off the
  plugin sets block_size = max_model_len (`vllm_neuron/platform.py`), so the override is max_num_seqs;
- prefix caching off (`--no-enable-prefix-caching`, as the README's serving example; its known issue 3: wrong
  outputs at batch size 1 with prefix caching);
- the model is compiled for the Neuron cores at the first start (minutes to tens of minutes): the artifacts go to
  `NEURON_COMPILED_ARTIFACTS` (`neuronx_distributed_model_loader._get_compiled_model_path`), which must be a
  writable directory: without it the plugin writes next to the weights, a read-only Mountpoint volume here.
"""

from __future__ import annotations

__all__ = ["COMPILED_DIR", "COMPILE_BUDGET_S", "neuron_args", "neuron_env"]

COMPILED_DIR = "/neuron-cache/compiled"
"""Where the server writes the compiled model (an emptyDir on the node's disk: a restart of the container keeps
it, a new pod compiles again)."""
COMPILE_BUDGET_S = 3600
"""Startup allowance for the first compilation on top of loading the weights (the startup probe waits this long)."""


def neuron_args(max_num_seqs: int) -> list[str]:
    """The Neuron-only flags of `vllm serve` (after the common ones)."""
    return ["--no-enable-prefix-caching", "--num-gpu-blocks-override", str(max_num_seqs)]


def neuron_env() -> list[dict[str, str]]:
    return [{"name": "NEURON_COMPILED_ARTIFACTS", "value": COMPILED_DIR}]
