"""A real Azure Blob Storage server for the tests: Azurite, the Azure Storage emulator, on a
loopback port, from ``bash jars/fetch azurite`` (npm).

    with Azurite() as azure:
        container = azure.container()        # a new, empty container
        uri = f"az://{container}/table"      # delta-rs' Azure URI; the account is in
        azure.storage_options()              # these options, as users give theirs

Azurite serves the Blob API with the emulator's well-known account (``devstoreaccount1``) and
key, over HTTP; delta-rs reaches it at an explicit endpoint (``azure_storage_endpoint``, with
``allow_http``: ``azure_storage_use_emulator`` would send it to port 10000). It has no Data
Lake (``dfs``) endpoint, so ``abfss://`` URIs, which name one, cannot be served: the tests
write ``az://<container>/<path>``, the same store through the Blob API that delta-rs uses for
both. Containers are made with azure-storage-blob, as a user's setup script would.
"""

from __future__ import annotations

import logging
import shutil
import socket
import tempfile
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self

from spark_groups.errors import SparkGroupsError
from spark_groups.tools.checkout import jars_root
from spark_groups.tools.processes import Launcher, ManagedProcess, free_ports

log = logging.getLogger(__name__)

#: The command that installs the emulator; named by the error when it is missing.
FETCH_COMMAND = "bash jars/fetch azurite"
#: The emulator's account and key (Azurite's documented defaults, not a secret).
ACCOUNT = "devstoreaccount1"
KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azurite_program() -> Path:
    """The emulator's Blob service program, or an error saying how to install it."""
    program = jars_root() / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if not program.exists():
        raise SparkGroupsError(f"no Azurite at {program}: install it with `{FETCH_COMMAND}`")
    return program


def _listens(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Azurite(Launcher):
    """One Azurite Blob service on ``127.0.0.1`` (:attr:`endpoint`), its data in a folder of
    its own, removed by :meth:`close`."""

    def __init__(self, *, start_timeout_s: float = 60.0) -> None:
        self.start_timeout_s = start_timeout_s
        (self.port,) = free_ports(1)
        self._dir: Path | None = None
        self._process = ManagedProcess("Azurite", error=SparkGroupsError)

    @property
    def endpoint(self) -> str:
        """The account's Blob endpoint."""
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def data_dir(self) -> Path:
        """Where the emulator keeps the blobs (to look for secrets in what a run wrote)."""
        assert self._dir is not None, "Azurite was never started"
        return self._dir / "data"

    def storage_options(self) -> dict[str, str]:
        """delta-rs' options that reach this server, as a user's ``storage.*`` options."""
        return {
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": KEY,
            "azure_storage_endpoint": self.endpoint,
            "allow_http": "true",  # the emulator speaks HTTP
        }

    def container(self) -> str:
        """A new, empty container's name."""
        from azure.storage.blob import BlobServiceClient

        name = f"c{uuid.uuid4().hex[:12]}"
        connection = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};"
            f"BlobEndpoint={self.endpoint};"
        )
        BlobServiceClient.from_connection_string(connection).create_container(name)
        return name

    def start(self) -> Self:
        """Start the server and return once its port answers."""
        if self._process.running:
            return self
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="spark-groups-azurite-"))
        command = [
            str(azurite_program()), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
            "--location", str(self.data_dir), "--skipApiVersionCheck", "--loose",
            "--disableTelemetry",
        ]  # fmt: skip
        try:
            self._process.start(command, self._dir / "azurite.log")
            self._process.wait_until_ready(
                lambda: _listens(self.port),
                timeout_s=self.start_timeout_s,
                what=f"listen on port {self.port}",
            )
        except BaseException:
            self.close()
            raise
        log.info("Azurite at %s", self.endpoint)
        return self

    def stop(self) -> None:
        """Stop the server; its blobs stay for :meth:`start`."""
        self._process.stop(grace_s=10)

    def close(self) -> None:
        """Stop the server and remove its folder."""
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
