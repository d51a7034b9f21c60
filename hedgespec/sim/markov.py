"""Synthetic full-information environment: Markov "targets" per domain and a pool of domain drafters.

The target of domain d emits token u with p_u = softmax(β (B + A_d)[x_{u−1}] + τ z_u): B is shared
"language" structure, A_d the domain's own, and z_u a per-request, per-position field standing in for the
long context a real LLM conditions on (without it greedy decoding of a first-order chain cycles).
A drafter trained on domain h models the target as β (B + A_h)[x] + ρ τ z_u + σ ζ_u (it sees the
context only partly, ρ < 1, and has its own error σ): in its home domain it is close to the target,
elsewhere it carries the wrong domain component. The generalist knows every domain partly,
β (B + λ A_d)[x]. A realistic pool (see :func:`make_pool`) has the generalist, one expert per domain and
weaker variants of the experts (larger σ), not a rigged case.

Pools are nested and requests common across pool sizes (common random numbers): the pool of n drafters is the
first n of the canonical order, drafter i's parameters (E_i) and its context noise (ζ_{i,u}) come from streams
keyed by (seed, i), and a request's target side (domain, first token, z_u) and its per-position sampling coins
come from the request's seed alone. So the n-drafter world is exactly the first n drafters of any larger one, on
the same requests, and comparisons across N compare the same randomness.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DOMAINS = ("python", "math", "biology", "chemistry", "medqa", "cnndm", "sql")
CONTEXT_PAD = 64  # positions drawn past a request's length: a round may draft (and take a bonus) beyond its end


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
    """The first n drafters of the canonical pool: the generalist, one expert per domain, then weaker variants.

    The generalist comes first so that every pool holds it (a pool of 2 = generalist + one expert) and every
    pool is a prefix of every larger one (nested pools: make_pool(n) == make_pool(m)[:n] for n <= m).
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"pool size n must be an int >= 1, got {n!r}")
    if not isinstance(n_domains, int) or n_domains < 1:
        raise ValueError(f"n_domains must be an int >= 1, got {n_domains!r}")
    names = list(DOMAINS[:n_domains]) + [f"domain{j}" for j in range(len(DOMAINS), n_domains)]
    specs = [DrafterSpec("general", -1, 0.5, 0.6)] + [DrafterSpec(names[d], d, 0.5) for d in range(n_domains)]
    level = 1
    while len(specs) < n:
        specs += [DrafterSpec(f"{names[d]}-weak{level}", d, 0.5 + 0.5 * level) for d in range(n_domains)]
        level += 1
    return specs[:n]


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
    """Build the world deterministically from ``seed``: the same targets for every n, and nested drafters.

    Drafter i's training error E_i comes from its own stream keyed by (seed, i), so the first n drafters of a
    world of m >= n drafters are exactly the n-drafter world.
    """
    if not isinstance(vocab, int) or vocab < 2:
        raise ValueError(f"vocab must be an int >= 2, got {vocab!r}")
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((vocab, vocab))
    domain = domain_scale * rng.standard_normal((n_domains, vocab, vocab))
    specs = make_pool(n_drafters, n_domains)
    errors = np.stack([np.random.default_rng([seed, 1, i]).standard_normal((vocab, vocab)) for i in range(len(specs))])
    return MarkovWorld(vocab, beta, tau, rho, base, domain, specs, errors)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class Request:
    """One request: domain, length, its context field (z_u, ζ_{i,u}) and sampling coins, drawn from its seed.

    The target side (first token, z_u) and the coins depend on the request's seed only, never on the pool;
    drafter i's noise ζ_{i,u} has its own stream keyed by (seed, i). ``coins[u]`` holds position u's three
    uniforms (draft, accept, resample) for chain speculative sampling (hedgespec/sim/runner.py): every run,
    whatever its selector or pool size, spends the same coins at the same generated position.
    """

    domain: int
    length: int
    seed: int
    world: MarkovWorld

    def __post_init__(self) -> None:
        rng = np.random.default_rng([self.seed, 7])
        self.horizon = self.length + CONTEXT_PAD
        w = self.world
        self.first = int(rng.integers(w.vocab))
        self.z = w.tau * rng.standard_normal((self.horizon, w.vocab))
        noise = [
            np.random.default_rng([self.seed, 8, i]).standard_normal((self.horizon, w.vocab))
            for i in range(w.n_drafters)
        ]
        self.zeta = np.stack(noise, axis=1)  # [horizon, N, V]
        self.coins = np.random.default_rng([self.seed, 11]).random((self.horizon, 3))
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
