"""`python -m service.mcp`: the MCP server over stdio, for an agent that starts it as a subprocess.

It loads what the HTTP service loads (settings from the environment / `.env`, the Elasticsearch
client, the embedder, the workflow) and serves the same tools (`service.protocols.mcp_server`).
It reads Elasticsearch with the service's own settings: whoever can start it can read those
indices directly, so it serves every base the service does. Logs go to stderr; stdout is the protocol.
"""

import asyncio
import logging
import sys

from core.config import Settings
from service.api import create_app


async def serve(settings: Settings) -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await app.state.mcp.run_stdio_async()


def main() -> None:
    settings = Settings()
    logging.basicConfig(level=settings.log_level, stream=sys.stderr)
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
