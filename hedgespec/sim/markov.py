"""Synthetic full-information environment: Markov "targets" per domain and a pool of domain drafters.

The target of domain d emits token u with p_u = softmax(β (B + A_d)[x_{u−1}] + τ z_u): B is shared
"language" structure, A_d the domain's own, and z_u a per-request, per-position field standing in for the
long context a real LLM conditions on (without it greedy decoding of a first-order chain cycles).
A drafter trained on domain h models the target as β (B + A_h)[x] + ρ τ z_u + σ ζ_u (it sees the
context only partly, ρ < 1, and has its own error σ): in its home domain it is close to the target,
elsewhere it carries the wrong domain component. The generalist knows every domain partly,
β (B + λ A_d)[x]. A realistic pool (see :func:`make_pool`) has one expert per domain, the generalist and
weaker variants of the experts (larger σ), not a rigged case.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DOMAINS = ("python", "math", "biology", "chemistry", "medqa", "cnndm", "sql")


@dataclass(frozen=True)
class DrafterSpec:
    name: str
    home: int  # home domain index, or -1 for the generalist
    sigma: float  # own error scale
    knowledge: float = 1.0  # λ for the generalist (fraction of each domain's structure it knows)


@dataclass
class MarkovWorld:
    """Target logit tables per domain and the drafters' model tables (all [V, V])."""

    vocab: int
    beta: float
    tau: float
    rho: float
    base: np.ndarray  # B
    domain: np.ndarray  # A_d, [D, V, V]
    drafters: list[DrafterSpec]
    errors: np.ndarray  # fixed "training error" E_i, [N, V, V]

    @property
    def n_domains(self) -> int:
        return self.domain.shape[0]

    @property
    def n_drafters(self) -> int:
        return len(self.drafters)

    def target_logits(self, d: int) -> np.ndarray:
        return self.beta * (self.base + self.domain[d])

    def drafter_logits(self, d: int) -> np.ndarray:
        """[N, V, V] drafter model logits when serving a request of domain d."""
        out = np.empty((self.n_drafters, self.vocab, self.vocab))
        for i, spec in enumerate(self.drafters):
            dom = self.domain[d] * spec.knowledge if spec.home < 0 else self.domain[spec.home]
            out[i] = self.beta * (self.base + dom) + spec.sigma * self.errors[i]
        return out


def make_pool(n: int, n_domains: int = len(DOMAINS)) -> list[DrafterSpec]:
    """The first n drafters of the canonical pool: experts, generalist, then weaker variants."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"pool size n must be an int >= 1, got {n!r}")
    names = list(DOMAINS[:n_domains]) + [f"domain{j}" for j in range(len(DOMAINS), n_domains)]
    specs: list[DrafterSpec] = []
    if n == 1:
        return [DrafterSpec("general", -1, 0.5, 0.6)]
    # n = 2..: the generalist always sits in the pool, experts first (a pool of 2 = one expert + generalist).
    experts = [DrafterSpec(f"{names[d]}", d, 0.5) for d in range(n_domains)]
    specs = experts[: min(n - 1, n_domains)] + [DrafterSpec("general", -1, 0.5, 0.6)]
    level = 1
    while len(specs) < n:
        for d in range(n_domains):
            if len(specs) == n:
                break
            specs.append(DrafterSpec(f"{names[d]}-weak{level}", d, 0.5 + 0.5 * level))
        level += 1
    return specs


def make_world(
    n_drafters: int,
    vocab: int = 48,
    n_domains: int = len(DOMAINS),
    beta: float = 2.0,
    domain_scale: float = 1.2,
    tau: float = 1.5,
    rho: float = 0.85,
    seed: int = 0,
) -> MarkovWorld:
    """Build the world deterministically from ``seed``; the same seed gives the same targets for every n."""
    if vocab < 2:
        raise ValueError(f"vocab must be >= 2, got {vocab}")
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((vocab, vocab))
    domain = domain_scale * rng.standard_normal((n_domains, vocab, vocab))
    specs = make_pool(n_drafters, n_domains)
    err_rng = np.random.default_rng([seed, 1])
    errors = err_rng.standard_normal((len(specs), vocab, vocab))  # drafter i's error depends on i only
    return MarkovWorld(vocab, beta, tau, rho, base, domain, specs, errors)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class Request:
    """One request: domain, length, and its context field (z_u, ζ_{i,u}) drawn from its own seed."""

    domain: int
    length: int
    seed: int
    world: MarkovWorld

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 7])
        horizon = self.length + 64
        w = self.world
        self.z = w.tau * rng.standard_normal((horizon, w.vocab))
        self.zeta = rng.standard_normal((horizon, w.n_drafters, w.vocab))
        self.first = int(rng.integers(w.vocab))
        self._tl = w.target_logits(self.domain)
        self._dl = w.drafter_logits(self.domain)
        self._sig = np.array([s.sigma for s in w.drafters])

    def p(self, u: int, prev: int) -> np.ndarray:
        """Target distribution at generated position u after token ``prev``."""
        return _softmax(self._tl[prev] + self.z[u])

    def q_all(self, u: int, prev: int) -> np.ndarray:
        """[N, V] every drafter's distribution at position u after ``prev``."""
        w = self.world
        return _softmax(self._dl[:, prev] + w.rho * self.z[u] + 0.5 * self._sig[:, None] * self.zeta[u])

    def q(self, i: int, u: int, prev: int) -> np.ndarray:
        w = self.world
        return _softmax(self._dl[i, prev] + w.rho * self.z[u] + 0.5 * self._sig[i] * self.zeta[u, i])


def make_requests(world: MarkovWorld, n_requests: int, length: int, seed: int = 0) -> list[Request]:
    """A mixed-domain stream: domains cycle through all D, order shuffled with ``seed``."""
    if n_requests < 1 or length < 2:
        raise ValueError(f"need n_requests >= 1 and length >= 2, got {n_requests}, {length}")
    rng = np.random.default_rng([seed, 3])
    domains = [j % world.n_domains for j in range(n_requests)]
    rng.shuffle(domains)
    return [Request(int(d), length, seed * 100003 + j, world) for j, d in enumerate(domains)]
