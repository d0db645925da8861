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
from ..store.composition import BOX_SEPARATOR
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
                 recorded: Callable[[], tuple[str, np.ndarray] | None] | None = None,
                 shown_before: Callable[[], int] | None = None) -> None:
        self.call, self.op = call, call.op
        self.estimating, self.signature, self.rng, self.connection_seed = estimating, signature, rng, connection_seed
        self.buy, self.domain = buy, domain
        self.recorded = recorded  # the boxes an earlier release showed these rows in, if it showed them all
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
        from ..anonymize import anonymize  # the algorithm layer

        shown = self._persisted(raw)
        if shown is not None:
            return shown
        if len(raw) < int(op.k):
            raise ArgumentError(
                f"{op.name}: its input has {len(raw)} rows, fewer than k={int(op.k)}, so no group of k rows can hide "
                f"them (a WHERE or LIMIT leaves the operator only the rows it asks about); ask about at least "
                f"{int(op.k)} rows or pass a smaller k := ...")
        options: dict[str, Any] = {}
        method = op.anonymizer
        if method == "fka" and self.estimating:
            # FKA needs crowd answers; explain() shows Mondrian's release (FKA's starting point) and FKA's sampling
            # cost: the raw samples and their cell-generalized copies, sample_ratio of the rows each
            self.fka_estimate = 2 * max(2, round(float(op.sample_ratio) * len(raw)))
            method = "mondrian"
        elif method == "fka":
            shown = self.shown_before() if self.shown_before is not None else 0
            if shown:  # refused before its samples are bought, not after (issue 15's guard would refuse round 1)
                raise PrivacyError(
                    f"{op.name}: {shown} of its {len(raw)} rows were shown by an earlier release; FKA would buy "
                    "synthetic samples for a new partition whose boxes cross the earlier ones, which the guard of "
                    "k-anonymity across releases refuses. Nothing was bought. Use anonymizer := 'mondrian' with the "
                    "earlier release's k (its boxes are shown again), or ask about rows no release has shown")
            options.update(ask=self._fka_ask(raw), sample_ratio=float(op.sample_ratio), cell_limit=int(op.cell_limit))
        if call.shared:  # group operators: QIs every row of a group shares are generalized per group
            options["shared"] = list(call.shared)
        release = anonymize(raw, list(call.quasi_identifiers), int(op.k), method=method,
                            kinds=dict(call.kinds) or None, seed=self._anonymizer_rng(raw), **options)
        table = release.table[call.published].copy()
        for col in call.published:
            if col not in call.quasi_identifiers:
                table[col] = render(raw[col])
        return table.astype(str), release.metrics

    def _persisted(self, raw: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any]] | None:
        """Rows an earlier release showed, in boxes over the same quasi-identifiers with a k at least this call's:
        shown in those boxes again (the table's persisted partition), so a subset or a rerun shows nothing new and is
        served from the answers on record (issue 15). Rows inserted since (no release showed them) join the
        partition in classes of their own, of at least k new rows each (Mondrian over the new rows): the earlier
        boxes are not cut, and a worker who links releases finds each new row among k others that, like it, are
        in this release only. None: anonymize afresh."""
        found = self.recorded() if self.recorded is not None else None
        if found is None:
            return None
        release, boxes = found
        names = sorted(self.call.quasi_identifiers)
        boxes = pd.Series(boxes, dtype=object)
        new = boxes.isna().to_numpy()  # rows no release showed: inserted since
        parts = boxes[~new].str.split(BOX_SEPARATOR, expand=True)
        if parts.shape[1] != len(names):  # a box printed otherwise: not ours to reuse
            return None
        table = raw.apply(render).astype(object)
        for j, name in enumerate(names):
            table.loc[~new, name] = parts[j].to_numpy(dtype=object)
        metrics: dict[str, Any] = {"method": "persisted", "persisted_from": release}
        if new.any():
            if self.op.anonymizer != "mondrian":  # (ours) the new rows' classes are Mondrian's: not what was asked
                return None
            k = int(self.op.k)
            if new.sum() < k:
                raise PrivacyError(
                    f"{self.op.name}: {int(new.sum())} of its rows were inserted after {release} showed the others, "
                    f"fewer than k={k}: they cannot form a class of their own, and putting them in an earlier box would "
                    f"let a worker who saw {release} tell them apart. Nothing was published. Ask again when at least "
                    f"{k} new rows are in, or leave them out (WHERE ...)")
            from ..anonymize import anonymize  # the algorithm layer

            fresh = anonymize(raw[new].reset_index(drop=True), list(self.call.quasi_identifiers), k,
                              method="mondrian", kinds=dict(self.call.kinds) or None)
            for name in names:
                table.loc[new, name] = fresh.table[name].astype(str).to_numpy(dtype=object)
            metrics.update(new_rows=int(new.sum()), new_rows_ncp=fresh.metrics.get("ncp"))
        return table[self.call.published].astype(str), metrics

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

    def _fka_ask(self, raw: pd.DataFrame) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
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
        known = knowledge(self.call.frame, raw[qis])
        domain = pd.Index(self.domain)

        def ask(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
            answers = self.buy(box_labels(enc, lo, hi), known)
            self.fka_tuples += len(lo)
            return domain.get_indexer(answers).astype(np.int64)

        return ask
