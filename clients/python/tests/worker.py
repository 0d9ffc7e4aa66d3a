"""One worker process of the Flask app (tests/apps.py's), as gunicorn's sync workers run
them: one thread serving one request after another, headers off (Flask-Limiter's default).
Each storage URI and strategy of limits is its own app under ``/NAME/STRATEGY`` (e.g.
``/twin/moving-window/login``). Prints ``ready`` once it listens.

    python tests/worker.py PORT LIMIT KEY_PREFIX NAME=STORAGE_URI..."""

from __future__ import annotations

import sys

from apps import flask_app
from werkzeug.exceptions import NotFound
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import make_server

STRATEGIES = ("fixed-window", "moving-window", "sliding-window-counter")


def main() -> None:
    port, limit, prefix = sys.argv[1:4]
    apps = {}
    for named in sys.argv[4:]:
        name, uri = named.split("=", 1)
        for s in STRATEGIES:
            app = flask_app(uri, s, limit=limit, key_prefix=f"{prefix}{name}{s}", headers_enabled=False)
            apps[f"/{name}/{s}"] = app
    server = make_server("127.0.0.1", int(port), DispatcherMiddleware(NotFound(), apps), threaded=False)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
