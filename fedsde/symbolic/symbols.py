"""The sympy symbols of seed 002, Section 6 (quadratic clients), shared by every derivation.

Clock: round index ``n``, continuous time ``t = n·h``; the actual server step is ``s = h·η₀``.  Section 6 of
seed 002 uses ``h = η`` and ``s = 1`` (plain FedAvg, one round advances time by the client lr, not by ``Eη``).

Two layers of client symbols are used:

* **one client** (plain symbols ``U_k, a_k, Σ_k, p_k``): the E-step local-SGD law and every per-client closed
  form; these are what gets lambdified (numpy/torch) and applied elementwise to arrays of clients and, for
  diagonal d-dimensional problems, of coordinates;
* **all clients** (``IndexedBase`` ``U[k], a[k], Σ[k], p[k]`` with ``k = 1..Q``, ``Q`` a symbolic positive
  integer): the server round law and the SDE coefficients as ``Sum`` objects.

Assumptions: ``η, s, h > 0``; ``E`` a positive integer; ``U_k, Σ_k >= 0`` (so the ``r = 1`` and ``r² = 1``
branches of the geometric sums stay visible as ``Piecewise``); ``p_k > 0``; ``a_k, w`` real.  Creating the
symbols is cheap; no derivation runs at import.
"""

from __future__ import annotations

import sympy as sp

# ---------------------------------------------------------------------------------------------- scalars
eta = sp.Symbol("eta", positive=True)  #: client learning rate η
E = sp.Symbol("E", integer=True, positive=True)  #: local SGD steps per round
s = sp.Symbol("s", positive=True)  #: actual server step s = h·η₀ (1 = plain FedAvg)
h = sp.Symbol("h", positive=True)  #: time step of the lift: round n sits at t = n·h
t = sp.Symbol("t", nonnegative=True)  #: continuous time (t = n·h)
n = sp.Symbol("n", integer=True, nonnegative=True)  #: round index
lam = sp.Symbol("lambda", positive=True)  #: unit-change factor of the rescaling test

w = sp.Symbol("w", real=True)  #: server weights at the start of a round
m0 = sp.Symbol("m_init", real=True)  #: initial mean w₀(0)
v0 = sp.Symbol("v_init", nonnegative=True)  #: initial variance (0 for a deterministic start)

# summation indices
j = sp.Symbol("j", integer=True, nonnegative=True)
i = sp.Symbol("i", integer=True, nonnegative=True)
m = sp.Symbol("m", integer=True, nonnegative=True)

# ---------------------------------------------------------------------------------------------- one client
U = sp.Symbol("U_k", nonnegative=True)  #: client curvature (an eigenvalue / diagonal entry of U_k)
a = sp.Symbol("a_k", real=True)  #: client minimiser
Sigma = sp.Symbol("Sigma_k", nonnegative=True)  #: client gradient-noise variance
p = sp.Symbol("p_k", positive=True)  #: client weight
xi = sp.IndexedBase("xi", real=True)  #: local step noises ξ_0, ξ_1, … (i.i.d. N(0, Σ_k))
r = 1 - eta * U  #: per-step contraction of local SGD, r_k = 1 − ηU_k

# ---------------------------------------------------------------------------------------------- all clients
k = sp.Symbol("k", integer=True, positive=True)  #: client index 1..Q
Q = sp.Symbol("Q", integer=True, positive=True)  #: number of clients
U_ = sp.IndexedBase("U", nonnegative=True)
a_ = sp.IndexedBase("a", real=True)
Sigma_ = sp.IndexedBase("Sigma", nonnegative=True)
p_ = sp.IndexedBase("p", positive=True)

# ---------------------------------------------------------------------------------------------- aggregates
beta = sp.Symbol("beta", positive=True)  #: β = Σ_k p_k [1 − (1 − ηU_k)^E]  (so B = β, D = β/η)
C4 = sp.Symbol("C_4", real=True)  #: c = C4 = Σ_k p_k β_k a_k / β, the fixed point of the round map
sigma2 = sp.Symbol("sigma_eps2", positive=True)  #: Var ε = η² Σ_k p_k² Γ_k (noise of one round, s = 1)
b_paper = sp.Symbol("b_p", positive=True)  #: the bracket of eq. (4): E + Σ_k p_k √Σ_k S_k
D = sp.Symbol("D", positive=True)  #: the paper's D = Σ_k p_k Σ_{j<E} (1 − ηU_k)^j U_k  (= β/η)
K = sp.Symbol("K", real=True)  #: the paper's Σ_k p_k Σ_{j<E} (1 − ηU_k)^j U_k a_k  (= D·C4)
A = sp.Symbol("A", positive=True)  #: drift rate of a linear SDE dw = −A(w − c)dt + b dB
c = sp.Symbol("c", real=True)  #: centre of a linear SDE
b2 = sp.Symbol("b2", positive=True)  #: squared diffusion b² of a linear SDE

#: LaTeX names for symbols whose plain names are kept short for ``str`` output
LATEX_NAMES: dict[sp.Basic, str] = {
    eta: r"\eta",
    lam: r"\lambda",
    m0: r"w_0(0)",
    v0: r"v_0(0)",
    U: r"U_k",
    a: r"a_k",
    Sigma: r"\Sigma_k",
    p: r"p_k",
    beta: r"\beta",
    C4: r"C_4",
    sigma2: r"\sigma_\varepsilon^2",
    b_paper: r"b_p",
    b2: r"b^2",
}

#: One-client symbols → their indexed counterparts (client ``k`` of ``Q``).
TO_INDEXED: dict[sp.Basic, sp.Basic] = {U: U_[k], a: a_[k], Sigma: Sigma_[k], p: p_[k]}
