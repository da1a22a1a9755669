"""`mlstack acceptance` (render what the blueprint's engine runs for nccl-tests), `mlstack nccl-check` (read its
log, in any engine's shape) and `mlstack deepspeed-config` (the ZeRO config the training job gets)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from mlstack import config as blueprint_config
from mlstack.config.training_engines import EKS_ENGINES
from mlstack.errors import InputError
from mlstack.workloads import nccl, nccl_batch, nccl_k8s, nccl_slurm
from mlstack.workloads.deepspeed_config import deepspeed_config


def register(sub: Any) -> None:
    p = sub.add_parser(
        "acceptance",
        help="nccl-tests all-reduce over every EFA GPU node: a Kubeflow job (EKS, HyperPod-EKS; kubectl apply -f -), "
        "an sbatch script (HyperPod Slurm) or a Batch register-and-submit script (AWS Batch)",
    )
    p.add_argument("blueprint", help="name or path of a training blueprint")
    p.add_argument(
        "--image",
        default=nccl.IMAGE_PLACEHOLDER,
        help="nccl-tests image built from runtime/containers/nccl-tests.Dockerfile (EKS engines and batch)",
    )
    p.set_defaults(handler=cmd_acceptance)

    p = sub.add_parser("nccl-check", help="read all_reduce_perf output: PASS/FAIL against the expectation")
    p.add_argument(
        "log",
        nargs="?",
        default="-",
        help="the log (default: stdin): Slurm output, kubectl logs, aws logs tail or get-log-events JSON",
    )
    p.add_argument("--instance-type", required=True, help="the node group's instance type, e.g. p5.48xlarge")
    p.add_argument("--expect-gbytes", type=float, default=None, help="minimum busbw, GB/s, at the largest size")
    p.set_defaults(handler=cmd_nccl_check)

    p = sub.add_parser("deepspeed-config", help="DeepSpeed ZeRO config from a blueprint's training.model")
    p.add_argument("blueprint", help="name or path of a training blueprint")
    p.set_defaults(handler=cmd_deepspeed_config)


def cmd_acceptance(args: argparse.Namespace) -> int:
    config = blueprint_config.load(args.blueprint)
    if not nccl.acceptance_groups(config):
        raise InputError(
            f"blueprint {config.name!r} has no GPU node group with EFA and >= {nccl.MIN_NODES} nodes: "
            "nothing for nccl-tests to check across nodes"
        )
    assert config.training is not None
    engine = config.training.engine
    if engine != "hyperpod-slurm" and args.image == nccl.IMAGE_PLACEHOLDER:
        raise InputError(
            f"--image: engine {engine} runs the nccl-tests image you push; build "
            "runtime/containers/nccl-tests.Dockerfile, push it to ECR and pass its URI"
        )
    if engine in EKS_ENGINES:
        sys.stdout.write(yaml.safe_dump_all(nccl_k8s.render(config, args.image), sort_keys=False))
        return 0
    scripts = nccl_slurm.render(config) if engine == "hyperpod-slurm" else nccl_batch.render(config, args.image)
    for i, (name, text) in enumerate(scripts.items()):
        if len(scripts) > 1:
            sys.stdout.write(("\n" if i else "") + f"# ===== {name} =====\n")
        sys.stdout.write(text)
    return 0


def cmd_nccl_check(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.log == "-" else Path(args.log).read_text(encoding="utf-8")
    result = nccl.verdict(nccl.parse(text), instance_type=args.instance_type, expected_gbytes=args.expect_gbytes)
    print(result.summary())
    return 0 if result.passed else 1


def cmd_deepspeed_config(args: argparse.Namespace) -> int:
    config = blueprint_config.load(args.blueprint)
    if config.training is None or config.training.model is None:
        raise InputError(f"blueprint {config.name!r} has no training.model section to size ZeRO from")
    model = config.training.model
    print(json.dumps(deepspeed_config(zero_stage=model.zero_stage, precision=model.precision), indent=2))
    return 0
