"""Crowd platforms: the interface, and the embedded simulated crowd that runs everything on a laptop."""

from .knowledge import KnowledgeBase
from .platform import Collected, HitBatch, Platform
from .simulated import SimulatedCrowd

__all__ = ["Collected", "HitBatch", "KnowledgeBase", "Platform", "SimulatedCrowd"]
