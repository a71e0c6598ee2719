"""Apache Kafka's binary release, as scripts/kafka.sh meets it: an unpacked KAFKA_HOME,
or a mirror serving ``<version>/kafka_2.13-<version>.tgz`` and its ``.sha512``."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import io
import os
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.servers import ROOT

KAFKA_SH = ROOT / "scripts" / "kafka.sh"

#: What bin/kafka-server-start.sh of a release does (kafka.sh runs the jars itself).
_START_SCRIPT = '#!/bin/bash\nexec "$(dirname "$0")/kafka-run-class.sh" kafka.Kafka "$@"\n'


def kafka_sh(
    *args: str, env: dict[str, str], timeout_s: float = 180
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KAFKA_SH), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )


def lay_out_release(home: Path, version: str, jars: dict[str, bytes] | Path) -> Path:
    """``home`` laid out as Apache's kafka_2.13-<version> release: bin/, config/, libs/.

    ``jars`` is a directory of real jars to copy into libs/ (the ones kafka.sh caches
    for its Maven path), or name -> bytes for jars that only need to be there.
    """
    (home / "bin").mkdir(parents=True)
    (home / "config").mkdir()
    (home / "libs").mkdir()
    for script in ("kafka-server-start.sh", "kafka-run-class.sh", "kafka-storage.sh"):
        (home / "bin" / script).write_text(_START_SCRIPT)
        (home / "bin" / script).chmod(0o755)
    (home / "config" / "server.properties").write_text("# the release's sample config\n")
    if isinstance(jars, Path):
        for jar in jars.glob("*.jar"):
            shutil.copy(jar, home / "libs" / jar.name)
    else:
        for name, data in jars.items():
            (home / "libs" / name).write_bytes(data)
    return home


def fake_jars(version: str) -> dict[str, bytes]:
    return {f"kafka_2.13-{version}.jar": b"PK\x05\x06" + bytes(18), "kafka-clients.jar": b"PK"}


def release_tarball(version: str, jars: dict[str, bytes]) -> bytes:
    """kafka_2.13-<version>.tgz with a release's layout."""
    buf, name = io.BytesIO(), f"kafka_2.13-{version}"
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, data in {
            f"{name}/bin/kafka-server-start.sh": _START_SCRIPT.encode(),
            f"{name}/config/server.properties": b"# sample\n",
            **{f"{name}/libs/{jar}": content for jar, content in jars.items()},
        }.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o755 if path.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def apache_sha512(filename: str, data: bytes) -> str:
    """The ``.sha512`` file as Apache publishes it (``gpg --print-md SHA512``: upper-case
    hex in groups of 8, wrapped, after the file name)."""
    digest = hashlib.sha512(data).hexdigest().upper()
    groups = [digest[i : i + 8] for i in range(0, 128, 8)]
    pad = " " * (len(filename) + 2)
    lines = [" ".join(groups[i : i + 6]) for i in range(0, len(groups), 6)]
    return f"{filename}: " + f"\n{pad}".join(lines) + "\n"


@contextlib.contextmanager
def mirror(root: Path) -> Iterator[str]:
    """An HTTP server for ``root`` (laid out as Apache's kafka/ directory: <version>/…);
    its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args: object) -> None:
        pass


def path_without(command: str, bin_dir: Path) -> str:
    """A PATH with every command of this one but ``command`` (linked into ``bin_dir``)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            target = bin_dir / entry.name
            runnable = entry.is_file() and os.access(entry.path, os.X_OK)
            if runnable and entry.name != command and not target.exists():
                target.symlink_to(entry.path)
    return str(bin_dir)
