"""Output tokens/s and $ per million output tokens per endpoint instance, for the inference plans.

Which number the plan uses, first that applies: a `mlstack serve-check` report given with `mlstack plan
--serve-check [ENDPOINT[/VARIANT]=]FILE` (measured: preferred); the blueprint's measured
`traffic.throughput_per_instance` (requests/s) x `traffic.tokens.output_tokens`; the serving model's estimate
(`mlstack.design.serving`). Only endpoints whose traffic declares `tokens` (an LLM workload) get figures, or
ones a report names. The report is a command-line input, not a blueprint field: a measurement belongs to a run
(server build, image, date), while the blueprint is the architecture a team forks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mlstack.config import BlueprintConfig
from mlstack.config.inference import (
    AsyncEndpointConfig,
    InferenceModelConfig,
    RealtimeEndpointConfig,
    TrafficConfig,
    VariantConfig,
)
from mlstack.design.serving import ServingFigures, Workload, estimate_instance, measured_figures, usd_per_million
from mlstack.errors import InputError

__all__ = ["figure_row", "parse_serve_checks", "serving_figures", "serving_targets", "variant_figures"]


def serving_targets(config: BlueprintConfig) -> dict[str, list[str]]:
    """The endpoints a report may name, each with its variant names (instance-backed endpoints only)."""
    targets: dict[str, list[str]] = {}
    if config.inference is not None:
        for spec in config.inference.endpoints:
            if isinstance(spec, RealtimeEndpointConfig):
                targets[spec.name] = [v.name for v in spec.variants]
            elif isinstance(spec, AsyncEndpointConfig):
                targets[spec.name] = []
    if config.inference_eks is not None:
        targets.update({e.name: [] for e in config.inference_eks.endpoints})
    return targets


def parse_serve_checks(values: list[str], endpoints: Mapping[str, list[str]]) -> dict[str, Path]:
    """`--serve-check` values -> {"endpoint" or "endpoint/variant": file}. A bare FILE needs a blueprint with one
    endpoint. `endpoints` maps each endpoint name to its variant names. Raises InputError (one line)."""
    result: dict[str, Path] = {}
    for value in values:
        target, sep, file = value.rpartition("=")
        if not sep:
            if len(endpoints) != 1:
                raise InputError(
                    f"--serve-check {value}: the blueprint has endpoints {', '.join(endpoints)}; name one as "
                    f"ENDPOINT=FILE (or ENDPOINT/VARIANT=FILE)"
                )
            target = next(iter(endpoints))
        name, _, variant = target.partition("/")
        if name not in endpoints or (variant and variant not in endpoints[name]):
            known = ", ".join(f"{e}/{v}" if v else e for e, vs in endpoints.items() for v in ["", *vs])
            raise InputError(f"--serve-check {value}: {target!r} is no endpoint or variant here; use one of {known}")
        if target in result:
            raise InputError(f"--serve-check: {target!r} is given twice; give one report per endpoint or variant")
        result[target] = Path(file)
    return result


def serving_figures(
    endpoint: str,
    variant: str | None,
    instance_type: str,
    traffic: TrafficConfig | None,
    parameters_billion: float,
    precision: str,
    serve_checks: Mapping[str, Path],
) -> ServingFigures | None:
    """The figures of one instance of `endpoint` (`variant`), by the order in the module doc; None when the
    endpoint declares no token workload and no report names it."""
    report = (serve_checks.get(f"{endpoint}/{variant}") if variant else None) or serve_checks.get(endpoint)
    if report is not None:
        return measured_figures(report)
    tokens = traffic.tokens if traffic else None
    if traffic is None or tokens is None:
        return None
    if traffic.throughput_per_instance is not None:
        return ServingFigures(
            "measured",
            traffic.throughput_per_instance * tokens.output_tokens,
            f"blueprint: {traffic.throughput_per_instance:g} requests/s x {tokens.output_tokens} output tokens",
        )
    workload = Workload(tokens.context_tokens, tokens.output_tokens, tokens.concurrency)
    return estimate_instance(parameters_billion, precision, instance_type, workload)


def variant_figures(
    spec: RealtimeEndpointConfig | AsyncEndpointConfig,
    variant: VariantConfig,
    model: InferenceModelConfig,
    checks: Mapping[str, Path],
) -> ServingFigures | None:
    """`serving_figures` of one SageMaker variant (an async endpoint's single variant has no name of its own)."""
    name = variant.name if isinstance(spec, RealtimeEndpointConfig) else None
    return serving_figures(
        spec.name, name, variant.instance_type, spec.traffic, model.parameters_billion, model.precision, checks
    )


def figure_row(name: str, figures: ServingFigures | None, hourly: float | None, rate: str) -> str:
    """One plan row: tokens/s, latency and $ per million output tokens of one instance at `hourly` ($/h)."""
    if figures is None:
        return f"  {name}: output tokens/s: no estimate (no accelerator bandwidth/FLOPs in the catalog, or no fit)"
    per_million = usd_per_million(hourly, figures.output_tokens_per_s)
    latency = ", ".join(
        f"{label} {value:,.1f} ms"
        for label, value in (("TTFT", figures.ttft_ms), ("TPOT", figures.tpot_ms))
        if value is not None
    )
    cost = f"${per_million:,.2f} per 1M output tokens ({rate})" if per_million is not None else "$/1M tokens unknown"
    return (
        f"  {name}: {figures.output_tokens_per_s:,.0f} output tokens/s per instance ({figures.source}: "
        f"{figures.detail}){'; ' + latency if latency else ''}; {cost}"
    )
