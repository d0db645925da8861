"""The HIT web page real people answer: a marketplace in SQLite (``Market``), a Starlette app serving the worker
and requester pages (``create_app``; what the requester page shows: ``report``), and the platform crowddb publishes
to (``WebCrowd``)."""

from .market import Market
from .platform import WebCrowd

__all__ = ["Market", "WebCrowd"]
