"""discover(): the one call behind TRUTH_DISCOVER — validate, optionally perturb (LDP), fit a method, report."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowddb._frames import as_frame
from crowddb.errors import ArgumentError, PrivacyError, UnknownColumnError
from crowddb.truth.base import TruthMethod, encode_answers, get_method, value_kind
from crowddb.truth.ldp import PERTURBATIONS, check_epsilon, perturbation_options
from crowddb.truth.ldp import perturb as _perturb
from crowddb.truth.noise import make_sampler

__all__ = ["AUTO_METHODS", "TruthResult", "discover", "method_options", "resolve_method"]

#: what ``method='auto'`` picks for each value kind
AUTO_METHODS = {"categorical": "ds", "numeric": "crh"}


@dataclass
class TruthResult:
    """Result of discover(): one row per object, one row per source, the privacy report and the fitted model."""

    objects: pd.DataFrame  # columns object, truth, confidence
    sources: pd.DataFrame  # columns source, weight
    method: str
    n_iter: int
    privacy: dict[str, Any] | None = None
    model: TruthMethod | None = field(default=None, repr=False)


def resolve_method(method: str, kind: str) -> type[TruthMethod]:
    """Method class for a name and the value kind; 'auto' picks by kind, 'crh' follows the kind."""
    name = str(method).strip().lower()
    if name == "auto":
        return get_method(AUTO_METHODS[kind])
    cls = get_method(name)
    if cls.name == "crh" and kind == "categorical":
        return get_method("crh_categorical")
    return cls


@functools.cache  # inspect.signature over the MRO costs about half a millisecond per call; classes do not change
def method_options(cls: type[TruthMethod]) -> tuple[str, ...]:
    """The options a method's constructor takes beyond the common ones (tol, max_iter, seed, dropna)."""
    common = set(inspect.signature(TruthMethod.__init__).parameters)
    names: dict[str, None] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is TruthMethod:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.name not in common and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                names[p.name] = None
    return tuple(names)


