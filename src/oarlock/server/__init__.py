"""``oarlock serve``: an HTTP API (and, with it, a browser inbox) over the run database,
with API tokens, roles and tenants (``pip install 'oarlock[server]'``)."""

from oarlock.server._app import ServerSettings, create_app

__all__ = ["ServerSettings", "create_app"]
