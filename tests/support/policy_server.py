"""An HTTPS server on loopback serving MTA-STS policy files (`/.well-known/mta-sts.txt`), counting requests.

    with PolicyServer(ca, "127.0.0.5", ["mta-sts.sts.test"]) as server:  # ca: tests.support.certs
        server.policies["mta-sts.sts.test"] = "version: STSv1\\nmode: enforce\\nmx: mx1.test.example\\nmax_age: 60\\n"
        ...
        assert server.requests == ["mta-sts.sts.test"]

The certificate (for the names given) comes from the test CA, so a client
trusting `ca.ca_file` (SSL_CERT_FILE) verifies it. A name without a policy
answers 404; `redirects[name]` answers 301 to that URL instead.
"""

from __future__ import annotations

import http.server
import ssl
import threading
from collections.abc import Sequence
from typing import Any

from .certs import CertificateAuthority
from .smtp_server import free_port


class PolicyServer:
    def __init__(self, ca: CertificateAuthority, host: str, names: Sequence[str]) -> None:
        self.host = host
        self.port = free_port((host,))
        self.policies: dict[str, str] = {}
        self.redirects: dict[str, str] = {}
        self.requests: list[str] = []
        self._lock = threading.Lock()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.ca.issue_cert(*names).configure_cert(context)
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                name = (self.headers.get("Host") or "").split(":")[0].lower()
                with server._lock:
                    server.requests.append(name)
                    policy = server.policies.get(name) if self.path == "/.well-known/mta-sts.txt" else None
                    redirect = server.redirects.get(name)
                if redirect is not None:
                    self.send_response(301)
                    self.send_header("Location", redirect)
                    self.end_headers()
                    return
                body = (policy or "not found\n").encode()
                self.send_response(200 if policy is not None else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
                pass

        self._server = http.server.ThreadingHTTPServer((host, self.port), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="policy-server", daemon=True)

    def __enter__(self) -> PolicyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


__all__ = ["PolicyServer"]
