"""crowddb: a crowd database on DuckDB.

Entry points (each two hops from here):
- ``connect`` -> ``session.CrowdDB``: SQL with human operators (``udf``, ``operators.human``) and the table
  functions TRUTH_DISCOVER, PRIVATE_SYNTH, ANONYMIZE (``operators.table_functions``), planned by ``planner``.
- What is stored (runs, HITs, answers, payments, releases, column roles): ``store``; DataFrames named in SQL:
  ``replacement``.
- Algorithms without SQL: ``anonymize`` (Mondrian, FKA, Datafly, Incognito), ``truth`` (truth inference + LDP),
  ``synth`` (PrisCrowd), ``crowd`` (platform interface, simulated crowd).
"""

from . import datasets, errors
from .crowd import Platform, SimulatedCrowd
from .errors import CrowdDBError
from .session import CrowdDB, QueryPlan, connect
from .udf import HumanOperator

__version__ = "0.1.0"

__all__ = [
           "CrowdDB",
           "CrowdDBError",
           "HumanOperator",
           "Platform",
           "QueryPlan",
           "SimulatedCrowd",
           "__version__",
           "connect",
           "datasets",
           "errors",
]
