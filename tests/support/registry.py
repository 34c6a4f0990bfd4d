"""A real schema registry for the tests: Apicurio Registry on a loopback port, serving
Confluent's Schema Registry API, from ``bash jars/fetch apicurio``.

    with Registry() as registry:
        client = SchemaRegistryClient(registry.client_conf())   # {"url": registry.url}
        ...
        registry.stop()    # clients now get "connection refused"
        registry.start()   # the same port and the same schemas

Apicurio 2.1.5 (jars/apicurio.pom.xml says why that one) serves the API at
``/apis/ccompat/v6``, with the paths of v7 that confluent-kafka calls. Its schemas are kept in
an H2 file in the registry's folder, so they survive :meth:`Registry.stop` and
:meth:`Registry.start`; :meth:`Registry.close` removes the folder (and the log in it).

``Registry(basic_auth=("user", "pass"))`` asks for HTTP basic auth: Apicurio 2 checks basic
credentials only against an OIDC server (it trades them for a token), so a small proxy in this
process answers at :attr:`Registry.url`, checks the ``Authorization`` header (401 otherwise) and
forwards the request to Apicurio on a port of its own (which itself asks for nothing).
"""

from __future__ import annotations

import base64
import hmac
import http.client
import json
import logging
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from spark_groups.errors import SparkGroupsError
from spark_groups.tools.checkout import jars_root
from spark_groups.tools.processes import Launcher, ManagedProcess, free_ports, java

log = logging.getLogger(__name__)

#: The command that builds the registry; named by the error when it is missing.
FETCH_COMMAND = "bash jars/fetch apicurio"

#: Where the Confluent-compatible API is, under the server's root.
API_PATH = "/apis/ccompat/v6"


def registry_jar() -> Path:
    """The registry's runnable jar (Quarkus' fast-jar), or an error saying how to build it."""
    jar = jars_root() / "apicurio" / "quarkus-app" / "quarkus-run.jar"
    if not jar.exists():
        raise SparkGroupsError(f"no Apicurio Registry at {jar}: build it with `{FETCH_COMMAND}`")
    return jar


def _answers(port: int) -> bool:
    """Whether ``GET /subjects`` on ``port`` answers 200 (straight, whatever proxy is set)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", f"{API_PATH}/subjects")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


class Registry(Launcher):
    """One Apicurio Registry process on ``127.0.0.1`` (:attr:`url`), its schemas kept across
    :meth:`stop` and :meth:`start`; with ``basic_auth`` behind a proxy that asks for it."""

    def __init__(
        self,
        basic_auth: tuple[str, str] | None = None,
        *,
        start_timeout_s: float = 120.0,
        heap: str = "256m",
    ) -> None:
        self.basic_auth = basic_auth
        self.start_timeout_s = start_timeout_s
        self.heap = heap
        #: the port of :attr:`url`; Apicurio's own is another when the proxy is in front
        self.port, backend = free_ports(2)
        self._backend_port = backend if basic_auth else self.port
        self._dir: Path | None = None  # made by the first start, removed by close
        self._process = ManagedProcess("Apicurio Registry", error=SparkGroupsError)
        self._proxy: _AuthProxy | None = None

    @property
    def url(self) -> str:
        """The API's base URL, for confluent-kafka's ``SchemaRegistryClient({"url": ...})``."""
        return f"http://127.0.0.1:{self.port}{API_PATH}"

    @property
    def log_path(self) -> Path:
        """The server's log (Quarkus' console log with an access log, and the JVM's output)."""
        assert self._dir is not None, "the registry was never started"
        return self._dir / "registry.log"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process.running

    def client_conf(self) -> dict[str, str]:
        """``SchemaRegistryClient`` settings that reach this registry, credentials included."""
        conf = {"url": self.url}
        if self.basic_auth:
            conf["basic.auth.user.info"] = ":".join(self.basic_auth)
        return conf

    def _command(self, folder: Path) -> list[str]:
        settings = {
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": self._backend_port,
            # the schemas in a file, so that they outlive the process
            "quarkus.datasource.jdbc.url": f"jdbc:h2:file:{folder / 'db' / 'registry'}",
            "quarkus.datasource.jdbc.initial-size": 1,
            "quarkus.datasource.jdbc.min-size": 1,
            "quarkus.datasource.jdbc.max-size": 8,
            "quarkus.http.access-log.enabled": "true",
            # as built (jars/fetch), so that Quarkus does not warn that it differs
            "%prod.quarkus.package.type": "fast-jar",
        }
        return [
            java("Apicurio Registry"),
            f"-Xmx{self.heap}",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            *(f"-D{key}={value}" for key, value in settings.items()),
            "-jar",
            str(registry_jar()),
        ]

    def start(self) -> Self:
        """Start the server (again, on the same port) and return once ``GET /subjects``
        answers; if it does not within ``start_timeout_s``, :meth:`close` it and raise
        :class:`SparkGroupsError` with the end of its log."""
        if self.running:
            return self
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="spark-groups-registry-"))
        try:
            self._process.start(self._command(self._dir), self.log_path)
            self._process.wait_until_ready(
                lambda: _answers(self._backend_port),
                timeout_s=self.start_timeout_s,
                what=f"answer on port {self._backend_port}",
            )
            if self.basic_auth:
                self._proxy = _AuthProxy(self.port, self._backend_port, self.basic_auth)
        except BaseException:
            self.close()
            raise
        log.info("Apicurio Registry at %s (log %s)", self.url, self.log_path)
        return self

    def stop(self) -> None:
        """Stop the server (and the proxy); its schemas stay for :meth:`start`."""
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        self._process.stop(grace_s=20)

    def close(self) -> None:
        """Stop the server and remove its folder: its schemas and its log."""
        self.stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _AuthProxy(ThreadingHTTPServer):
    """Asks for HTTP basic auth on ``port`` and forwards what passes to ``backend_port``, one
    request a connection (so that none outlives :meth:`close`)."""

    daemon_threads = True

    def __init__(self, port: int, backend_port: int, credentials: tuple[str, str]) -> None:
        super().__init__(("127.0.0.1", port), _ProxyHandler)
        self.backend_port = backend_port
        self.expected = "Basic " + base64.b64encode(":".join(credentials).encode()).decode()
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop listening (the port is free again once this returns)."""
        self.shutdown()
        self.server_close()
        self._thread.join()


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _AuthProxy

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if not hmac.compare_digest(self.headers.get("Authorization", ""), self.server.expected):
            self._reply(
                401,
                b'{"error_code":401,"message":"Unauthorized"}',
                "application/json",
                {"WWW-Authenticate": 'Basic realm="registry"'},
            )
            return
        # the body goes back as it comes, so not compressed (no Content-Encoding is passed on)
        dropped = ("host", "authorization", "accept-encoding")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
        backend = http.client.HTTPConnection("127.0.0.1", self.server.backend_port, timeout=60)
        try:
            backend.request(self.command, self.path, body=body, headers=headers)
            response = backend.getresponse()
            data = response.read()
        except OSError as exc:
            error = json.dumps({"error_code": 502, "message": str(exc)})
            self._reply(502, error.encode(), "application/json")
            return
        finally:
            backend.close()
        self._reply(response.status, data, response.getheader("Content-Type"))

    do_GET = do_POST = do_PUT = do_DELETE = _forward

    def _reply(
        self,
        status: int,
        body: bytes,
        content_type: str | None,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("registry proxy: " + format, *args)
