"""A Kubernetes API stub for the budget action's pool step: an HTTPS server (a self-signed certificate for
127.0.0.1, whose PEM the handler gets as the cluster CA) that serves Karpenter NodePools and NodeClaims, records each
request as the RBAC (verb, resource, name) it needs, and checks the bearer token as EKS does: a presigned STS
GetCallerIdentity URL whose SigV4 signature covers the `x-k8s-aws-id` header with the cluster's name."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PREFIX = "/apis/karpenter.sh/v1/"


def self_signed(folder: Path) -> tuple[Path, Path, str]:
    """(certificate file, key file, base64 of the certificate PEM: what EKS gives as CertificateAuthorityData)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(pem)
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file, base64.b64encode(pem).decode()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def token_problem(token: str, *, cluster: str, secret: str) -> str | None:
    """Why `token` is not an EKS token for `cluster` signed with `secret`, or None: it must be `k8s-aws-v1.` and the
    base64url (unpadded) of a GET https://sts.<region>.amazonaws.com/?Action=GetCallerIdentity URL presigned with
    SigV4 whose signed headers are host and x-k8s-aws-id, the signature checked with x-k8s-aws-id = `cluster`."""
    if not token.startswith("k8s-aws-v1."):
        return "no k8s-aws-v1. prefix"
    body = token.removeprefix("k8s-aws-v1.")
    url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    if parts.scheme != "https" or not parts.netloc.startswith("sts.") or parts.path not in ("", "/"):
        return f"not an STS URL: {url}"
    if query.get("Action") != "GetCallerIdentity" or query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        return f"not a presigned GetCallerIdentity: {query}"
    if query.get("X-Amz-SignedHeaders") != "host;x-k8s-aws-id":
        return f"signed headers {query.get('X-Amz-SignedHeaders')}"
    signature = query.pop("X-Amz-Signature")
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in sorted(query.items())
    )
    headers = f"host:{parts.netloc}\nx-k8s-aws-id:{cluster}\n"
    # botocore signs a presigned non-S3 request's empty body as its SHA-256 (SigV4Auth.payload).
    empty = hashlib.sha256(b"").hexdigest()
    canonical = "\n".join(["GET", "/", canonical_query, headers, "host;x-k8s-aws-id", empty])
    date, scope = query["X-Amz-Date"], query["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    day, region, service, _ = scope.split("/")
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), region), service), "aws4_request")
    if service != "sts" or hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest() != signature:
        return "signature does not match x-k8s-aws-id = the cluster"
    return None


@dataclass
class KubeStub:
    """The objects served and what was asked: `requests` holds (verb, resource, name or None) per request."""

    cluster: str
    secret: str
    pools: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    patches: list[tuple[str, str, Any]] = field(default_factory=list)
    fail: dict[tuple[str, str], int] = field(default_factory=dict)
    """(verb, resource) -> HTTP status to answer instead."""
    page_size: int = 1
    endpoint: str = ""
    ca_data: str = ""

    def add_pool(self, name: str, limits: dict[str, str], grace: str | None = None) -> None:
        spec: dict[str, Any] = {"limits": dict(limits)}
        if grace is not None:
            spec["template"] = {"spec": {"terminationGracePeriod": grace}}
        self.pools[name] = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": name},
            "spec": spec,
        }

    def add_claim(self, name: str, pool: str, *, deleting: bool = False) -> None:
        metadata: dict[str, Any] = {"name": name, "labels": {"karpenter.sh/nodepool": pool}}
        if deleting:
            metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
        self.claims[name] = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": metadata}


def _handler(stub: KubeStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            return

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method: str) -> None:
            auth = self.headers.get("Authorization", "")
            problem = token_problem(auth.removeprefix("Bearer "), cluster=stub.cluster, secret=stub.secret)
            if not auth.startswith("Bearer ") or problem:
                return self._answer(401, {"kind": "Status", "message": f"Unauthorized: {problem}"})
            url = urllib.parse.urlsplit(self.path)
            if not url.path.startswith(PREFIX):
                return self._answer(404, {"kind": "Status", "message": url.path})
            resource, _, name = url.path.removeprefix(PREFIX).partition("/")
            verb = {"GET": "get" if name else "list", "PATCH": "patch", "DELETE": "delete"}[method]
            stub.requests.append((verb, resource, urllib.parse.unquote(name) or None))
            if (verb, resource) in stub.fail:
                return self._answer(stub.fail[(verb, resource)], {"kind": "Status", "message": "forbidden"})
            store = {"nodepools": stub.pools, "nodeclaims": stub.claims}.get(resource)
            if store is None:
                return self._answer(404, {"kind": "Status"})
            if verb == "list":
                query = dict(urllib.parse.parse_qsl(url.query))
                key, _, value = query.get("labelSelector", "").partition("=")
                names = sorted(n for n, o in store.items() if o["metadata"].get("labels", {}).get(key) == value)
                start = int(query.get("continue") or 0)
                page = names[start : start + stub.page_size]
                more = str(start + stub.page_size) if start + stub.page_size < len(names) else ""
                return self._answer(200, {"items": [store[n] for n in page], "metadata": {"continue": more}})
            name = urllib.parse.unquote(name)
            if name not in store:
                return self._answer(404, {"kind": "Status", "reason": "NotFound"})
            if verb == "get":
                return self._answer(200, store[name])
            if verb == "patch":
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.patches.append((name, self.headers["Content-Type"], body))
                annotations = store[name]["metadata"].setdefault("annotations", {})
                annotations.update((body.get("metadata") or {}).get("annotations") or {})  # a JSON merge patch
                limits = store[name]["spec"].setdefault("limits", {})
                for key, value in body["spec"]["limits"].items():
                    if value is None:
                        limits.pop(key, None)
                    else:
                        limits[key] = value
                return self._answer(200, store[name])
            store[name]["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"  # Karpenter's finalizer holds it
            return self._answer(200, store[name])

        def do_GET(self) -> None:
            self._route("GET")

        def do_PATCH(self) -> None:
            self._route("PATCH")

        def do_DELETE(self) -> None:
            self._route("DELETE")

    return Handler


@contextmanager
def serve(stub: KubeStub, folder: Path) -> Iterator[KubeStub]:
    cert, key, stub.ca_data = self_signed(folder)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    stub.endpoint = f"https://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
