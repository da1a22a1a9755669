"""`mlstack serve-check URL`: smoke-test an OpenAI-compatible server, then a short load sweep.

1. Smoke test: `GET /v1/models` (the model to use, unless `--model` names it) and one non-streaming
   `POST /v1/chat/completions` that must return a message.
2. Sweep: at each `--concurrency` level, that many workers send streaming chat completions (`stream: true`,
   `stream_options.include_usage`) with a fixed prompt and `max_tokens`, `--requests` per level in all. Per
   request: time to first token (first content delta), time per output token ((end - first token) / (tokens - 1),
   tokens from the final `usage` chunk, else the count of content deltas), end-to-end latency.
3. Per level: output tokens/s (all output tokens / wall time), p50/p90/p99 of TTFT, TPOT and latency, failures;
   printed as a table and written as JSON (`--out`, default `serve-check.json`), the measured counterpart of
   `mlstack advise --task infer`'s estimate.

Standard library only: the maintained benchmark clients on PyPI (aiperf 0.13, guidellm 0.8) pull in
transformers, pandas or torch, too much for a smoke test that must run anywhere the CLI does. Latency is
measured at the client, so it includes the network path to the server.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mlstack.catalog.cli_common import integer, number
from mlstack.console import render_table
from mlstack.errors import InputError

__all__ = ["Level", "RequestResult", "percentile", "register", "run_level", "smoke_test"]

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle. " * 4


class ServeCheckError(InputError):
    """The server failed the smoke test or could not be reached (one line)."""


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile `q` in [0, 100] (None for no values)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _request(url: str, body: dict[str, object] | None, api_key: str | None, timeout: float) -> urllib.request.Request:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None if body is None else json.dumps(body).encode()
    return urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")


def _open(req: urllib.request.Request, timeout: float) -> http.client.HTTPResponse:
    try:
        resp: http.client.HTTPResponse = urllib.request.urlopen(req, timeout=timeout)
        return resp
    except urllib.error.HTTPError as err:
        detail = err.read(300).decode(errors="replace").replace("\n", " ")
        raise ServeCheckError(f"{req.get_method()} {req.full_url}: HTTP {err.code} {detail}".strip()) from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", err)
        raise ServeCheckError(f"{req.get_method()} {req.full_url}: cannot connect ({reason})") from None


def smoke_test(base: str, model: str | None, api_key: str | None, timeout: float) -> str:
    """The model id the server serves (checked with one chat completion); raises ServeCheckError."""
    with _open(_request(f"{base}/v1/models", None, api_key, timeout), timeout) as resp:
        listed = [m.get("id") for m in json.load(resp).get("data", []) if isinstance(m, dict)]
    if model is None:
        if not listed:
            raise ServeCheckError(f"GET {base}/v1/models lists no model; pass --model")
        model = str(listed[0])
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}
    with _open(_request(f"{base}/v1/chat/completions", body, api_key, timeout), timeout) as resp:
        reply = json.load(resp)
    try:
        content = reply["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise ServeCheckError(f"POST {base}/v1/chat/completions: no choices[0].message.content in the reply") from None
    if not isinstance(content, str):
        raise ServeCheckError(f"POST {base}/v1/chat/completions: message content is not text")
    return model


@dataclass(frozen=True)
class RequestResult:
    ok: bool
    ttft_s: float | None = None
    latency_s: float | None = None
    output_tokens: int = 0
    error: str | None = None

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.latency_s is None or self.output_tokens < 2:
            return None
        return (self.latency_s - self.ttft_s) / (self.output_tokens - 1)


def _events(resp: http.client.HTTPResponse) -> Iterator[dict[str, object]]:
    for raw in resp:
        line = raw.decode(errors="replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        event = json.loads(payload)
        if isinstance(event, dict):
            yield event


def _one(base: str, model: str, max_tokens: int, api_key: str | None, timeout: float) -> RequestResult:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first: float | None = None
    deltas = 0
    usage: int | None = None
    try:
        with _open(_request(f"{base}/v1/chat/completions", body, api_key, timeout), timeout) as resp:
            for event in _events(resp):
                choices = event.get("choices")
                if isinstance(choices, list) and choices:
                    delta = choices[0].get("delta", {}) if isinstance(choices[0], dict) else {}
                    if isinstance(delta, dict) and delta.get("content"):
                        deltas += 1
                        first = first if first is not None else time.perf_counter()
                u = event.get("usage")
                if isinstance(u, dict) and isinstance(u.get("completion_tokens"), int):
                    usage = int(u["completion_tokens"])
    except (ServeCheckError, ValueError, OSError) as err:
        return RequestResult(False, error=str(err))
    end = time.perf_counter()
    if first is None:
        return RequestResult(False, error="stream ended without a content delta")
    return RequestResult(True, first - start, end - start, usage if usage is not None else deltas)


def _pct_ms(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": (None if (v := percentile(values, q)) is None else v * 1e3) for q in (50, 90, 99)}


@dataclass(frozen=True)
class Level:
    """The measured figures of one concurrency level."""

    concurrency: int
    results: tuple[RequestResult, ...]
    wall_s: float

    @property
    def ok(self) -> list[RequestResult]:
        return [r for r in self.results if r.ok]

    @property
    def failed(self) -> int:
        return len(self.results) - len(self.ok)

    @property
    def errors(self) -> list[str]:
        return sorted({r.error for r in self.results if r.error})[:3]

    @property
    def output_tokens_per_s(self) -> float:
        return sum(r.output_tokens for r in self.ok) / self.wall_s if self.wall_s > 0 else 0.0

    def percentiles_ms(self) -> dict[str, dict[str, float | None]]:
        ok = self.ok
        return {
            "ttft_ms": _pct_ms([r.ttft_s for r in ok if r.ttft_s is not None]),
            "tpot_ms": _pct_ms([t for r in ok if (t := r.tpot_s) is not None]),
            "latency_ms": _pct_ms([r.latency_s for r in ok if r.latency_s is not None]),
        }

    def to_json(self) -> dict[str, object]:
        ok = self.ok
        return {
            "concurrency": self.concurrency,
            "requests": len(self.results),
            "failed": self.failed,
            "errors": self.errors,
            "wall_s": self.wall_s,
            "output_tokens": sum(r.output_tokens for r in ok),
            "output_tokens_per_s": self.output_tokens_per_s,
            **self.percentiles_ms(),
        }


def run_level(
    base: str, model: str, concurrency: int, requests: int, max_tokens: int, api_key: str | None, timeout: float
) -> Level:
    """Send `requests` streaming requests over `concurrency` workers."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = tuple(pool.map(lambda _: _one(base, model, max_tokens, api_key, timeout), range(requests)))
    return Level(concurrency, results, time.perf_counter() - start)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def _p50_p99(values: dict[str, float | None]) -> str:
    return f"{_fmt(values['p50'])} / {_fmt(values['p99'])}"


