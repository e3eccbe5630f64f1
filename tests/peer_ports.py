"""Independent oracles for tests/test_peers.py: the peers' algorithms re-implemented the way their code runs them.

Each class or function re-states, in numpy, the loop of one official research code (read from the public
repositories named in each docstring), keeping the code's order of operations, its in-place aliasing and its
quirks — the things a comparison has to reproduce to be exact.  None of it is used by fedsde itself.
"""

from __future__ import annotations

import itertools

import numpy as np
import scipy.special


# --------------------------------------------------------------------------- FedNova (JYWa/FedNova)
class NovaWorker:
    """One client of ``distoptim/FedNova.py`` (commit 605da42): the ``FedNova`` optimizer on one parameter vector.

    ``step`` follows ``FedNova.step``: momentum buffer cloned from the first gradient, then ``buf ← ρ buf + g``;
    the direction *is* the buffer object, and the proximal term is added to it in place (so it stays in the
    buffer); ``cum_grad`` accumulates ``lr·d_p``; the normaliser follows the code's recursion.  State persists
    across rounds as in the code (buffers zeroed, not deleted, by :func:`nova_average`).
    """

    def __init__(self, w0: np.ndarray, ratio: float, lr: float, momentum: float = 0.0, mu: float = 0.0,
                 gmf: float = 0.0):
        self.p = np.array(w0, dtype=np.float64)
        self.ratio, self.lr, self.momentum, self.mu, self.gmf = ratio, lr, momentum, mu, gmf
        self.state: dict[str, np.ndarray] = {}
        self.local_normalizing_vec = 0.0
        self.local_counter = 0.0
        self.local_steps = 0

    def step(self, grad: np.ndarray) -> None:
        d_p = np.array(grad, dtype=np.float64)  # p.grad.data, a fresh tensor every step
        st = self.state
        if "old_init" not in st:
            st["old_init"] = self.p.copy()
        if self.momentum != 0:
            if "momentum_buffer" not in st:
                buf = st["momentum_buffer"] = d_p.copy()
            else:
                buf = st["momentum_buffer"]
                buf *= self.momentum
                buf += d_p
            d_p = buf  # an alias: what follows changes the buffer
        if self.mu != 0:
            d_p += self.mu * (self.p - st["old_init"])
        if "cum_grad" not in st:
            st["cum_grad"] = d_p.copy()
            st["cum_grad"] *= self.lr
        else:
            st["cum_grad"] += self.lr * d_p
        self.p -= self.lr * d_p
        if self.momentum != 0:
            self.local_counter = self.local_counter * self.momentum + 1
            self.local_normalizing_vec += self.local_counter
        etamu = self.lr * self.mu
        if etamu != 0:
            self.local_normalizing_vec *= 1 - etamu
            self.local_normalizing_vec += 1
        if self.momentum == 0 and etamu == 0:
            self.local_normalizing_vec += 1
        self.local_steps += 1


def nova_average(workers: list[NovaWorker], *, float32_tau_eff: bool = True) -> dict:
    """``FedNova.average`` over all workers (``dist.all_reduce`` = a sum in worker order); returns diagnostics.

    ``float32_tau_eff``: the code builds ``torch.tensor(python_float)``, i.e. float32 (torch's default dtype),
    before the all-reduce, so its ``τ_eff`` carries a float32 rounding; ``False`` keeps float64.
    """
    rnd = np.float32 if float32_tau_eff else np.float64
    parts = [w.local_steps * w.ratio if w.mu != 0 else w.local_normalizing_vec * w.ratio for w in workers]
    tau_eff = float(sum((rnd(x) for x in parts), rnd(0.0)))
    norms = [w.local_normalizing_vec for w in workers]
    for w in workers:
        w.state["cum_grad"] *= w.ratio * (tau_eff / w.local_normalizing_vec)
    total = sum(w.state["cum_grad"] for w in workers)
    for w in workers:
        st = w.state
        if w.gmf != 0:
            if "global_momentum_buffer" not in st:
                buf = st["global_momentum_buffer"] = total.copy()
                buf /= w.lr
            else:
                buf = st["global_momentum_buffer"]
                buf *= w.gmf
                buf += total / w.lr
            st["old_init"] -= w.lr * buf
        else:
            st["old_init"] -= total
        w.p = st["old_init"].copy()
        st["cum_grad"][:] = 0.0
        if "momentum_buffer" in st:
            st["momentum_buffer"][:] = 0.0
        w.local_counter = 0.0
        w.local_normalizing_vec = 0.0
        w.local_steps = 0
    return {"tau_eff": tau_eff, "norms": norms}


