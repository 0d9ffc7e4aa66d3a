"""One worker process of the Flask app (tests/apps.py's), as gunicorn's sync workers run
them: one thread serving one request after another, headers off (Flask-Limiter's default).
Each strategy of limits is its own app under its name (``/moving-window/login``…). Prints
``ready`` once it listens.

    python tests/worker.py PORT STORAGE_URI LIMIT KEY_PREFIX"""

from __future__ import annotations

import sys

from apps import flask_app
from werkzeug.exceptions import NotFound
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import make_server

STRATEGIES = ("fixed-window", "moving-window", "sliding-window-counter")


def main() -> None:
    port, uri, limit, prefix = sys.argv[1:5]
    apps = {
        f"/{s}": flask_app(uri, s, limit=limit, key_prefix=f"{prefix}{s}", headers_enabled=False) for s in STRATEGIES
    }
    server = make_server("127.0.0.1", int(port), DispatcherMiddleware(NotFound(), apps), threaded=False)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