def _cmd(args: argparse.Namespace) -> int:
    base = args.url.rstrip("/").removesuffix("/v1")
    if not base.startswith(("http://", "https://")):
        raise InputError(f"serve-check URL must start with http:// or https://, got {args.url!r}")
    levels = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    if not levels or any(c < 1 or c > 1024 for c in levels):
        raise InputError(
            f"--concurrency must be a comma-separated list of integers in [1, 1024], got {args.concurrency!r}"
        )
    for flag, value, top in (("--requests", args.requests, 100_000), ("--max-tokens", args.max_tokens, 100_000)):
        if not 1 <= value <= top:
            raise InputError(f"{flag} must be in [1, {top}], got {value}")
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not api_key:
        raise InputError(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    model = smoke_test(base, args.model, api_key, args.timeout)
    print(f"smoke test passed: {base} serves {model}")
    out = [run_level(base, model, c, max(args.requests, c), args.max_tokens, api_key, args.timeout) for c in levels]
    rows = [
        [
            str(lv.concurrency),
            str(len(lv.results)),
            str(lv.failed),
            _fmt(lv.output_tokens_per_s),
            *(_p50_p99(v) for v in lv.percentiles_ms().values()),
        ]
        for lv in out
    ]
    headers = ["concurrency", "requests", "failed", "out tok/s", "TTFT ms p50/p99", "TPOT ms p50/p99"]
    print(render_table([*headers, "latency ms p50/p99"], rows, right=[0, 1, 2, 3]))
    report = {"url": base, "model": model, "max_tokens": args.max_tokens, "levels": [lv.to_json() for lv in out]}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    failed = sum(lv.failed for lv in out)
    if failed:
        first = next(e for lv in out for e in lv.errors)
        print(f"FAIL: {failed} request(s) failed, e.g. {first}")
        return 1
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve-check",
        help="smoke-test an OpenAI-compatible server and measure tokens/s and latency at a few concurrencies",
        description="Smoke test (list models, one chat completion), then a short streaming load sweep.",
    )
    p.add_argument("url", help="server base URL, e.g. http://localhost:8000 (a trailing /v1 is accepted)")
    p.add_argument("--model", help="model id (default: the first one GET /v1/models lists)")
    p.add_argument("--concurrency", default="1,4,16", help="comma-separated levels (default 1,4,16)")
    p.add_argument("--requests", type=integer, default=16, help="requests per level, at least its concurrency")
    p.add_argument("--max-tokens", type=integer, default=128, help="output tokens per request (default 128)")
    p.add_argument("--timeout", type=number, default=120.0, help="seconds per HTTP request (default 120)")
    p.add_argument("--api-key-env", help="environment variable holding a bearer token (never pass it as an argument)")
    p.add_argument("--out", default="serve-check.json", help="JSON report path (default serve-check.json)")
    p.set_defaults(handler=_cmd)
