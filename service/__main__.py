"""`python -m service`: serve the HTTP API (settings from the environment / `.env`)."""

import argparse
import logging

import uvicorn

from core.config import Settings
from service.app import create_app
from service.http import slow_clients


def main() -> None:
    settings = Settings()
    parser = argparse.ArgumentParser(prog="python -m service", description=__doc__)
    parser.add_argument("--host", default=settings.host)
    parser.add_argument("--port", type=int, default=settings.port)
    args = parser.parse_args()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("elastic_transport").setLevel(logging.WARNING)  # one INFO line per ES request otherwise
    print(f"serving on http://{args.host}:{args.port}/  (index alias {settings.es_index!r})", flush=True)
    bound = settings.model_copy(update={"host": args.host, "port": args.port})  # the Host check allows the bound name
    uvicorn.run(
        create_app(bound),
        host=args.host,
        port=args.port,
        log_level=settings.log_level.lower(),
        timeout_graceful_shutdown=10,  # open answer streams do not hold Ctrl-C for long
        http=slow_clients.protocol(settings.header_timeout_s),  # slowloris: headers have a deadline
    )


if __name__ == "__main__":
    main()
