"""Local-DP perturbation of crowd answers, applied per worker as the worker would before sending.

Sun et al., "Truth Inference on Sparse Crowdsourcing Data with Local Differential Privacy" (the LDP paper):
Laplace perturbation (LP, Eq. 6-7, Theorem 1), randomized response extended to NULL answers (RR, Eq. 8) and
matrix-factorization perturbation (MF, Algorithm 2, Eq. 9-10, Theorem 4). LP and RR are epsilon-cell LDP over a
worker's full task vector (a missing answer is a cell too); MF protects the values of answered cells only, because
Theorem 4's proof does not cover a cell that changes between NULL and answered. Li et al., "Towards differentially private truth discovery for crowd
sensing systems" (the crowd-sensing paper): Gaussian noise with a per-user variance drawn from an exponential
distribution (Algorithm 2), (epsilon, delta) per Theorem 4.8.

The task universe of a worker's vector is the set of objects in the input. Every function takes integer-coded
:class:`~crowddb.truth.base.Answers` and returns ``(perturbed Answers, privacy report)``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy import integrate
from scipy.stats import norm

from crowddb.errors import ArgumentError, PrivacyError
from crowddb.truth.base import Answers
from crowddb.truth.noise import ExperimentSampler, SecureSampler

__all__ = [
    "PERTURBATIONS",
    "check_epsilon",
    "gaussian_mixture_delta",
    "gaussian_perturbation",
    "laplace_perturbation",
    "mf_perturbation",
    "perturb",
    "randomized_response",
    "rr_probabilities",
    "theorem_4_8_epsilon",
    "theorem_4_8_noise_level",
]

Sampler = ExperimentSampler | SecureSampler


def check_epsilon(epsilon: Any, name: str = "epsilon") -> float:
    """Validate a privacy budget: a finite number > 0."""
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise PrivacyError(f"{name} must be a positive number, got {epsilon!r}") from None
    if not (math.isfinite(e) and e > 0):
        raise PrivacyError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return e


def _check_delta(delta: Any) -> float:
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise PrivacyError(f"delta must be a number in (0, 1), got {delta!r}") from None
    if not 0 < d < 1:
        raise PrivacyError(f"delta must be in (0, 1), got {delta!r}")
    return d


def _report(mechanism: str, epsilon: float, delta: float, guarantee: str, theorem: str, sampler: Sampler,
            **extra: Any) -> dict[str, Any]:
    rep = {"mechanism": mechanism, "epsilon": epsilon, "delta": delta, "guarantee": guarantee, "theorem": theorem,
           "sampler": sampler.description, "production_safe": sampler.secure}
    rep.update(extra)
    return rep


# ----------------------------------------------------------------------------- domain of answers (Gamma)


def numeric_domain(kind: str, domain: Sequence[float] | None, bounds: tuple[float, float] | None,
                   need_discrete: bool, mech: str, *, outside: Callable[[np.ndarray], bool],
                   beyond: Callable[[float, float], bool], data: Callable[[], tuple[float, float, bool]]
                   ) -> tuple[np.ndarray | None, float, float, str]:
    """The answer domain Gamma as (discrete values or None, low, high, provenance), from what the answers tell when
    asked (each only when needed, so an engine that keeps the answers elsewhere, crowddb/spark/truth.py, computes only
    what is asked): ``outside(dom)`` whether some answer is not in ``dom``, ``beyond(lo, hi)`` whether some lies
    outside [lo, hi], ``data()`` their (min, max, all integral)."""
    if kind != "numeric":
        raise ArgumentError(f"perturb={mech!r} adds numeric noise and needs numeric answers; the value column holds "
                            "labels (use perturb='rr', or code the labels as numbers)")
    if domain is not None:
        dom = np.unique(np.asarray(domain, dtype=np.float64))
        if len(dom) < 2 or not np.isfinite(dom).all():
            raise ArgumentError(f"domain must list at least two finite values, got {domain!r}")
        if outside(dom):
            raise ArgumentError(f"perturb={mech!r}: some answers lie outside the given domain")
        return dom, float(dom[0]), float(dom[-1]), "given"
    if bounds is not None:
        lo, hi = map(float, bounds)
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise ArgumentError(f"bounds must be (low, high) with low < high, got {bounds!r}")
        if need_discrete:
            raise ArgumentError(f"perturb={mech!r} needs a discrete domain: pass domain=[...]")
        if beyond(lo, hi):
            raise ArgumentError(f"perturb={mech!r}: some answers lie outside bounds {bounds!r}")
        return None, lo, hi, "given"
    lo, hi, integral = data()
    if hi == lo:
        hi = lo + 1.0
    if integral:
        return np.arange(lo, hi + 1.0), lo, hi, "data (integer min..max; pass domain= for a data-independent guarantee)"
    if need_discrete:
        raise ArgumentError(f"perturb={mech!r} needs a discrete answer domain: the values are not integers, pass domain=[...]")
    return None, lo, hi, "data (min..max; pass bounds= for a data-independent guarantee)"


def _numeric_domain(ans: Answers, domain: Sequence[float] | None, bounds: tuple[float, float] | None,
                    need_discrete: bool, mech: str) -> tuple[np.ndarray | None, float, float, str]:
    """Return (discrete values or None, low, high, provenance) of the answer domain Gamma."""
    return numeric_domain(
        ans.kind, domain, bounds, need_discrete, mech, outside=lambda dom: not np.isin(ans.val, dom).all(),
        beyond=lambda lo, hi: bool((ans.val < lo).any() or (ans.val > hi).any()),
        data=lambda: (float(ans.val.min()), float(ans.val.max()), bool(np.all(ans.val == np.round(ans.val)))))


def _cells(ans: Answers) -> np.ndarray:
    """Flat cell index source * n_objects + object of every answer (unique after encode_answers)."""
    return ans.src * np.int64(ans.n_objects) + ans.obj


def _dense_answers(ans: Answers, values: np.ndarray) -> Answers:
    """Answers with one entry per (source, object) cell, source-major, from an (m, n) value matrix."""
    m, n = values.shape
    src = np.repeat(np.arange(m, dtype=np.int64), n)
    obj = np.tile(np.arange(n, dtype=np.int64), m)
    return Answers(obj, src, values.ravel(), ans.objects, ans.sources, None, "numeric")


# ----------------------------------------------------------------------------- LP


def laplace_perturbation(ans: Answers, epsilon: float, sampler: Sampler, *, domain: Sequence[float] | None = None,
                         bounds: tuple[float, float] | None = None, null_fill: str | float = "uniform",
                         block_cells: int = 4_000_000) -> tuple[Answers, dict[str, Any]]:
    """LP: NULLs replaced by g (Eq. 6), then every cell of every worker gets Lap(|Gamma|/epsilon) (Eq. 7)."""
    eps = check_epsilon(epsilon)
    dom, lo, hi, prov = _numeric_domain(ans, domain, bounds, False, "laplace")
    sens = sensitivity_of(dom, lo, hi)
    scale = sens / eps
    m, n = ans.n_sources, ans.n_objects
    out = np.empty((m, n))
    rows_per_block = max(1, block_cells // max(n, 1))
    order = np.argsort(ans.src, kind="stable")
    starts = np.searchsorted(ans.src[order], np.arange(m + 1))
    for r0 in range(0, m, rows_per_block):  # blocks of workers bound the temporary memory
        r1 = min(m, r0 + rows_per_block)
        block = np.empty((r1 - r0, n))
        fill = null_fill_value(null_fill)
        if fill is None:  # Eq. (6) with v drawn uniformly from Gamma
            if dom is not None:
                block[:] = dom[sampler.integers(len(dom), block.size)].reshape(block.shape)
            else:
                block[:] = (lo + (hi - lo) * sampler.uniform(block.size)).reshape(block.shape)
        else:
            block[:] = fill
        sel = order[starts[r0]:starts[r1]]
        block[ans.src[sel] - r0, ans.obj[sel]] = ans.val[sel]
        out[r0:r1] = sampler.add_laplace(block.ravel(), scale).reshape(block.shape)  # Eq. (7)
    return _dense_answers(ans, out), laplace_report(eps, sens, prov, sampler, m * n)


def sensitivity_of(dom: np.ndarray | None, lo: float, hi: float) -> float:
    """LP's and MF's |Gamma|: the number of values of a discrete domain (the paper's Lap(|Gamma|/eps)), else the
    range of a continuous one (ours: the L1 sensitivity of one cell)."""
    return float(len(dom)) if dom is not None else hi - lo


def null_fill_value(null_fill: str | float) -> float | None:
    """LP's fill of a NULL cell (Eq. 6): None for 'uniform' (a value drawn uniformly from Gamma), else the number."""
    if isinstance(null_fill, str) and null_fill == "uniform":
        return None
    try:
        return float(null_fill)
    except (TypeError, ValueError):
        raise ArgumentError(f"null_fill must be 'uniform' or a number, got {null_fill!r}") from None


def laplace_report(eps: float, sens: float, prov: str, sampler: Any, cells: int) -> dict[str, Any]:
    """LP's privacy report (Theorem 1): Lap(sens / eps) on each of the ``cells`` cells."""
    return _report("laplace", eps, 0.0, "epsilon-cell LDP (each cell of a worker's full task vector, NULLs included)",
                   "Sun et al. Theorem 1 (LP, Eq. 6-7)", sampler, scale=sens / eps, sensitivity=sens,
                   domain_source=prov, cells=int(cells))


# ----------------------------------------------------------------------------- RR


def rr_probabilities(epsilon: float, k: int) -> tuple[float, float]:
    """Eq. (8): P(keep) = e^eps / (k + e^eps), P(each of the k other outcomes, NULL included) = 1 / (k + e^eps)."""
    e = math.exp(check_epsilon(epsilon))
    return e / (k + e), 1.0 / (k + e)


def _geometric_positions(sampler: Sampler, p: float, total: int) -> np.ndarray:
    """Positions in [0, total) of the successes of ``total`` Bernoulli(p) trials, by geometric skipping."""
    if total <= 0 or p <= 0:
        return np.zeros(0, dtype=np.int64)
    chunks, pos = [], -1
    while True:
        expect = (total - pos) * p
        size = int(expect + 6 * math.sqrt(expect) + 64)
        gaps = sampler.geometric(p, size)
        cand = pos + np.cumsum(gaps)
        chunks.append(cand[cand < total])
        if cand[-1] >= total:
            break
        pos = int(cand[-1])
    return np.concatenate(chunks).astype(np.int64)


def randomized_response(ans: Answers, epsilon: float, sampler: Sampler, *,
                        domain: Sequence[Any] | None = None) -> tuple[Answers, dict[str, Any]]:
    """RR with NULL as an answer (Eq. 8) on every cell of every worker's task vector, in memory ∝ answers sent."""
    eps = check_epsilon(epsilon)
    if ans.kind == "categorical":
        assert ans.classes is not None
        classes, prov = rr_classes(ans.classes, domain)
        vals = classes.get_indexer(ans.classes.take(ans.val))
        dom_values: Any = classes
    else:
        dom, _, _, prov = _numeric_domain(ans, domain, None, True, "rr")
        assert dom is not None
        vals = np.searchsorted(dom, ans.val)
        dom_values = dom
    k = len(dom_values)
    keep, other = rr_probabilities(eps, k)
    m, n = ans.n_sources, ans.n_objects
    # answered cells: keep w.p. keep, else one of the k other outcomes (k - 1 other values or NULL) uniformly
    nnz = len(vals)
    kept = sampler.uniform(nnz) < keep
    r = sampler.integers(k, nnz)
    repl = np.where(r >= vals, r + 1, r)  # skip the own value; code k means NULL
    new_vals = np.where(kept, vals, repl)
    live = new_vals < k
    o1, s1, v1 = ans.obj[live], ans.src[live], new_vals[live]
    # NULL cells: each becomes one of the k values w.p. k/(k + e^eps); sampled by skipping, never densified
    cells = np.sort(_cells(ans))
    rank_shift = cells - np.arange(nnz)  # number of NULL cells before each answered cell
    null_ranks = _geometric_positions(sampler, k * other, m * n - nnz)
    flat = null_ranks + np.searchsorted(rank_shift, null_ranks, side="right")
    o2, s2 = flat % n, flat // n
    v2 = sampler.integers(k, len(flat))
    obj, src, val = np.concatenate([o1, o2]), np.concatenate([s1, s2]), np.concatenate([v1, v2]).astype(np.int64)
    if ans.kind == "categorical":
        out = Answers(obj, src, val, ans.objects, ans.sources, pd.Index(dom_values), "categorical")
    else:
        out = Answers(obj, src, np.asarray(dom_values, dtype=np.float64)[val], ans.objects, ans.sources, None, "numeric")
    return out, rr_report(eps, k, prov, sampler, len(val))


def rr_classes(classes: pd.Index, domain: Sequence[Any] | None) -> tuple[pd.Index, str]:
    """RR's domain of labels (sorted): the labels seen, with the given ``domain``'s; and its provenance."""
    if domain is None:
        return classes, "data (labels seen; pass domain= for a data-independent guarantee)"
    return pd.Index(sorted(set(domain) | set(classes))), "given"


def rr_report(eps: float, k: int, prov: str, sampler: Any, sent: int) -> dict[str, Any]:
    """RR's privacy report (Eq. 8) over a domain of ``k`` values; ``sent``: the answers sent after it."""
    keep, other = rr_probabilities(eps, k)
    return _report("randomized_response", eps, 0.0,
                   "epsilon-cell LDP (each cell of a worker's full task vector, NULLs included)",
                   "Sun et al. Eq. (8) (RR extended to NULL)", sampler, keep_probability=keep,
                   other_probability=other, domain_size=k, domain_source=prov, answers_sent=int(sent))


# ----------------------------------------------------------------------------- MF


def task_profile_matrix(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """DC's d×n task profile matrix V, drawn independently of the data, every column with 1-norm exactly 1."""
    v = rng.standard_normal((d, n))
    return v / np.abs(v).sum(axis=0, keepdims=True)


def mf_perturbation(ans: Answers, epsilon: float, sampler: Sampler, *, d: int = 10, ridge: float = 0.1,
                    domain: Sequence[float] | None = None, bounds: tuple[float, float] | None = None,
                    V: np.ndarray | None = None, v_seed: int | None = None,
                    block_cells: int = 4_000_000) -> tuple[Answers, dict[str, Any]]:
    """MF (Algorithm 2): each worker solves argmin_u sum (a_ij - u.v_j)^2 + 2 u.eta + ridge |u|^2 and sends u V."""
    eps = check_epsilon(epsilon)
    dom, lo, hi, prov = _numeric_domain(ans, domain, bounds, False, "mf")
    sens = sensitivity_of(dom, lo, hi)
    m, n = ans.n_sources, ans.n_objects
    if V is None:
        check_mf_d(d)
        seed = v_seed if v_seed is not None else (
            int(sampler.rng.integers(2**63)) if isinstance(sampler, ExperimentSampler) else None)
        V = task_profile_matrix(n, d, np.random.default_rng(seed))
    V = np.asarray(V, dtype=np.float64)
    d = V.shape[0]
    if V.shape != (d, n) or (np.abs(V).sum(axis=0) > 1 + 1e-9).any():
        raise PrivacyError("task profile matrix V must be d × n_objects with every column 1-norm <= 1 (Theorem 4)")
    check_ridge(ridge)
    a_ind = sp.csr_matrix((np.ones(len(ans.val)), (ans.src, ans.obj)), shape=(m, n))
    a_val = sp.csr_matrix((ans.val, (ans.src, ans.obj)), shape=(m, n))
    outer = (V.T[:, :, None] * V.T[:, None, :]).reshape(n, d * d)  # v_j v_j^T per task
    gram = np.asarray(a_ind @ outer).reshape(m, d, d) + ridge * np.eye(d)  # sum over T_i of v_j v_j^T + ridge I
    rhs = np.asarray(a_val @ V.T)  # sum over T_i of a_ij v_j
    eta = sampler.add_laplace(np.zeros(m * d), sens / eps).reshape(m, d)  # eta_i ~ Lap(|Gamma|/eps)^d, Eq. (9)
    # Eq. (10): grad L_DP = 0  <=>  (sum v v^T + ridge I) u = sum a v - eta; closed form instead of gradient descent
    u = np.linalg.solve(gram, (rhs - eta)[:, :, None])[:, :, 0]
    out = np.empty((m, n))
    rows = max(1, block_cells // max(n, 1))
    for r0 in range(0, m, rows):
        out[r0:r0 + rows] = u[r0:r0 + rows] @ V  # M(a_i) = u_i V
    return _dense_answers(ans, out), mf_report(eps, d, ridge, sens, prov, sampler, m * n)


def check_mf_d(d: Any) -> None:
    """MF's factorization parameter d (the rows of V): a positive integer."""
    if not (isinstance(d, (int, np.integer)) and d >= 1):
        raise ArgumentError(f"mf factorization parameter d must be a positive integer, got {d!r}")


def check_ridge(ridge: Any) -> None:
    """MF's ridge: >= 0."""
    if ridge < 0:
        raise ArgumentError(f"ridge must be >= 0, got {ridge!r}")


def mf_report(eps: float, d: int, ridge: float, sens: float, prov: str, sampler: Any, cells: int) -> dict[str, Any]:
    """MF's privacy report (Theorem 4): eta ~ Lap(sens / eps)^d per worker, ``cells`` cells sent."""
    # Theorem 4's proof holds the Gram matrix fixed, so it covers the value of an answered cell; whether a task was
    # answered changes the Gram matrix and the privacy loss is then unbounded (tests/algorithms/truth/test_truth_ldp.py shows it).
    return _report("matrix_factorization", eps, 0.0,
                   "epsilon-cell LDP for the value of each answered cell; which tasks were answered is not protected",
                   "Sun et al. Theorem 4 (MF, Algorithm 2, Eq. 9-10)", sampler, d=int(d), ridge=float(ridge),
                   laplace_scale=sens / eps, sensitivity=sens, domain_source=prov, cells=int(cells),
                   note="ridge keeps the argmin unique for workers with fewer than d answers; the proof of Theorem 4 "
                        "is unchanged since the ridge term cancels between neighbouring vectors")


# ----------------------------------------------------------------------------- Gaussian (crowd-sensing paper)


def _gamma_s(b: float, eta: float) -> float:
    """Lemma 4.7: gamma_s = b * sqrt(2 ln(1 / (1 - eta)))."""
    if not (b > 0 and 0 < eta < 1):
        raise ArgumentError(f"Lemma 4.7 needs b > 0 and 0 < eta < 1, got b={b!r}, eta={eta!r}")
    return b * math.sqrt(2.0 * math.log(1.0 / (1.0 - eta)))


def theorem_4_8_noise_level(epsilon: float, delta: float, lambda1: float = 1.0, b: float = 3.0,
                            eta: float = 0.95) -> float:
    """Theorem 4.8: the smallest noise level c = gamma_s^2 / (2 lambda1 epsilon ln(1/(1-delta)))."""
    eps, dl = check_epsilon(epsilon), _check_delta(delta)
    if not lambda1 > 0:
        raise ArgumentError(f"lambda1 must be > 0, got {lambda1!r}")
    return _gamma_s(b, eta) ** 2 / (2.0 * lambda1 * eps * math.log(1.0 / (1.0 - dl)))


def theorem_4_8_epsilon(c: float, delta: float, lambda1: float = 1.0, b: float = 3.0, eta: float = 0.95) -> float:
    """Theorem 4.8 solved for epsilon: the epsilon a noise level c gives, gamma_s^2 / (2 lambda1 c ln(1/(1-delta)))."""
    dl = _check_delta(delta)
    if not (c > 0 and lambda1 > 0):
        raise ArgumentError("c and lambda1 must be > 0")
    return _gamma_s(b, eta) ** 2 / (2.0 * lambda1 * c * math.log(1.0 / (1.0 - dl)))


def gaussian_mixture_delta(epsilon: float, sensitivity: float, mean_variance: float) -> float:
    """Exact delta(epsilon) of N(0, y) noise with y ~ Exp(mean), averaged over y (analytic Gaussian mechanism)."""
    eps = check_epsilon(epsilon)

    def delta_y(y: float) -> float:
        if y <= 0:
            return 1.0
        s = math.sqrt(y)
        a, c = sensitivity / (2 * s), eps * s / sensitivity
        return float(norm.cdf(a - c) - math.exp(eps) * norm.cdf(-a - c))

    lam = 1.0 / mean_variance
    val, _ = integrate.quad(lambda y: lam * math.exp(-lam * y) * delta_y(y), 0, np.inf, limit=200)
    return float(min(max(val, 0.0), 1.0))


def gaussian_perturbation(ans: Answers, epsilon: float, delta: float, sampler: Sampler, *, lambda1: float = 1.0,
                          b: float = 3.0, eta: float = 0.95, sensitivity: float | None = None,
                          c: float | None = None) -> tuple[Answers, dict[str, Any]]:
    """Crowd-sensing Algorithm 2: user s draws delta_s^2 ~ Exp(lambda2) and sends x + N(0, delta_s^2) (Eq. 3)."""
    eps, dl = check_epsilon(epsilon), _check_delta(delta)
    if ans.kind != "numeric":
        raise ArgumentError("perturb='gaussian' needs numeric answers")
    rep = gaussian_report(eps, dl, sampler, lambda1=lambda1, b=b, eta=eta, sensitivity=sensitivity, c=c)
    var = sampler.exponential(rep["mean_noise_variance"], ans.n_sources)  # Algorithm 2 line 3: a user's secret variance
    noisy = sampler.add_gaussian(ans.val, np.sqrt(var)[ans.src])  # Eq. (3)
    out = Answers(ans.obj.copy(), ans.src.copy(), noisy, ans.objects, ans.sources, None, "numeric")
    return out, rep


def gaussian_report(eps: float, dl: float, sampler: Any, *, lambda1: float, b: float, eta: float,
                    sensitivity: float | None, c: float | None) -> dict[str, Any]:
    """The Gaussian perturbation's calibration (Theorem 4.8: the mean noise variance 1 / lambda2 of Algorithm 2) and
    privacy report, from its options, checked."""
    if sensitivity is not None:
        if not sensitivity > 0:
            raise ArgumentError(f"sensitivity must be > 0, got {sensitivity!r}")
        # proof of Theorem 4.8: need exp(-lambda2 Delta^2 / (2 eps)) >= 1 - delta
        lambda2 = 2.0 * eps * math.log(1.0 / (1.0 - dl)) / sensitivity**2
        delta_s, theorem, c_used = float(sensitivity), "Li et al. Theorem 4.8 (proof, with the given sensitivity)", None
    else:
        c_min = theorem_4_8_noise_level(eps, dl, lambda1, b, eta)
        c_used = c_min if c is None else float(c)
        if c_used < c_min * (1 - 1e-12):
            raise PrivacyError(f"noise level c={c_used} is below Theorem 4.8's bound {c_min:.6g} for "
                               f"epsilon={eps}, delta={dl}")
        lambda2 = lambda1 / c_used  # 1/lambda2 = c / lambda1
        delta_s = _gamma_s(b, eta) / lambda1  # Lemma 4.7 with the paper's choice Delta_s = gamma_s / lambda1
        theorem = "Li et al. Theorem 4.8"
    mean_var = 1.0 / lambda2
    return _report("gaussian", eps, dl, "(epsilon, delta)-LDP per record, as claimed by the crowd-sensing paper",
                   theorem, sampler, lambda1=float(lambda1), lambda2=lambda2, c=c_used, b=b, eta=eta,
                   sensitivity=delta_s, mean_noise_variance=mean_var,
                   delta_exact_mixture=gaussian_mixture_delta(eps, delta_s, mean_var),
                   caveat="Theorem 4.8 bounds the density ratio by exp(Delta^2/(2y)), which does not hold for every "
                          "output of a Gaussian; 'delta_exact_mixture' is the delta the analytic Gaussian mechanism "
                          "gives at this epsilon, averaged over the exponential variance. NULL cells are not "
                          "perturbed (only records a user sends are protected).")


PERTURBATIONS = {
    "laplace": "laplace", "lp": "laplace", "rr": "rr", "randomized_response": "rr", "mf": "mf",
    "matrix_factorization": "mf", "gaussian": "gaussian",
}


def perturbation_options(mechanism: str) -> tuple[str, ...]:
    """The options a perturbation takes (its keyword-only parameters), e.g. MF's ``d`` or the Gaussian's ``lambda1``."""
    key = PERTURBATIONS.get(str(mechanism).lower())
    if key is None:
        raise ArgumentError(f"unknown perturb {mechanism!r}; valid: 'laplace', 'rr', 'mf', 'gaussian'")
    fn = {"laplace": laplace_perturbation, "rr": randomized_response, "mf": mf_perturbation,
          "gaussian": gaussian_perturbation}[key]
    return tuple(p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY)


def perturbation_key(mechanism: str, epsilon: Any, delta: Any) -> str:
    """The perturbation's key ('laplace', 'rr', 'mf', 'gaussian') for a name, after the checks of its (epsilon,
    delta) that do not depend on the answers."""
    key = PERTURBATIONS.get(str(mechanism).lower())
    if key is None:
        raise ArgumentError(f"unknown perturb {mechanism!r}; valid: 'laplace', 'rr', 'mf', 'gaussian'")
    if epsilon is None:
        raise PrivacyError(f"perturb={mechanism!r} needs epsilon")
    if key == "gaussian":
        if delta is None:
            raise PrivacyError("perturb='gaussian' needs delta (0 < delta < 1)")
    elif delta not in (None, 0, 0.0):
        raise PrivacyError(f"perturb={mechanism!r} is pure epsilon-LDP; delta must be omitted or 0")
    return key


def perturb(ans: Answers, mechanism: str, epsilon: Any, delta: Any, sampler: Sampler,
            **options: Any) -> tuple[Answers, dict[str, Any]]:
    """Dispatch to a perturbation by name ('laplace', 'rr', 'mf', 'gaussian')."""
    key = perturbation_key(mechanism, epsilon, delta)
    if key == "gaussian":
        return gaussian_perturbation(ans, epsilon, delta, sampler, **options)
    fn = {"laplace": laplace_perturbation, "rr": randomized_response, "mf": mf_perturbation}[key]
    return fn(ans, epsilon, sampler, **options)
