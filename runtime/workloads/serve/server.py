"""SageMaker real-time inference server on the OpenVINO runtime (the container contract: port 8080,
`GET /ping` answers 200 once the model is loaded, `POST /invocations` answers predictions).

Requests: `application/json` `{"instances": [[f1, f2, ...], ...]}` or `text/csv` (one row per line).
Response: `{"predictions": [class, ...], "outputs": [[...], ...]}`. The model is the OpenVINO IR
`model.xml` (+ `model.bin`) in MODEL_DIR (SageMaker unpacks model.tar.gz to /opt/ml/model). Standard library
HTTP only: one infer request per HTTP request, so concurrent requests do not share OpenVINO state.
Reference: "Use Your Own Inference Code with Hosting Services", Amazon SageMaker Developer Guide.
"""

from __future__ import annotations

import json
import os
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

MAX_BODY = 6 * 1024 * 1024
"""SageMaker real-time invocation payloads are at most 6 MB."""


class BadRequestError(ValueError):
    pass


def decode(body: bytes, content_type: str) -> np.ndarray:
    kind = content_type.split(";")[0].strip().lower()
    try:
        if kind == "application/json":
            rows = json.loads(body)["instances"]
        elif kind == "text/csv":
            rows = [[float(v) for v in line.split(",")] for line in body.decode().splitlines() if line.strip()]
        else:
            raise BadRequestError(f"unsupported content type {kind!r}; use application/json or text/csv")
        x = np.asarray(rows, dtype=np.float32)
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
        if isinstance(err, BadRequestError):
            raise
        raise BadRequestError(f"cannot read the request body as {kind}: {err}") from err
    if x.ndim != 2 or x.shape[0] == 0:
        raise BadRequestError(f"expected a non-empty 2-D batch of rows, got shape {list(x.shape)}")
    return x


class Model:
    def __init__(self, model_dir: Path) -> None:
        self.compiled = ov.Core().compile_model(model_dir / "model.xml", "CPU")
        self.features = self.compiled.input(0).get_partial_shape()[1].get_length()

    def predict(self, x: np.ndarray) -> dict[str, Any]:
        if x.shape[1] != self.features:
            raise BadRequestError(f"each row needs {self.features} features, got {x.shape[1]}")
        out = self.compiled.create_infer_request().infer([x])[self.compiled.output(0)]
        return {"predictions": np.argmax(out, axis=1).tolist(), "outputs": out.tolist()}


def make_handler(model: Model) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/ping":
                self._send(HTTPStatus.OK, {"status": "ok"})
            else:
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            if self.path != "/invocations":
                self._send(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})
                return
            length = int(self.headers.get("Content-Length", "0"))
            if length > MAX_BODY:
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body over {MAX_BODY} bytes"})
                return
            try:
                x = decode(self.rfile.read(length), self.headers.get("Content-Type", "application/json"))
                self._send(HTTPStatus.OK, model.predict(x))
            except BadRequestError as err:
                self._send(HTTPStatus.BAD_REQUEST, {"error": str(err)})

        def log_message(self, format: str, *args: Any) -> None:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    return Handler


def serve(model_dir: Path, port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    return ThreadingHTTPServer((host, port), make_handler(Model(model_dir)))


def main(argv: list[str] | None = None) -> int:
    # SageMaker runs the image as `<entrypoint> serve`; the argument is accepted and ignored.
    del argv
    server = serve(Path(os.environ.get("MODEL_DIR", "/opt/ml/model")), int(os.environ.get("PORT", "8080")))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
