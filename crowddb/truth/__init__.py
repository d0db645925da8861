"""Truth inference (categorical and numeric) and local-DP perturbation of crowd answers.

Methods (``METHODS``, ``get_method(name)``), each one small class with ``fit(objects, sources, values)`` /
``fit_frame(df, object=, source=, value=)`` and results ``truths_``, ``confidences_``, ``source_weights_``, ``n_iter_``:

* categorical: 'mv' majority vote, 'ds' Dawid-Skene, 'one_coin' one-coin Dawid-Skene, 'glad' GLAD, 'zencrowd'
  ZenCrowd, 'crh_categorical' CRH with 0-1 loss ('crh' on labels in ``discover``);
* numeric: 'mean', 'median', 'crh' (loss='squared'|'absolute'), 'catd', 'gtm', 'ti' (LDP paper Algorithm 1).

Value kinds: strings, booleans and categoricals are labels; floats are numbers; integers are labels for a
categorical method and numbers for a numeric one, and ``method='auto'`` treats integers as labels when they take at
most ``MAX_AUTO_CATEGORIES`` (10) distinct values. A categorical method refuses non-integral numbers; a numeric method
refuses text. NULL/NaN values raise ``ArgumentError`` unless ``dropna=True`` (then an object left with no answers
raises); inf always raises. Duplicate (object, source) answers keep the last one. A source with a single answer is
kept: its weight is estimated from that answer (EM methods clip probabilities, CRH/CATD floor the loss, CATD's
chi-square quantile shrinks it), so it never makes a result infinite or NaN.
"""

from crowddb.truth import adaptive, catd, crh, dawid_skene, glad, gtm, voting, zencrowd  # noqa: F401  (register)
from crowddb.truth.adaptive import StopState, WorkerModel, predict_assignments, stopping_rule
from crowddb.truth.base import ALIASES, MAX_AUTO_CATEGORIES, METHODS, Answers, TruthMethod, encode_answers, get_method
from crowddb.truth.catd import CATD
from crowddb.truth.crh import CRH, CRHCategorical, SigmaWeighted
from crowddb.truth.dawid_skene import DawidSkene, OneCoinDawidSkene
from crowddb.truth.discover import AUTO_METHODS, TruthResult, discover, resolve_method
from crowddb.truth.glad import GLAD
from crowddb.truth.gtm import GTM
from crowddb.truth.ldp import PERTURBATIONS, perturb
from crowddb.truth.voting import MajorityVote, Mean, Median
from crowddb.truth.zencrowd import ZenCrowd

__all__ = [
    "ALIASES",
    "AUTO_METHODS",
    "CATD",
    "CRH",
    "GLAD",
    "GTM",
    "MAX_AUTO_CATEGORIES",
    "METHODS",
    "PERTURBATIONS",
    "Answers",
    "CRHCategorical",
    "DawidSkene",
    "MajorityVote",
    "Mean",
    "Median",
    "OneCoinDawidSkene",
    "SigmaWeighted",
    "StopState",
    "TruthMethod",
    "TruthResult",
    "WorkerModel",
    "ZenCrowd",
    "discover",
    "encode_answers",
    "get_method",
    "perturb",
    "predict_assignments",
    "resolve_method",
    "stopping_rule",
]
