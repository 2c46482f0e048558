"""A recording proxy between a real Open WebUI and the service: every request body Open WebUI sends
to `/v1/chat/completions` (and `/v1/embeddings`) is written to a folder, then forwarded unchanged;
the service's answer goes back unchanged (streams included).

    python -m bench.openwebui_record --service http://127.0.0.1:8000 --port 8001 --out /tmp/owui-bodies

Point Open WebUI's OpenAI connection at `http://127.0.0.1:8001/v1`. `bench/openwebui_drive.py`
starts this proxy itself; tests/fixtures/openwebui/ holds the bodies it recorded.
"""

import argparse
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}


def recording_app(service: str, out: Path) -> Starlette:
    """The proxy: `/v1/...` forwarded to `service`, POST bodies kept as `NNN-<path>.json` in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    numbers = itertools.count(len(list(out.glob("*.json"))) + 1)
    upstream = httpx.AsyncClient(base_url=service, timeout=600)

    async def forward(request: Request) -> Response:
        body = await request.body()
        if request.method == "POST" and body:
            name = request.url.path.strip("/").replace("/", "_")
            (out / f"{next(numbers):03d}-{name}.json").write_text(
                json.dumps(json.loads(body), ensure_ascii=False, indent=1), encoding="utf-8"
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        sent = upstream.build_request(request.method, request.url.path, content=body, headers=headers)
        answer = await upstream.send(sent, stream=True)

        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in answer.aiter_raw():
                yield chunk
            await answer.aclose()

        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP | {"content-encoding"}}
        return StreamingResponse(chunks(), status_code=answer.status_code, headers=kept)

    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST", "DELETE", "PUT"])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--service", default="http://127.0.0.1:8000")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    uvicorn.run(recording_app(args.service, args.out), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
