"""A throw-away S3-compatible server (S3Proxy) for tests and local runs.

S3Proxy with its file-system backend, from the jars of ``bash jars/fetch s3proxy``, on a free
loopback port with random credentials, its objects in a temporary folder
:meth:`S3Server.stop` removes. It supports conditional writes (``If-None-Match: *``), which
delta-rs needs for safe concurrent commits (docs/storage.md).

    with S3Server() as s3:
        s3.create_bucket("tables")
        options = s3.storage_options()          # for delta-rs and the storage.* options
        s3a = s3.hadoop_conf("tables")          # Spark's S3A, for s3a://tables/... checkpoints
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Self

from spark_groups.errors import SparkGroupsError
from spark_groups.tools.checkout import jars_root
from spark_groups.tools.processes import Launcher, ManagedProcess, free_ports, java, port_open

if TYPE_CHECKING:
    import pyarrow.fs as pafs

log = logging.getLogger(__name__)

#: The command that fetches the jars; named by every error about missing jars.
FETCH_COMMAND = "bash jars/fetch s3proxy"

#: The region the server answers for (S3Proxy accepts any; clients must sign with one).
REGION = "us-east-1"

#: The server's log goes to its stdout, which goes to s3proxy.log with the JVM's own output.
_LOGBACK = """\
<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %level %logger{20} %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="out"/></root>
</configuration>
"""


def s3proxy_jars_dir() -> Path:
    """Where the S3Proxy jars are: ``$SPARK_GROUPS_S3PROXY_JARS``, else ``s3proxy`` under
    :func:`~spark_groups.tools.checkout.jars_root`."""
    configured = os.environ.get("SPARK_GROUPS_S3PROXY_JARS")
    if configured:
        return Path(configured)
    return jars_root() / "s3proxy"


def _classpath() -> str:
    jars = s3proxy_jars_dir()
    if not any(jars.glob("s3proxy-*.jar")):
        raise SparkGroupsError(
            f"no S3Proxy jars in {jars}: fetch them with `{FETCH_COMMAND}` from the "
            "project's checkout (or set SPARK_GROUPS_S3PROXY_JARS to a folder that has them)"
        )
    return f"{jars}/*"


class S3Server(Launcher):
    """One S3Proxy process on ``127.0.0.1``: :attr:`endpoint`, :attr:`access_key`,
    :attr:`secret_key`, and the storage options that reach it (:meth:`storage_options`)."""

    def __init__(self, start_timeout_s: float = 60.0, heap: str = "256m") -> None:
        self.start_timeout_s = start_timeout_s
        self.heap = heap
        self.port = free_ports(1)[0]
        self.access_key = "sg" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(24)
        self._dir: Path | None = None
        self._process = ManagedProcess("S3Proxy", error=SparkGroupsError)

    @property
    def endpoint(self) -> str:
        """The server's URL, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The server's log file (warnings and errors, and the JVM's output)."""
        assert self._dir is not None, "the server was never started"
        return self._dir / "s3proxy.log"

    @property
    def data_dir(self) -> Path:
        """The folder that holds the buckets' objects (one sub-folder per bucket)."""
        assert self._dir is not None, "the server was never started"
        return self._dir / "data"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process.running

    def storage_options(self, *, conditional_put: bool = True) -> dict[str, str]:
        """delta-rs storage options for this server; with ``conditional_put`` (the default)
        commits use ``If-None-Match`` (``aws_conditional_put=etag``), the safe setting."""
        options = {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_endpoint_url": self.endpoint,
            "aws_region": REGION,
            "aws_allow_http": "true",
        }
        if conditional_put:
            options["aws_conditional_put"] = "etag"
        return options

    def hadoop_conf(self, bucket: str) -> dict[str, str]:
        """Hadoop S3A settings that reach this server for bucket ``bucket`` only
        (``fs.s3a.bucket.BUCKET.*``: endpoint, path-style access, no TLS, region, keys), for
        ``s3a://BUCKET/...`` paths in Spark (``bash jars/fetch hadoop-aws``). Give them to a
        running session with ``spark.conf.set(key, value)``, or prefix each key with
        ``spark.hadoop.`` when building one. The keys hold the credentials: never log them."""
        prefix = f"fs.s3a.bucket.{bucket.removeprefix('s3://')}."
        settings = {
            "endpoint": self.endpoint,
            "endpoint.region": REGION,
            "path.style.access": "true",
            "connection.ssl.enabled": "false",
            "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "access.key": self.access_key,
            "secret.key": self.secret_key,
        }
        return {prefix + key: value for key, value in settings.items()}

    def start(self) -> Self:
        """Start the server and wait until it accepts connections; if it does not, stop it
        (deleting its folder) and raise :class:`SparkGroupsError` with the end of its log."""
        if self.running:
            return self
        self._dir = Path(tempfile.mkdtemp(prefix="spark-groups-s3-"))
        data = self._dir / "data"
        data.mkdir()
        (self._dir / "logback.xml").write_text(_LOGBACK)
        config = self._dir / "s3proxy.conf"
        config.write_text(
            "".join(
                f"{k}={v}\n"
                for k, v in {
                    "s3proxy.endpoint": self.endpoint,
                    "s3proxy.authorization": "aws-v2-or-v4",
                    "s3proxy.identity": self.access_key,
                    "s3proxy.credential": self.secret_key,
                    "jclouds.provider": "filesystem-nio2",
                    "jclouds.identity": self.access_key,
                    "jclouds.credential": self.secret_key,
                    "jclouds.filesystem.basedir": str(data),
                }.items()
            )
        )
        config.chmod(0o600)
        self._process.start(
            [
                java("S3Proxy"),
                f"-Xmx{self.heap}",
                "-XX:TieredStopAtLevel=1",
                f"-Dlogback.configurationFile={self._dir / 'logback.xml'}",
                "-cp",
                _classpath(),
                "org.gaul.s3proxy.Main",
                "--properties",
                str(config),
            ],
            self.log_path,
        )
        try:
            self._process.wait_until_ready(
                lambda: port_open(self.port),
                timeout_s=self.start_timeout_s,
                what=f"listen on {self.endpoint}",
            )
        except BaseException:
            self.stop()
            raise
        log.info("S3Proxy listening on %s (folder %s)", self.endpoint, self._dir)
        return self

    def filesystem(self) -> pafs.S3FileSystem:
        """A pyarrow S3 file system on this server (may create buckets)."""
        import pyarrow.fs

        return pyarrow.fs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=f"127.0.0.1:{self.port}",
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
        )

    def create_bucket(self, name: str) -> str:
        """Create bucket ``name`` (no error if it exists); returns its URI ``s3://name``."""
        self.filesystem().create_dir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        """Stop the server and delete its folder (objects, configuration, log)."""
        self._process.stop(grace_s=20)
        folder, self._dir = self._dir, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            log.info("S3Proxy on %s stopped", self.endpoint)
