"""``autotune dashboard``: optuna-dashboard's WSGI app served for a study's storage.

optuna-dashboard's own ``run_server`` blocks in its web framework's ``run`` and
never tells its caller the port it bound (port 0 picks a free one, as the tests
do) nor the study's page; this serves the same ``optuna_dashboard.wsgi`` app in a
threaded wsgiref server that logs no line per request and reports both.

Optuna, optuna-dashboard and the study's storage are imported inside the functions
that serve, so that importing the CLI (``autotune --help``) stays fast.
"""
from __future__ import annotations

import socketserver
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from autotune.errors import ConfigError


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # one line per request would drown the URL
        pass


@dataclass(frozen=True)
class Address:
    """Where the dashboard listens: the URL to open, a study's page if one was named."""

    host: str
    port: int
    path: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"


def dashboard_storage(*, storage: str | None, study_name: str | None,
                      studies_dir: str | Path) -> str:
    """``storage``; else the study's SQLite file; else the only one in ``studies_dir``."""
    from autotune.study import default_storage

    if storage or study_name:
        return storage or default_storage(studies_dir, study_name)
    files = sorted(Path(studies_dir).glob("*.db"))
    if len(files) != 1:
        raise ConfigError(f"{len(files)} study databases in '{studies_dir}' "
                          f"({', '.join(f.name for f in files) or 'none'}); pass --study-name "
                          "or --storage")
    return f"sqlite:///{files[0].resolve()}"


def serve(url: str, *, study_name: str | None = None, host: str = "127.0.0.1",
          port: int = 8080, on_ready: Callable[[Address], None] | None = None) -> None:
    """Serves optuna-dashboard for the storage at ``url`` until Ctrl-C (which returns);
    ``on_ready(address)`` is called once the socket is bound."""
    import optuna_dashboard

    from autotune.storage import open_storage
    from autotune.study import load_study, study_id

    storage, path = open_storage(url), "/dashboard"
    if study_name:
        study, _ = load_study(study_name, storage=url)
        path = f"/dashboard/studies/{study_id(study)}"
    try:
        server = make_server(host, port, optuna_dashboard.wsgi(storage),
                             server_class=_Server, handler_class=_Quiet)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}; "
                          "pass another --port") from exc
    if on_ready is not None:
        on_ready(Address(host, server.server_port, path))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
