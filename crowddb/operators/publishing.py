"""What a human operator may show the crowd: the answers it may give, the published text of each row (QIs generalized
by the anonymizer, kanon-crowd-db §2.2), FKA's crowd callback, and what the simulated crowd knows.

Nothing here buys: FKA's callback is handed ``buy``, which turns published text into one answer per row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..crowd import KnowledgeBase
from ..errors import ArgumentError, PrivacyError
from ..privacy import serve
from ..privacy.serve import Served
from ..udf import HumanOperator
from .columns import TRUTH

if TYPE_CHECKING:  # human.py imports this module
    from .human import HumanInput

Buy = Callable[[pd.DataFrame, KnowledgeBase | None], np.ndarray]  # published rows -> one answer each


def render(values: pd.Series) -> pd.Series:
    """Published text of a column: integers without '.0', NULL shown as '*' (nothing known)."""
    if pd.api.types.is_float_dtype(values) and values.dropna().mod(1).eq(0).all():
        out = values.astype("Int64").astype(str)
    else:
        out = values.astype(str)
    return out.where(values.notna(), "*")


def answer_domain(op: HumanOperator, frame: pd.DataFrame) -> tuple[str, ...] | None:
    """The answers a worker may give: None for pick-a-row (group) operators; else the definition's list.

    Never the values of the rows asked about: a HIT over people all of one occupation would list that one occupation
    (issue 24). A definition whose domain is its input's ground truth reaches here resolved to every value of the
    stored ground-truth column (``crowddb.privacy.selection.with_answer_domain``, which the planner applies); one left
    unresolved is refused."""
    if op.kind == "group":
        return None
    if isinstance(op.domain, tuple):
        if len(set(op.domain)) < 2:
            raise ArgumentError(f"{op.name}: the answer domain needs at least two answers")
        return op.domain
    if TRUTH not in frame:
        raise ArgumentError(f"{op.name}: its answer domain comes from the ground-truth column, and the "
                            "input has none; declare a ground_truth column or pass domain := [...]")
    raise ArgumentError(f"{op.name}: its answer domain is every value of the stored ground-truth column, which crowddb "
                        "could not tell for this input; pass domain := [...] (the rows asked about never supply "
                        "it: workers would learn their values from the choices)")


def knowledge(frame: pd.DataFrame, raw: pd.DataFrame) -> KnowledgeBase | None:
    """What the simulated crowd knows about the rows ``raw`` (of the input ``frame``): their ground truth."""
    if TRUTH not in frame:
        return None
    truth = frame[TRUTH].astype(object).where(frame[TRUTH].notna(), None)
    return KnowledgeBase(raw, truth.astype(str).to_numpy(dtype=object))


class Publisher:
    """The release of one operator call: its published columns as text, QIs generalized to k-anonymous groups.

    ``fka_estimate`` (estimating: the synthetic tuples FKA would buy) and ``fka_tuples`` (those it asked about) are
    what explain() says about FKA's sampling."""

    def __init__(self, call: HumanInput, *, estimating: bool, signature: str, rng: np.random.Generator,
                 connection_seed: int | None, buy: Buy, domain: tuple[str, ...] | None,
                 served: Callable[[], Served | None] | None = None,
                 shown_before: Callable[[], int] | None = None) -> None:
        self.call, self.op = call, call.op
        self.estimating, self.signature, self.rng, self.connection_seed = estimating, signature, rng, connection_seed
        self.buy, self.domain = buy, domain
        self.served = served  # the safe release of these rows when some were shown before (privacy.serve)
        self.shown_before = shown_before  # how many of these rows an earlier release showed
        self.fka_estimate = 0
        self.fka_tuples = 0

    def release(self) -> tuple[pd.DataFrame, dict[str, Any] | None]:
        """The published columns as text, QIs generalized to k-anonymous groups (kanon-crowd-db §2.2)."""
        call, op = self.call, self.op
        raw = call.frame[call.published]
        if not call.quasi_identifiers:  # (an unknown anonymizer was already refused by the definition)
            return raw.apply(render), None
        if op.anonymizer == "none":
            raise PrivacyError(f"{op.name}: anonymizer 'none' is only allowed when no quasi-identifier is published; "
                               f"{call.quasi_identifiers} are quasi-identifiers")
        shown = self._persisted(raw)
        if shown is not None:
            return shown
        if len(raw) < int(op.k):
            raise ArgumentError(
                f"{op.name}: its input has {len(raw)} rows, fewer than k={int(op.k)}, so no group of k rows can hide "
                f"them (a WHERE or LIMIT leaves the operator only the rows it asks about); ask about at least "
                f"{int(op.k)} rows or pass a smaller k := ...")
        if op.anonymizer == "fka" and not self.estimating:
            shown = self.shown_before() if self.shown_before is not None else 0
            if shown:  # rows crowddb cannot tie to their table: refused before FKA's samples are bought, not after
                raise PrivacyError(
                    f"{op.name}: {shown} of its {len(raw)} rows were shown by an earlier release; FKA would buy "
                    "synthetic samples for a new partition whose boxes cross the earlier ones, which the guard of "
                    "k-anonymity across releases refuses. Nothing was bought. Use anonymizer := 'mondrian' with the "
                    "earlier release's k (its boxes are shown again), or ask about rows no release has shown")
        release = self._anonymize(raw)
        table = release.table[call.published].copy()
        for col in call.published:
            if col not in call.quasi_identifiers:
                table[col] = render(raw[col])
        return table.astype(str), release.metrics

    def _anonymize(self, raw: pd.DataFrame, frame: pd.DataFrame | None = None) -> Any:
        """``raw`` anonymized afresh by the call's anonymizer (explain(): FKA estimated as Mondrian's release plus
        the samples it would buy: the raw samples and their cell-generalized copies, sample_ratio of the rows each);
        ``frame``: the input rows ``raw`` comes from (what the simulated crowd knows), the call's by default."""
        from ..anonymize import anonymize  # the algorithm layer

        call, op = self.call, self.op
        options: dict[str, Any] = {}
        method = op.anonymizer
        if method == "fka" and self.estimating:
            self.fka_estimate += 2 * max(2, round(float(op.sample_ratio) * len(raw)))
            method = "mondrian"
        elif method == "fka":
            options.update(ask=self._fka_ask(raw, call.frame if frame is None else frame),
                           sample_ratio=float(op.sample_ratio), cell_limit=int(op.cell_limit))
        if call.shared:  # group operators: QIs every row of a group shares are generalized per group
            options["shared"] = list(call.shared)
        return anonymize(raw, list(call.quasi_identifiers), int(op.k), method=method, kinds=dict(call.kinds) or None,
                         seed=self._anonymizer_rng(raw), **options)

    def _persisted(self, raw: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]] | None:
        """Rows shown before, released safely (``crowddb.privacy.serve``): each joint class whole, in the box an
        earlier release showed it in where that box fits (the table's persisted partition: the same items, served
        from the answers on record), else in one box over its rows (merged with neighbours for a larger k, over
        added quasi-identifiers); rows no release showed (inserted since) in classes of their own, at least k new
        rows each (the call's anonymizer over the new rows). None: no row was shown before, anonymize afresh."""
        served = self.served() if self.served is not None else None
        if served is None:
            return None
        call = self.call
        try:
            shown, metrics = serve.labels(
                served, raw, list(call.quasi_identifiers), dict(call.kinds), int(self.op.k),
                lambda new: self._anonymize(raw[new].reset_index(drop=True), call.frame[new].reset_index(drop=True)))
        except serve.Refused as refused:
            raise PrivacyError(f"{self.op.name}: {refused.reason}. Nothing was published. {refused.advice}") from None
        table = raw.apply(render).astype(object)
        for name in shown.columns:
            table[name] = shown[name].to_numpy(dtype=object)
        return table[call.published].astype(str), metrics

    def _anonymizer_rng(self, raw: pd.DataFrame) -> np.random.Generator:
        """The anonymizer's randomness (FKA's synthetic samples): with the call's seed, the run's generator as always;
        else a generator seeded by a hash of the input, the call's parameters and the connection's seed if any, so a
        rerun draws the same samples and buys nothing twice."""
        if self.call.seed is not None:
            return self.rng
        op = self.op
        digest = hashlib.sha256(self.signature.encode())
        digest.update(json.dumps([int(op.k), op.anonymizer, float(op.sample_ratio), int(op.cell_limit),
                                  list(self.call.quasi_identifiers), self.connection_seed], default=str).encode())
        digest.update(pd.util.hash_pandas_object(raw, index=False).to_numpy().tobytes())
        return np.random.default_rng(int.from_bytes(digest.digest()[:16], "little"))

    def _fka_ask(self, raw: pd.DataFrame, frame: pd.DataFrame) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        """FKA's crowd callback: publish synthetic QI boxes as paid HITs of this operator (kanon-crowd-db §4.1, §4.3).

        ``ask(lo, hi)`` gets boxes in the anonymizer's numeric coding; each box is shown as its range / value-set
        labels (a raw synthetic sample has lo == hi), bought like any other item, and aggregated to one answer."""
        from ..anonymize.encoding import encode
        from ..anonymize.fka import box_labels

        if self.op.kind != "tuple":
            raise ArgumentError(f"{self.op.name}: anonymizer 'fka' needs a per-tuple question; use 'mondrian' for "
                                "group operators")
        qis = list(self.call.quasi_identifiers)
        enc = encode(raw, qis, dict(self.call.kinds) or None)
        known = knowledge(frame, raw[qis])
        domain = pd.Index(self.domain)

        def ask(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
            answers = self.buy(box_labels(enc, lo, hi), known)
            self.fka_tuples += len(lo)
            return domain.get_indexer(answers).astype(np.int64)

        return ask
