"""`python -m service.mcp`: the MCP server over stdio, for an agent that starts it as a subprocess.

It loads what the HTTP service loads (settings from the environment / `.env`, the Elasticsearch
client, the embedder, the workflow) and serves the same tools (`service.http.protocols.mcp_server`).
It reads Elasticsearch with the service's own settings: whoever can start it can read those
indices directly, so it serves every base the service does. It runs no background job: the HTTP
service owns them. Logs go to stderr; stdout is the protocol.
"""

import asyncio
import logging
import sys

from core.config import Settings
from service.app import open_services
from service.http.metrics import Metrics
from service.http.protocols.mcp_server import build_mcp_server
from service.principals import Keys, load_principals


async def serve(settings: Settings) -> None:
    async with open_services(settings, Keys(load_principals(settings)), Metrics(), run_jobs=False) as services:
        await build_mcp_server(lambda: services).run_stdio_async()


def main() -> None:
    settings = Settings()
    logging.basicConfig(level=settings.log_level, stream=sys.stderr)
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
