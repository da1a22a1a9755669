"""A tiny OpenAI-compatible server for tests/catalog/test_serve_check.py (run as a script, one thread per request).

`python openai_stub.py [--token-delay-ms N] [--tokens N] [--fail-chat]` binds 127.0.0.1 on a free port and
prints it on the first line of stdout. /v1/models lists "stub-model"; /v1/chat/completions answers with `tokens`
words, streamed as server-sent events (one delta per token, `token-delay-ms` apart, then a usage chunk and
[DONE]) when the request asks for `stream`, else as one JSON body. `--fail-chat` answers every chat with HTTP 500.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPTS = argparse.Namespace()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    def _json(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "stub-model", "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": "not found"})
            return
        if OPTS.fail_chat:
            self._json(500, {"error": "stub told to fail"})
            return
        n = min(int(body.get("max_tokens", 16)), OPTS.tokens)
        if not body.get("stream"):
            self._json(200, {"choices": [{"message": {"role": "assistant", "content": "hi " * n}}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for _ in range(n):
            time.sleep(OPTS.token_delay_ms / 1000)
            self._event({"choices": [{"index": 0, "delta": {"content": "hi "}}]})
        self._event({"choices": [], "usage": {"completion_tokens": n, "prompt_tokens": 10}})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event(self, event: object) -> None:
        self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        self.wfile.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--token-delay-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--fail-chat", action="store_true")
    parser.parse_args(namespace=OPTS)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    sys.stdout.close()
    server.serve_forever()


if __name__ == "__main__":
    main()
