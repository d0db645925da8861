"""Crowd platforms: the interface, the embedded simulated crowd that runs everything on a laptop, and the web crowd
(``WebCrowd``: real people on crowddb's own HIT page; needs the 'web' extra)."""

from .knowledge import KnowledgeBase
from .platform import Collected, HitBatch, Platform
from .replay import ReplayCrowd
from .simulated import SimulatedCrowd

__all__ = ["Collected", "HitBatch", "KnowledgeBase", "Platform", "ReplayCrowd", "SimulatedCrowd", "WebCrowd"]


def __getattr__(name: str):
    if name == "WebCrowd":  # imported on first use: its web server and templates are an optional extra
        try:
            from .web import WebCrowd
        except ImportError as missing:
            from ..errors import PlatformError

            raise PlatformError(f"WebCrowd needs the 'web' extra ({missing.name} is missing): "
                                "python -m pip install 'crowddb[web]'") from None
        return WebCrowd
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
