"""An instance-metadata stand-in for the host agent installer's tests: IMDSv2 only (a GET without the token a PUT
to /latest/api/token returned gets 401, as on an instance whose launch template requires tokens), serving the
paths the installer's failure report reads; and, for the report's PutMetricData POST (MLSTACK_MONITORING_ENDPOINT
set to the same address), a recorder of what it received."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "imds-token"
INSTANCE_ID = "i-0123456789abcdef0"
CREDENTIALS = {
    "AccessKeyId": "AKIAIOSFODNN7EXAMPLE",
    "SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "Token": "session/token+with=odd/characters",
}
PATHS = {
    "/latest/meta-data/instance-id": INSTANCE_ID,
    "/latest/meta-data/placement/region": "us-east-1",
    "/latest/meta-data/iam/security-credentials/": "node-role",
    "/latest/meta-data/iam/security-credentials/node-role": json.dumps(CREDENTIALS),
}


@dataclass(frozen=True)
class Post:
    """One POST as the stand-in received it: path, headers (as sent) and body."""

    path: str
    headers: dict[str, str]
    body: bytes


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def _reply(self, status: int, body: str = "") -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_PUT(self) -> None:
        ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        self._reply(200, TOKEN) if ok else self._reply(400)

    def do_GET(self) -> None:
        if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
            self.server.without_token += 1
            self._reply(401)
            return
        body = PATHS.get(self.path)
        self._reply(404) if body is None else self._reply(200, body)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.posts.append(Post(self.path, dict(self.headers.items()), body))
        self._reply(200, "<PutMetricDataResponse/>")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    without_token = 0

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.posts: list[Post] = []


@contextmanager
def imds() -> Iterator[tuple[str, _Server]]:
    """The stand-in's base URL (for MLSTACK_IMDS and MLSTACK_MONITORING_ENDPOINT) and the server (its
    `without_token` count, its `posts`)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
