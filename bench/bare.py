"""The HTTP ceiling: a bare Falcon app under waitress that parses and returns a small JSON body
(POST /v1/leases), and answers GET /healthz as titen does.

Run by bench/leases.py with the same waitress thread count as `titen serve`; nothing else.
"""

from __future__ import annotations

import argparse

import falcon
import waitress


class Echo:
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = req.get_media()
        resp.status = falcon.HTTP_201
        resp.media = {"data": {"resource_id": body.get("resource_id"), "ok": True}}


class Health:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"data": {"status": "ok"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args()
    app = falcon.App()
    app.add_route("/v1/leases", Echo())
    app.add_route("/healthz", Health())
    waitress.serve(
        app,
        host=args.host,
        port=args.port,
        threads=args.threads,
        ident="bare",
        connection_limit=1000,
        channel_timeout=120,
    )


if __name__ == "__main__":
    main()
