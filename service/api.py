"""FastAPI app: thin routers over retrieval and the workflow; one ES client per process."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from elasticsearch import Elasticsearch
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from service.config import Settings
from service.store import create_client


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.settings = settings
        app.state.es = create_client(settings)
        yield
        app.state.es.close()

    app = FastAPI(title="Agentic RAG on Elasticsearch", lifespan=lifespan)

    def get_es(request: Request) -> Elasticsearch:
        return request.app.state.es

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz(es: Elasticsearch = Depends(get_es)) -> JSONResponse:
        try:
            health = es.cluster.health(timeout="2s")
        except Exception as err:  # any transport failure means "not ready"
            return JSONResponse({"ready": False, "elasticsearch": f"unreachable at {settings.es_url}: {err}"}, 503)
        index_present = bool(es.indices.exists_alias(name=settings.es_index) or es.indices.exists(index=settings.es_index))
        ready = health["status"] in ("green", "yellow") and index_present
        return JSONResponse(
            {"ready": ready, "elasticsearch": health["status"], "index": settings.es_index, "index_present": index_present},
            200 if ready else 503,
        )

    return app