def official_nova_run(grads, w0, ratios, steps, lr, rounds, *, momentum=0.0, mu=0.0, gmf=0.0,
                      float32_tau_eff=True) -> tuple[np.ndarray, list[dict]]:
    """Server weights after every round (rounds + 1, d) of the official loop with client gradients ``grads[k](x)``."""
    workers = [NovaWorker(w0, r, lr, momentum, mu, gmf) for r in ratios]
    traj, info = [np.array(w0, dtype=np.float64)], []
    for _ in range(rounds):
        for w, g, tau in zip(workers, grads, steps, strict=True):
            for _ in range(int(tau)):
                w.step(g(w.p))
        info.append(nova_average(workers, float32_tau_eff=float32_tau_eff))
        traj.append(workers[0].p.copy())
    return np.array(traj), info


# --------------------------------------------------------------------------- FedDisco (MediaBrain-SJTU/FedDisco)
def disco_difference(counts: np.ndarray, metric: str, target: np.ndarray) -> np.ndarray:
    """``get_distribution_difference`` of ``disco.py`` (commit 48288a1) over all rows of ``counts``."""
    dist = counts / counts.sum(axis=1)[:, np.newaxis]
    if metric == "cosine":
        sim = dist.dot(target) / (np.linalg.norm(dist, axis=1) * np.linalg.norm(target))
        return 1.0 - sim
    if metric == "l1":
        return np.linalg.norm(dist - target, ord=1, axis=1)
    if metric == "l2":
        return np.linalg.norm(dist - target, axis=1)
    diff = scipy.special.kl_div(dist, target).sum(axis=1)
    return np.zeros(len(diff)) if np.sum(diff) == 0 else diff / np.sum(diff)


def disco_adjust(old_weight: np.ndarray, difference: np.ndarray, a: float, b: float) -> np.ndarray:
    """``disco_weight_adjusting`` of ``disco.py``, including its failure: when no bracket is positive the name
    ``new_weight`` is never bound and Python raises ``UnboundLocalError`` (a ``NameError``)."""
    weight_tmp = old_weight - a * difference + b
    if np.sum(weight_tmp > 0) > 0:
        new_weight = np.copy(weight_tmp)
        new_weight[new_weight < 0.0] = 0.0
    total = sum(new_weight[r] for r in range(len(old_weight)))  # unbound when no bracket is > 0, as upstream
    return np.array([new_weight[r] / total for r in range(len(old_weight))])


# --------------------------------------------------------------------------- FedAWARE (dunzeng/FedAWARE)
def _from2(v1v1: float, v1v2: float, v2v2: float) -> tuple[float, float]:
    """``MinNormSolver._min_norm_element_from2`` (with the code's 0.999 / 0.001 end points)."""
    if v1v2 >= v1v1:
        return 0.999, v1v1
    if v1v2 >= v2v2:
        return 0.001, v2v2
    gamma = -1.0 * ((v1v2 - v2v2) / (v1v1 + v2v2 - 2 * v1v2))
    return gamma, v2v2 + gamma * (v1v2 - v2v2)


