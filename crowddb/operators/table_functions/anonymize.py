"""ANONYMIZE: a k-anonymous release of stored rows, recorded in the k-anonymity ledger by their identity."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ...arguments import SEED, Param, bind
from ...errors import (
    ArgumentError,
    PrivacyError,
    UnknownColumnError,
)
from ...store import TableRoles, composition
from ..context import OperatorContext
from .base import (
    ArrowRows,
    ReleaseEntry,
    TableFunctionSpec,
    TableInput,
    TableResult,
    _seed,
)


def anonymize_table(ctx: OperatorContext, rows: TableInput, named: dict[str, Any], roles: TableRoles
                    ) -> TableResult:
    """ANONYMIZE(input, k := 10, method := 'mondrian', quasi_identifiers := [...], strict, sensitive, l, seed,
    hierarchies := {'column': 'path/to/arx.csv', ...}, keep_key := false): the k-anonymous release itself, rows
    shuffled (order reveals nothing). The input's key (its declared key, else a column named ``id``) identifies rows,
    so it is dropped from the release unless ``keep_key := true`` (for the caller's own joins); the report says
    which column it was and whether it was dropped.

    The algorithm reads only its columns (quasi-identifiers, the l-diversity column, hierarchy columns); the
    release is the input's frozen Arrow columns with each quasi-identifier replaced by a dictionary array (each
    class's labels, each row's label index), the rows gathered once in shuffled order."""
    from ...anonymize.api import anonymize_checked, check_request

    args = bind("ANONYMIZE", named, {
        "k": Param(int, 10), "method": Param(str, "mondrian"), "quasi_identifiers": Param(list, None),
        "strict": Param(bool, True), "sensitive": Param(str, None), "l": Param(int, None), "seed": SEED,
        "hierarchies": Param(dict, None), "keep_key": Param(bool, False)})
    hierarchies = args["hierarchies"]
    if hierarchies is not None and not all(isinstance(v, str) for v in hierarchies.values()):
        raise ArgumentError("ANONYMIZE: hierarchies := {'column': 'path/to/hierarchy.csv', ...} takes ARX CSV paths")
    qi = _effective_quasi_identifiers(rows.columns, roles, args["quasi_identifiers"])
    kinds = {c: v for c, v in roles.kinds.items() if v}
    if args["method"] == "fka":
        raise ArgumentError("ANONYMIZE: method 'fka' needs the crowd; use it through a human operator "
                            "(anonymizer := 'fka')")
    key = _key_column(rows.columns, roles)
    # a key the caller generalizes (a quasi-identifier) is not a raw identifier here; one it measures l-diversity on
    # (sensitive := 'id') still is, and is dropped unless keep_key := true says the caller wants it (issue 24)
    key_dropped = key is not None and not args["keep_key"] and key.lower() not in {c.lower() for c in qi}
    seed = _seed(ctx, args["seed"])
    read = [*qi, *([args["sensitive"]] if args["sensitive"] else []), *(hierarchies or {})]
    release = published = remember = labels = None
    if rows.repeat is not None:  # the release served last time, asked again of the same rows and ledger
        release, published, labels = rows.repeat.served
        remember = (read, rows.repeat.served)
    else:
        # text quasi-identifiers read as codes where the snapshot holds them so (a large input): each row's text is
        # not made again, and the codes are what the anonymizer makes of the texts (by first appearance)
        frame = rows.df(read, coded=tuple(q for q in qi if q not in kinds and q not in (hierarchies or {})))
        check_request(frame, qi, args["k"], args["method"])  # refused before anything, whether or not it is computed

        @functools.cache
        def fresh():  # the release asked for, computed once; not at all when the rows are served from their boxes
            return anonymize_checked(frame, qi, args["k"], method=args["method"], strict=args["strict"],
                                     sensitive=args["sensitive"], l=args["l"], kinds=kinds or None, seed=seed,
                                     hierarchies=hierarchies)

        extras = args["l"] is not None or args["sensitive"] is not None or bool(hierarchies)
        if extras:
            fresh()  # l-diversity and hierarchies are checked only by computing the release: up front then
        if rows.row_refs is not None:
            composition.distinct_rows("ANONYMIZE", "its input", rows.row_refs)
            if rows.ledger_table is not None and _shown_before(ctx, rows):
                release, published, persisted = _kept_classes(ctx, rows, fresh, frame[qi], qi, args, kinds, seed)
                if persisted and not extras and not rows.widened:
                    # the boxes on record, a function of the ledger and these rows' values alone (no seed, no
                    # anonymizer): the same again for the same request, rows and ledger (``repeats``)
                    labels = _class_labels(release)
                    remember = (read, (_shown_again(release), published, labels))
        if release is None:
            release = fresh()
        if rows.row_refs is not None and published is None:  # each row's box, as the release prints it
            published = _published(rows.row_refs, release, qi)
    metrics = {k: v for k, v in release.metrics.items() if np.isscalar(v)}
    report = {"operator": "ANONYMIZE", **metrics, "guarantee": f"{args['k']}-anonymity over {qi}", "key": key,
              "key_dropped": key_dropped, "declared_quasi_identifiers": list(roles.quasi_identifiers)}
    withheld = _mixed_columns(rows.columns, roles, qi)
    if withheld:
        report["withheld"] = withheld
    if rows.widened:  # issue 25: a part of an earlier class below k would tell its rows apart
        report["widened"] = rows.widened
        report["widened_because"] = (f"{rows.widened} row(s) the input leaves out are released with it: they share "
                                     "classes an earlier release showed with its rows, and a part of such a class "
                                     "below k would tell them apart")
    entry = ReleaseEntry("anonymization", args["method"], args["k"], None, None,
                         {"quasi_identifiers": qi, "strict": args["strict"], "l": args["l"],
                          "hierarchies": hierarchies, "key": key, "key_dropped": key_dropped}, metrics)
    entry.published = published
    order = np.random.default_rng(seed).permutation(len(release.groups))
    kept = [c for c in rows.columns if not (key_dropped and c == key) and c not in withheld]
    return TableResult(_release_rows(rows, kept, release, order, labels), report, entry, remember)


def _mixed_columns(columns: list[str], roles: TableRoles, qi: list[str]) -> dict[str, str]:
    """{column: why} of the input's columns the release leaves out: withheld ones whose values may hold a
    quasi-identifier's (``DerivedRoles.mixed``: concat(edu, secret), a column a UNION ... BY NAME misaligns, one of
    unknown lineage), unless the call generalizes them as quasi-identifiers. A sensitive column is printed as it is,
    as k-anonymity publishes it; one of these, so printed, would print the quasi-identifier beside its class."""
    mixed = {c.lower() for c in getattr(roles, "mixed", ())}
    generalized = {q.lower() for q in qi}
    reasons = {c.lower(): why for c, why in getattr(roles, "withheld", {}).items()}
    return {c: (f"its values may hold a quasi-identifier's, and it is withheld ({reasons.get(c.lower(), 'unknown')}); "
                "select the quasi-identifier apart, or name the column in quasi_identifiers := [...]")
            for c in columns if c.lower() in mixed and c.lower() not in generalized}


def _shown_again(release):
    """What showing ``release`` again needs of it (its classes, labels and figures), without the rows' values and
    codes it was computed from (kept per connection for the next repeat: a table's quasi-identifiers otherwise)."""
    from ...anonymize.generalize import Release

    return Release(None, release.groups, None, None, release.metrics, {}, release.quasi_identifiers,
                   pre_class=release.pre_class, labels=release.labels)


def _shown_before(ctx: OperatorContext, rows: TableInput) -> bool:
    """Did an earlier release show any of the input's rows? Read from the joint classes when the planner read them
    to widen the input (every shown row is a member of its own class), else asked of the ledger."""
    if rows.joint_classes is None:
        return bool(composition.shown_before(ctx.con, rows.ledger_table, rows.row_refs))
    members = rows.joint_classes["row_ref"].to_numpy(dtype=np.int64)
    return bool(len(members)) and bool(np.isin(rows.row_refs, members).any())


def _published(row_refs: np.ndarray, release, qi: list[str]) -> composition.Planned:
    """The rows ``release`` publishes and each one's box (composition.box_text's order: QIs sorted by name)."""
    per_class = [pa.array([str(x) for x in release.labels[q][0]], pa.string()).take(pa.array(release.labels[q][1]))
                 for q in sorted(qi)]  # each QI's distinct labels printed once, taken per class by Arrow
    return composition.planned(row_refs, composition.box_texts(per_class, len(release.labels[qi[0]][1])),
                               release.pre_class, quasi_identifiers=qi)


def _kept_classes(ctx: OperatorContext, rows: TableInput, asked, frame: pd.DataFrame, qi: list[str],
                  args: dict[str, Any], kinds: dict[str, str], seed) -> tuple[Any, composition.Planned, bool]:
    """ANONYMIZE over rows an earlier release showed: the persisted partition when every row was shown over these
    quasi-identifiers at this k or more (each in its earlier box: nothing new is shown, issue 25); else the release
    asked for when the guard accepts it (a partition that keeps every joint class whole); else a release that keeps
    them whole (``privacy.serve``: merged classes for a larger k, added quasi-identifiers generalized over each
    class, new rows anonymized alone by the method asked for), with the guard's reason in the report. l-diversity and
    hierarchies are not kept by such a release: refused then, with the guard's reason. ``asked``: computes the release
    asked for (called only when the persisted partition cannot serve); ``frame``: the rows' quasi-identifiers. Also
    whether the release is the persisted partition itself."""
    from ...anonymize import anonymize
    from ...anonymize.encoding import encode, sorted_texts
    from ...anonymize.generalize import assemble, class_boxes
    from ...privacy import serve

    k = int(args["k"])
    classes = (rows.joint_classes if rows.joint_classes is not None
               else composition.joint_classes(ctx.con, rows.ledger_table, rows.row_refs))
    try:
        plan = serve.plan(rows.row_refs, classes, k, composition.signature(qi))
    except serve.Refused as no_plan:
        plan, why_not = None, no_plan
    guard = "every row was shown before over these quasi-identifiers at this k or more"
    persisted = plan is not None and not pd.isna(plan.boxes).any()
    if not persisted:  # not the persisted partition itself: the release asked for, if safe
        release = asked()
        published = _published(rows.row_refs, release, qi)
        try:
            composition.check(ctx.con, rows.ledger_table, "release:next", k, published)
            return release, published, False
        except PrivacyError as refused:
            if plan is None or args["l"] is not None or args["hierarchies"]:
                raise PrivacyError(f"{refused}" + ("" if plan is not None else f" ({why_not.reason}: "
                                                   f"{why_not.advice})")) from None
            guard = str(refused)
    try:
        if persisted:  # every row in its earlier box: the boxes' texts, split once per box (no text per row)
            pre_class, texts, metrics = serve.box_labels(plan, len(frame), qi)
        else:
            shown, metrics = serve.labels(
                plan, frame, qi, kinds, k,
                lambda new: anonymize(frame[new].reset_index(drop=True), qi, k, method=args["method"],
                                      strict=args["strict"], kinds=kinds or None, seed=seed))
    except serve.Refused as no_plan:
        raise PrivacyError(f"ANONYMIZE: {no_plan.reason}; {guard}. Nothing was released. {no_plan.advice}") from None
    if not persisted:  # the release as pre-classes (rows printing the same labels), each class's texts
        names = sorted(qi)
        pre_class = np.zeros(len(shown), dtype=np.int64)  # rows printing the same texts, numbered as first met
        for name in names:
            codes, distinct = pd.factorize(shown[name].to_numpy(dtype=object))
            pre_class = pd.factorize(pre_class * len(distinct) + codes)[0]  # (< rows x labels: no overflow)
        first = serve.first_rows(pre_class)
        texts = {q: shown[q].to_numpy(dtype=object)[first] for q in qi}
    labels = {}  # each QI's distinct labels, and each pre-class's
    for q in qi:
        lab, index = sorted_texts(texts[q])
        labels[q] = (lab.astype(object), index.astype(np.int64))
    enc = encode(frame, qi, kinds or None)
    # each served class's box: its rows' own range on each QI's scale, as Mondrian's boxes are (so NCP means the same)
    # (a scale grows with its codes: the least code's value is the least value; pre-classes are 0..m-1 already)
    _, least, most = class_boxes(enc.codes, pre_class)
    low, high = (np.column_stack([enc.columns[q].scale[c[:, j]] for j, q in enumerate(qi)]) for c in (least, most))
    served = assemble(frame, enc, pre_class.astype(np.int64), low, high, [labels[q] for q in qi], k, "served",
                      metrics)
    served.metrics["served_because"] = guard  # why the release asked for was not made
    return served, _published(rows.row_refs, served, qi), persisted


def _class_labels(release) -> dict[str, pa.Array]:
    """Each quasi-identifier's label of each pre-class, as Arrow text (the dictionaries of ``_release_rows``)."""
    return {q: pa.array([str(x) for x in labels], pa.string()).take(pa.array(index))
            for q, (labels, index) in release.labels.items()}  # (distinct labels, each pre-class's label)


def _release_rows(rows: TableInput, columns: list[str], release, order: np.ndarray,
                  labels: dict[str, pa.Array] | None = None) -> ArrowRows:
    """The release as Arrow, output row j being input row order[j]: the input's ``columns`` gathered in that order,
    each quasi-identifier a dictionary array of its labels (each class's labels, ``_class_labels`` unless given;
    each row's index into them)."""
    order = np.asarray(order, dtype=np.int64)
    pre_class = pa.array(release.pre_class.astype(np.int32, copy=False)[order])  # each row's index into the labels
    taken = pa.array(order)
    labels = _class_labels(release) if labels is None else labels
    arrays, types = [], []
    for c in columns:
        if c in release.labels:
            arrays.append(pa.DictionaryArray.from_arrays(pre_class, labels[c]))
            types.append(None)
        else:
            i = rows.columns.index(c)
            arrays.append(_gather(rows.snapshot.column(i), taken))
            types.append(rows.types[i])
    return ArrowRows(pa.Table.from_arrays(arrays, names=columns), types)


def _gather(column: pa.ChunkedArray, taken: pa.Array) -> pa.Array:
    """``column``'s values in the order ``taken`` gives, by one vectorized gather (DuckDB reads it in order) from one
    contiguous array (a gather across many chunks costs twice as much). Text with few distinct values is gathered
    as a dictionary array (each row's index moved, each text stored once; DuckDB reads it as VARCHAR): a random
    gather of the texts themselves costs 2-3 times as much."""
    whole = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(whole.type):  # coded in the snapshot already (``_duck.snapshot``)
        return whole.take(taken)
    if (pa.types.is_string(whole.type) or pa.types.is_large_string(whole.type)) and len(whole) >= DICTIONARY_FROM:
        coded = whole.dictionary_encode()
        if len(coded.dictionary) * 4 <= len(whole):
            return pa.DictionaryArray.from_arrays(coded.indices.take(taken), coded.dictionary)
    return whole.take(taken)


DICTIONARY_FROM = 100_000  # rows from which a text column is looked at for few distinct values (``_gather``)


def _effective_quasi_identifiers(columns: list[str], roles: TableRoles, given: list | None) -> list[str]:
    """ANONYMIZE's quasi-identifiers: those ``quasi_identifiers := [...]`` names, then every declared one it leaves
    out (issue 24: the argument may add columns, never drop a declared one, which would be released raw), each once
    and spelt as the input spells it (names match case-insensitively, as DuckDB's do). The given order comes first:
    a list that names every declared one generalizes exactly as before."""
    declared = list(roles.quasi_identifiers)
    if not declared and not given:
        raise ArgumentError("ANONYMIZE: pass quasi_identifiers := ['col', ...] (the input declares none)")
    if any(not isinstance(c, str) for c in given or []):
        raise ArgumentError(f"ANONYMIZE: quasi_identifiers := [...] takes column names, got {given!r}")
    by_lower = {c.lower(): c for c in columns if isinstance(c, str)}
    missing = [c for c in [*(given or []), *declared] if c.lower() not in by_lower]
    if missing:  # named against all the input's columns, before only the read ones are fetched
        raise UnknownColumnError(f"unknown quasi-identifier(s) {missing}; columns are {list(columns)}")
    return list(dict.fromkeys(by_lower[c.lower()] for c in [*(given or []), *declared]))


def _key_column(columns: list[str], roles: TableRoles) -> str | None:
    """The input's key column as the input spells it: the declared key, else a column named ``id``; None if the
    input has neither."""
    return next((c for c in columns if isinstance(c, str) and roles.is_key(c)), None)



SPEC = TableFunctionSpec("anonymize", anonymize_table, traced=True, coded=True)  # its release carries every column
