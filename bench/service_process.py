"""`python -m service` in a process of its own, on a free port, for benchmarks and restart tests.

They talk to it over HTTP as a client would, so the client's work never shares the service's
interpreter, and a test can SIGKILL it mid-job. Its output goes to a log file, whose tail is
in the error when it does not come up.
"""

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    """A 127.0.0.1 port nothing listens on (it was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServiceProcess:
    """`python -m service --port <free>` run in `cwd` with exactly `env`, until `stop()` or `kill()`.

    `start()` returns once `ready_path` answers 200 (`/healthz`: up; `/readyz`: the index and the
    embedder agree too); each start takes a new port and appends to `log`.
    """

    def __init__(
        self, env: dict[str, str], cwd: Path, log: Path, *, ready_path: str = "/healthz", timeout_s: float = 180
    ) -> None:
        self.env, self.cwd, self.log_path = env, cwd, log
        self.ready_path, self.timeout_s = ready_path, timeout_s
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "service", "--port", str(port)],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                if httpx.get(f"{self.url}{self.ready_path}", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the service at {self.url} did not come up; its log ends:\n{self.log()}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all, as a crash or a lost machine."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 60 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-5000:] if self.log_path.exists() else ""
