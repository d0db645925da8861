"""Anonymization algorithms: Mondrian, Datafly, Incognito and feedback-guided FKA, plus release metrics."""

from crowddb.anonymize.api import METHODS, anonymize
from crowddb.anonymize.generalize import Release
from crowddb.anonymize.metrics import (
    accuracy_bounds,
    accuracy_ratio,
    discernibility,
    matrix_accuracy,
    ncp,
    release_accuracy,
)

__all__ = [
    "METHODS",
    "Release",
    "accuracy_bounds",
    "accuracy_ratio",
    "anonymize",
    "discernibility",
    "matrix_accuracy",
    "ncp",
    "release_accuracy",
]