def _route_options(cls: type[TruthMethod], perturb: str | None, p_names: tuple[str, ...],
                   options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(method options, perturbation options): each option by name to the perturbation (``p_names``) or to the
    method's constructor; a name neither takes is an error listing what both take."""
    m_names = method_options(cls)
    method_kw: dict[str, Any] = {}
    perturb_kw: dict[str, Any] = {}
    for name, value in options.items():
        if name in p_names:
            perturb_kw[name] = tuple(value) if name == "bounds" and isinstance(value, list) else value
        elif name in m_names:
            method_kw[name] = value
        else:
            where = f"method {cls.name!r}" + (f" and perturb {perturb!r}" if perturb is not None else "")
            raise ArgumentError(
                f"unknown option {name!r} for {where}; options of the method: {list(m_names)}"
                + (f", of the perturbation: {list(p_names)}" if perturb is not None else "")
            )
    return method_kw, perturb_kw


def _columns(data: Any, object: str, source: str, value: str) -> tuple[Any, Any, Any]:
    if isinstance(data, (tuple, list)) and len(data) == 3:
        return data[0], data[1], data[2]
    data = as_frame(data, "discover()", ", or a tuple (objects, sources, values)")
    for role, col in (("object", object), ("source", source), ("value", value)):
        if col not in data.columns:
            raise UnknownColumnError(f"{role} column {col!r} not in input columns {list(data.columns)!r}")
    return data[object], data[source], data[value]


def discover(data: Any, object: str = "object", source: str = "source", value: str = "value", method: str = "auto",
             perturb: str | None = None, epsilon: float | None = None, delta: float | None = None,
             seed: int | np.random.Generator | None = None, tol: float = 1e-6, max_iter: int = 100,
             dropna: bool = False, perturb_options: dict[str, Any] | None = None,
             options: Mapping[str, Any] | None = None, **method_kw: Any) -> TruthResult:
    """Infer each object's truth and each source's weight, optionally on answers perturbed under local DP.

    ``data`` is a DataFrame (or Arrow table / DuckDB relation) with the named columns, or a tuple of three arrays.
    ``method='auto'`` uses Dawid-Skene for labels and CRH for numbers (see ``value_kind``); 'crh' on labels is CRH with
    0-1 loss. With ``perturb`` in {'laplace', 'rr', 'mf', 'gaussian'} each worker's answers are perturbed first,
    with noise from OpenDP/os.urandom when ``seed`` is None and from a seeded numpy Generator otherwise (reproducible,
    for experiments only — not for production releases). Objects left without answers by the perturbation get a
    NULL truth and confidence 0. ``options`` (what SQL's extra named arguments become) are routed by name: to the
    perturbation (e.g. ``d``, ``domain``, ``lambda1``) or to the method (e.g. CRH's ``loss``); keyword arguments
    go to the method. A name neither takes is an error that lists what they take.
    """
    objs, srcs, vals = _columns(data, object, source, value)
    name = str(method).strip().lower()
    if name == "auto":
        kind = value_kind(vals)
        if perturb is not None and PERTURBATIONS.get(str(perturb).lower()) in ("laplace", "mf", "gaussian"):
            kind = "numeric"
    else:
        kind = get_method(name).kind
        if get_method(name).name == "crh":  # explicit 'crh': CRH 0-1 loss only for non-numeric labels
            v = pd.Series(vals)
            numeric = pd.api.types.is_numeric_dtype(v.dtype) and not pd.api.types.is_bool_dtype(v.dtype)
            kind = "numeric" if numeric else value_kind(v)
    cls = resolve_method(name, kind)
    if perturb is None and (epsilon is not None or delta is not None):
        raise PrivacyError("epsilon/delta were given but no perturb mechanism; pass perturb='laplace'|'rr'|'mf'|'gaussian'")
    p_names = perturbation_options(perturb) if perturb is not None else ()
    unknown = set(perturb_options or {}) - set(p_names)
    if unknown:
        raise ArgumentError(f"unknown perturb_options {sorted(unknown)} for perturb {perturb!r}"
                            + (f"; it takes {list(p_names)}" if perturb is not None else ""))
    method_kw, routed = _route_options(cls, perturb, p_names, {**method_kw, **dict(options or {})})
    perturb_kw = {**dict(perturb_options or {}), **routed}
    ans = encode_answers(objs, srcs, vals, "numeric" if perturb is not None and kind == "numeric" else cls.kind,
                         dropna=dropna, method=cls.name)
    privacy = None
    if perturb is not None:
        if epsilon is None:
            raise PrivacyError(f"perturb={perturb!r} needs epsilon")
        check_epsilon(epsilon)
        sampler = make_sampler(seed)
        ans, privacy = _perturb(ans, perturb, epsilon, delta, sampler, **perturb_kw)
        if ans.kind != cls.kind:
            raise ArgumentError(f"method {cls.name!r} is {cls.kind} but perturb={perturb!r} produces {ans.kind} answers")
    model = cls(tol=tol, max_iter=max_iter, seed=seed, **method_kw)
    fitted_objects = ans.objects
    if perturb is not None:  # objects / sources that lost every answer are re-added with NULL results below
        used = np.unique(ans.obj)
        if len(used) < ans.n_objects or len(np.unique(ans.src)) < ans.n_sources:
            from crowddb.truth.base import Answers

            oc, ou = pd.factorize(ans.obj)
            sc, su = pd.factorize(ans.src)
            ans = Answers(oc.astype(np.int64), sc.astype(np.int64), ans.val, ans.objects.take(ou),
                          ans.sources.take(su), ans.classes, ans.kind)
    model.fit_answers(ans)
    truths = model.truths_.reindex(fitted_objects)
    conf = model.confidences_.reindex(fitted_objects).fillna(0.0)
    objects_df = pd.DataFrame({"object": fitted_objects, "truth": truths.to_numpy(), "confidence": conf.to_numpy()})
    sources_df = pd.DataFrame({"source": model.source_weights_.index, "weight": model.source_weights_.to_numpy()})
    return TruthResult(objects_df, sources_df, cls.name, model.n_iter_, privacy, model)
