"""`python -m service` (the console script's entry point) serves and prints its URL."""

import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.service_process import free_port
from tests.conftest import subprocess_env


def test_python_m_service_prints_the_url_and_serves(es_url: str, tmp_path: Path) -> None:
    port = free_port()
    env = subprocess_env(ES_URL=es_url, ES_INDEX="test-main-missing", LOG_LEVEL="WARNING")
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith(f"serving on http://127.0.0.1:{port}/")
        deadline = time.monotonic() + 60
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, (
                    process.stderr.read() if process.stderr else ""
                )
                time.sleep(0.3)
        assert response.json() == {"status": "ok"}
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz")
        assert ready.status_code == 503 and ready.json()["index"]["name"] == "test-main-missing"
    finally:
        process.terminate()
        process.wait(30)  # uvicorn shuts down gracefully, then re-raises SIGTERM as its exit status
