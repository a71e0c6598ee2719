"""The placement benchmark's own ceiling: endpoints that do nothing but answer like the
scheduler. ``bench.scheduler_place`` calls it in-process (httpx's ASGI transport) and,
for the real-HTTP ceiling, as a server of its own on the scheduler's uvicorn settings:

    python -m bench.trivial_app --port 28600
"""

from __future__ import annotations

import argparse
import uuid

import uvicorn
from fastapi import FastAPI


def trivial_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/placements", status_code=201)
    async def place(body: dict[str, object]) -> dict[str, str]:
        return {"id": uuid.uuid4().hex}

    @app.delete("/v1/placements/{placement_id}")
    async def release(placement_id: str) -> dict[str, str]:
        return {"id": placement_id}

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    # As fairlane_scheduler.__main__ serves: uvloop, httptools (uvicorn's default when
    # installed), no access log (the scheduler's runs at error level).
    config = uvicorn.Config(
        trivial_app(), host="127.0.0.1", port=args.port, loop="uvloop", log_level="error"
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