def official_fw(vecs: np.ndarray, max_iter: int = 250, stop: float = 1e-5) -> np.ndarray:
    """``MinNormSolver.find_min_norm_element_FW`` of ``min_norm_solvers.py`` (commit 571484c): best pair, then
    Frank–Wolfe with the 2-point line search, stopping when ``‖Δλ‖₁ < 1e−5``.  With one vector the pair search
    never assigns its result and Python raises ``UnboundLocalError``, as upstream."""
    M = vecs @ vecs.T
    n = len(vecs)
    dmin = 1e8
    for i in range(n):
        for j in range(i + 1, n):
            c, d = _from2(M[i, i], M[i, j], M[j, j])
            if d < dmin:
                dmin, sol = d, [(i, j), c, d]
    lam = np.zeros(n)
    lam[sol[0][0]] = sol[1]  # unbound for n = 1, as upstream
    lam[sol[0][1]] = 1 - sol[1]
    if n < 3:
        return lam
    for _ in range(max_iter):
        t = int(np.argmin(M @ lam))
        nc, _nd = _from2(lam @ M @ lam, lam @ M[:, t], M[t, t])
        new = nc * lam
        new[t] += 1 - nc
        if np.sum(np.abs(new - lam)) < stop:
            return lam
        lam = new
    return lam


def exact_min_norm(vecs: np.ndarray) -> np.ndarray:
    """The exact min-norm point of the convex hull by enumerating supports (small Q only): on each support the
    affine minimiser solves the KKT system; the best feasible one is the optimum.  Independent of fedsde."""
    M = vecs @ vecs.T
    n = len(vecs)
    best, best_val = None, np.inf
    for k in range(1, n + 1):
        for S in itertools.combinations(range(n), k):
            idx = list(S)
            K = np.zeros((k + 1, k + 1))
            K[:k, :k] = M[np.ix_(idx, idx)]
            K[:k, k] = K[k, :k] = 1.0
            rhs = np.zeros(k + 1)
            rhs[k] = 1.0
            sol = np.linalg.lstsq(K, rhs, rcond=None)[0][:k]
            if np.any(sol < -1e-12):
                continue
            lam = np.zeros(n)
            lam[idx] = np.clip(sol, 0.0, None) / np.clip(sol, 0.0, None).sum()
            val = lam @ M @ lam
            if val < best_val - 1e-15:
                best, best_val = lam, val
    return best


class AwareServer:
    """The server of the authors' ``fedaware.py`` (release f509511): per-client momenta in the code's convention
    ``m ← (1 − α_c) m + α_c g`` with ``g = w − x``; once every client has been seen (``FeedbackSampler.explored``,
    set by the round that samples the last unseen client) a min-norm step on the unit-normalised momenta (zero
    norms divided by 1), ``w ← w − glr·Σ λ̂_i m̂_i`` with ``λ̂ = λ/Σλ`` (FedLab's ``fedavg_aggregate``); before that the
    data-size-weighted average of the participants' models.  ``startup=1`` samples everyone in round 0.
    ``solver`` replaces the code's Frank–Wolfe (:func:`official_fw`) by another one, e.g. :func:`exact_min_norm`.
    """

    def __init__(self, w0: np.ndarray, weights: np.ndarray, alpha_code: float = 0.5, glr: float = 1.0,
                 solver=official_fw):
        self.w = np.array(w0, dtype=np.float64)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.alpha, self.glr, self.solver = alpha_code, glr, solver
        self.momentum = np.zeros((len(self.weights), self.w.size))
        self.seen = np.zeros(len(self.weights), dtype=bool)
        self.lam = None

    def global_update(self, indices, models) -> np.ndarray:
        self.seen[list(indices)] = True
        explored = bool(self.seen.all())
        grads = [self.w - x for x in models]
        for g, i in zip(grads, indices, strict=True):
            self.momentum[i] = (1 - self.alpha) * self.momentum[i] + self.alpha * g
        if explored:
            norms = np.linalg.norm(self.momentum, axis=1)
            norms = np.where(norms == 0, 1.0, norms)
            mh = self.momentum / norms[:, None]
            lam = self.solver(mh)
            self.lam = lam
            est = (lam / lam.sum()) @ mh
            self.w = self.w - self.glr * est
        else:
            wt = self.weights[list(indices)]
            self.w = (wt / wt.sum()) @ np.array(models)
        return self.w
