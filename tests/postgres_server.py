"""A throwaway PostgreSQL server for tests: Debian's binaries, a temporary data directory, loopback only.

PostgreSQL refuses to run as root, so as root (CI) the server runs as the `postgres` user that Debian's
package creates."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass


class ServerUnavailable(RuntimeError):
    """No PostgreSQL server can be started here."""


def _bin_dir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[-3]))
    if found:
        return os.path.dirname(found[-1])
    on_path = shutil.which("pg_ctl")
    if on_path:
        return os.path.dirname(os.path.realpath(on_path))
    raise ServerUnavailable("no pg_ctl: install Debian's postgresql package (apt-get install postgresql)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    """A running server; `database()` makes a fresh database on it and returns its SQLAlchemy URL."""

    directory: str
    port: int
    as_user: list[str]
    bin_dir: str

    @classmethod
    def start(cls) -> PostgresServer:
        bin_dir = _bin_dir()
        directory = tempfile.mkdtemp(prefix="autotune-pg-")
        as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                shutil.chown(directory, "postgres")
            except LookupError:
                shutil.rmtree(directory)
                raise ServerUnavailable(
                    "running as root and there is no 'postgres' user to run the server as"
                ) from None
            as_user = ["runuser", "-u", "postgres", "--"]
        server = cls(directory, _free_port(), as_user, bin_dir)
        data = os.path.join(directory, "data")
        try:
            server._run("initdb", "-D", data, "-U", "autotune", "-A", "trust", "--no-sync", "-E", "UTF8")
            options = (
                f"-p {server.port} -k {directory} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
            )
            server._run(
                "pg_ctl", "-D", data, "-o", options, "-l", os.path.join(directory, "log"), "-w", "-t", "60", "start"
            )
        except ServerUnavailable:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return server

    def _run(self, tool: str, *args: str) -> None:
        try:
            subprocess.run(
                [*self.as_user, os.path.join(self.bin_dir, tool), *args], check=True, capture_output=True, text=True
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or ""
            log = os.path.join(self.directory, "log")
            if os.path.exists(log):
                with open(log) as f:
                    detail += f.read()[-2000:]
            raise ServerUnavailable(f"{tool} failed: {exc}\n{detail}") from exc

    def url(self, database: str = "postgres") -> str:
        """The URL of a database on this server, in the form README documents (the `postgres` extra's driver)."""
        return f"postgresql://autotune@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database's URL."""
        from sqlalchemy import create_engine, text

        name = f"test_{uuid.uuid4().hex[:12]}"
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))  # a name made here, not from input
        engine.dispose()
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", os.path.join(self.directory, "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
