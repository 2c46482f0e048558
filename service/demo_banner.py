"""`python -m service.demo_banner --wait`: the last block `./run demo` prints, once the service answers.

It says where the page is, whether a key is needed, two questions the demo's chapters answer,
how to stop, and what to do next; the service itself keeps logging above and below it."""

import argparse
import sys
import time
from pathlib import Path

import httpx

from core.config import Settings


def wait_until_serving(url: str, timeout_s: float) -> bool:
    """True once `GET /healthz` answers 200, False after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return False


def banner(settings: Settings, examples: list[str], seconds: float | None = None) -> str:
    """The block: page, key, model, examples, stop, next steps (never a secret's value)."""
    url = f"http://{settings.host}:{settings.port}"
    key = (
        "required: one of API_KEYS in .env, or a key from KEYS_FILE (Authorization: Bearer ...)"
        if settings.api_keys or settings.keys_file
        else "none (the service listens on 127.0.0.1 only; docs/api.md says how to require keys)"
    )
    model = (
        f"{settings.model_name} at {settings.openai_base_url or 'OpenAI'}"
        if settings.llm_configured
        else "none: answers quote the book (extractive). Connect one: OPENAI_* in .env, then "
        ".venv/bin/python -m service.llm check"
    )
    questions = "\n".join(f"    {question}" for question in examples)
    after = f" after {seconds:.0f} s" if seconds is not None else ""
    return f"""
  Ready{after}: {url}/   (API reference: {url}/docs)
  Key:   {key}
  Model: {model}
  Try:
{questions}
  Stop:  Ctrl+C stops the service; scripts/es-local stop stops Elasticsearch.
  More:  ./run demo --full indexes the whole book (120 chapters, about 10 min);
         your own documents: README.md, "Your own documents".
"""


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m service.demo_banner", description=__doc__)
    parser.add_argument("--wait", type=float, default=120, metavar="S", help="seconds to wait for the service")
    parser.add_argument("--examples", type=Path, help="questions the indexed documents answer, one a line")
    parser.add_argument("--started", type=float, metavar="EPOCH", help="when the demo started (for its duration)")
    args = parser.parse_args()
    settings = Settings()
    if not wait_until_serving(f"http://{settings.host}:{settings.port}", args.wait):
        print(f"the service did not answer within {args.wait:.0f} s", file=sys.stderr)
        return 1
    examples = args.examples.read_text(encoding="utf-8").split() if args.examples else []
    print(banner(settings, examples, time.time() - args.started if args.started else None), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
