"""HedgeSpec: full-information drafter selection with a no-regret learner under delayed feedback.

Per request (the paper's regret guarantees are per query): a base learner (NormalHedge by default) over the N
drafters, wrapped in a delayed-feedback reduction (FIFO queue by default, or BOLD); each round the
drafter is the argmax (or a sample) of the current weights; after verification the γ matrix of the
emitted positions goes into the :class:`~hedgespec.feedback.FeedbackLedger`, which releases ETAP/EAL loss
vectors as their windows complete (never on a censored window).

Label-efficient HedgeSpec (``epsilon < 1``; the label-efficient prediction reduction of Cesa-Bianchi, Lugosi &
Stoltz 2005). Before each round the selector flips Z ~ Bernoulli(ε), independent of everything else, and sets
``Decision.evaluate = Z`` so the runner may skip the pool evaluation (only the chosen drafter's outcome comes
back). Every position t of the round feeds the learner ℓ̃_t = ℓ_t Z/ε (the zero vector when Z = 0, whether or not
γ came back), so E[ℓ̃_t | past, round] = ℓ_t: unbiased for the ETAP loss under any decoding. What is proven, for
every fixed drafter i and the expected regret E[Σ_t w_t·ℓ_t − Σ_t ℓ_{t,i}] of the weights (T positions, no delay;
w_t·ℓ_t is the expected loss of ``choice="sample"``; ``"argmax"`` follows the leader of the weighted cumulative
losses, for which none of these bounds is claimed):

* ``learner="hedge"`` uses :class:`~hedgespec.learners.LabelEfficientHedge` (η_t = sqrt(ε ln N / t)):
  E regret ≤ 2 sqrt((T+1) ln N / ε), the textbook case (fixed horizon: sqrt(2 T ln N / ε), Cesa-Bianchi,
  Lugosi & Stoltz 2005).
* ``learner="normal_hedge"`` (default): NormalHedge's weights are invariant to scaling all losses (R → R/ε gives
  c → c/ε²), so the 1/ε changes nothing and it runs exactly as NormalHedge on Z_t ℓ_t ∈ [0, 1], which leaves
  its state unchanged on Z = 0 positions. Its deterministic bound (Chaudhuri, Freund & Hsu 2009, Thm 1:
  O(sqrt(Q ln N) + ln² N) after Q non-trivial rounds) thus holds on the queried positions, and taking
  expectations (E[Z_t(w_t·ℓ_t − ℓ_{t,i})] = ε E[w_t·ℓ_t − ℓ_{t,i}], E Q = εT, Jensen) gives
  E regret = O(sqrt(T ln N / ε) + ln² N / ε). This is a bound on the pseudo-regret max_i E[·]; it equals the
  expected regret to the best drafter in hindsight when losses are oblivious (greedy decoding: γ is a function
  of the position on the fixed greedy trajectory), not in general under sampling.
* Not proven here: the delayed-feedback reductions (``Queued``, ``Bold``) are applied to the weighted sequence as
  the paper applies them to the full one, with no new analysis of their combination. For the EAL loss a weighted
  position needs γ at t..t+K−1, so a round with Z = 1 also forces the evaluation of the rounds that complete its
  windows (their own positions keep weight Z/ε of their own coins); ℓ_t is then unbiased when γ is oblivious
  (greedy), while under sampling a window's later rows may depend on Z through later decisions.

Warm start from a prior (``prior``, ``prior_alpha``). Each request's NormalHedge starts from
π = (1 − α) p + α/N instead of uniform weights (:class:`~hedgespec.learners.NormalHedge` with ``prior``), where p is

* ``"uniform"`` (default): π uniform, decision for decision today's HedgeSpec;
* ``"router"``: the prompt router's posterior over domains for this request's prompt (TF-IDF + logistic
  regression, :mod:`hedgespec.selectors.router`), each domain's mass on its drafter (:class:`RouterPrior`);
* ``"running"``: the mean of the final weights of the requests this prior source has seen end (:class:`RunningPrior`;
  uniform for the first request), state across requests;
* a sequence of N probabilities: a fixed prior.

What is claimed, per request and against every drafter i: NormalHedge's bound with ln N replaced by ln(1/π_i) in
its leading term, O(sqrt(T (1 + ln(1/π_i))) + ln² M) after T losses for a prior on a grid of 1/M (Chaudhuri,
Freund & Hsu 2009, Thm 1, by replicating drafters; derivation in :class:`~hedgespec.learners.NormalHedge`), with
ln(1/π_i) <= ln(N/α) whatever p: a wrong prior costs at most ln(1/α) more than uniform in that term, a right one
saves up to ln N − ln(1/π_i). Delayed feedback adds what it adds to uniform HedgeSpec (the reductions use the
base learner's bound as a black box): BOLD runs at most D = 2K+2 base learners, each warm-started at π and fed a
subsequence of T_j positions, so its regret is at most Σ_j of their bounds, O(sqrt(D T (1 + ln(1/π_i))) + D ln² M);
the queue reduction adds the delay term of Joulani, György & Szepesvári (2013) in their stochastic setting. The
prior is fixed at ``begin_request`` (router: a function of the prompt; running: of earlier requests), so within a
request it is a constant, as the bound needs. ``prior`` applies to ``learner="normal_hedge"`` only.

``evaluation="adaptive"`` is a heuristic with no guarantee: evaluate while the largest weight is below
``threshold``, else once every ``recheck`` rounds; evaluated rounds feed their plain losses, skipped rounds
none (the skip pattern depends on the losses, so the fed losses are biased).

``late=True`` (with ``evaluation="adaptive"``) loses nothing instead: a skipped round's positions wait in the
ledger (:meth:`~hedgespec.feedback.FeedbackLedger.add_pending`) and its γ arrives with the next evaluated round
(``RoundFeedback.late``: the engine's catch-up pass of the lagging heads computes exactly the rows a full
evaluation would have, so the extra information costs no extra drafter pass). The learner then gets every
position's true loss, in order, only later: HedgeSpec under delayed feedback, which is the setting the delay
reductions are for. A skipped round's losses arrive at most ``recheck`` rounds after its decision (plus the EAL
window), so with ``delay="bold"`` at most D = recheck + 2K + 1 predictions are outstanding and BOLD's bound
applies (Joulani, György & Szepesvári 2013, Thm 1: regret ≤ Σ_j of the base learner's bound over the D + 1
subsequences, O(sqrt(D T ln N)) for NormalHedge); the skip rule decides only *when* feedback arrives, never which
losses are fed. For the default queue reduction no bound is claimed, as for full-information HedgeSpec. Positions
still waiting when the request ends are dropped (censored, like an incomplete EAL window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from hedgespec.feedback import OBJECTIVES, TAIL_POLICIES, FeedbackLedger
from hedgespec.learners import (
    LEARNERS,
    Bold,
    LabelEfficientHedge,
    NormalHedge,
    Queued,
    check_alpha,
    check_prior,
    make_learner,
    mix_prior,
)
from hedgespec.selectors._rng import argmax_random_ties, request_rng
from hedgespec.selectors.base import BaseSelector
from hedgespec.types import Decision, RequestContext, RoundFeedback

DELAYS = ("queue", "bold")
CHOICES = ("argmax", "sample")
EVALUATIONS = ("random", "adaptive")  # label-efficient coin with probability epsilon | weight-threshold heuristic
PRIORS = ("uniform", "router", "running")


class PriorSource(Protocol):
    """Where a request's prior comes from: ``raw`` at its start (None: uniform), ``record`` its final weights."""

    def raw(self, n: int, ctx: RequestContext) -> np.ndarray | None: ...

    def record(self, weights: np.ndarray) -> None: ...


class RouterPrior:
    """The router's posterior P(domain | prompt) (``classifier.predict_proba``, classes ``classifier.classes_``),
    each domain's mass on ``drafter_of_domain[domain]``; domains without a drafter go to ``fallback`` (or are
    dropped when it is None)."""

    def __init__(self, classifier: Any, drafter_of_domain: Mapping[str, int], fallback: int | None = None) -> None:
        if not hasattr(classifier, "predict_proba") or not hasattr(classifier, "classes_"):
            raise ValueError("RouterPrior needs a fitted probabilistic classifier (predict_proba and classes_)")
        if not drafter_of_domain:
            raise ValueError("RouterPrior: drafter_of_domain must map at least one domain to a drafter index")
        self.classifier, self.drafter_of_domain, self.fallback = classifier, dict(drafter_of_domain), fallback

    def raw(self, n: int, ctx: RequestContext) -> np.ndarray | None:
        if ctx.prompt is None:
            raise ValueError("HedgeSpec prior='router' needs the prompt text: pass RequestContext(prompt=...)")
        idx = [*self.drafter_of_domain.values(), *([] if self.fallback is None else [self.fallback])]
        if any(not 0 <= i < n for i in idx):
            raise ValueError(f"RouterPrior: drafter indices {idx} out of range for a pool of {n}")
        proba = np.asarray(self.classifier.predict_proba([ctx.prompt])[0], dtype=np.float64)
        p = np.zeros(n)
        for c, m in zip(self.classifier.classes_, proba):
            j = self.drafter_of_domain.get(str(c), self.fallback)
            if j is not None:
                p[j] += m
        return p / p.sum() if p.sum() > 0.0 else None

    def record(self, weights: np.ndarray) -> None:
        return None


class RunningPrior:
    """The mean of the final weights of the requests recorded so far (None, i.e. uniform, before the first)."""

    def __init__(self) -> None:
        self.total: np.ndarray | None = None
        self.count = 0

    def raw(self, n: int, ctx: RequestContext) -> np.ndarray | None:
        if self.total is None:
            return None
        if self.total.shape != (n,):
            raise ValueError(f"prior='running' holds weights over {self.total.size} drafters, the pool has {n}")
        return self.total / self.count

    def record(self, weights: np.ndarray) -> None:
        w = np.asarray(weights, dtype=np.float64)
        self.total = w.copy() if self.total is None else self.total + w
        self.count += 1


def check_prior_options(prior: object, alpha: object, learner: str, source: object) -> PriorSource | None:
    """Validate the prior options (shared by the per-request and the batched selector); returns the source
    (None: no prior, or a fixed one)."""
    check_alpha(alpha)
    if isinstance(prior, str):
        if prior not in PRIORS:
            raise ValueError(f"HedgeSpec prior must be one of {list(PRIORS)} or N probabilities, got {prior!r}")
    else:
        check_prior(prior, len(prior) if isinstance(prior, Sequence | np.ndarray) else -1)
    if prior != "uniform" and learner != "normal_hedge":
        raise ValueError(f"HedgeSpec prior={prior!r} needs learner='normal_hedge', got learner={learner!r}")
    if prior == "router":
        if source is None:
            raise ValueError(
                "HedgeSpec prior='router' needs prior_source=RouterPrior(classifier, drafter_of_domain) (scripts/"
                "bench.py builds it from the data recipes, as for selector=router)"
            )
        return source  # type: ignore[return-value]
    if prior == "running":
        return source if source is not None else RunningPrior()  # type: ignore[return-value]
    return None


def request_prior(prior: object, source: PriorSource | None, n: int, alpha: float, ctx: RequestContext):  # type: ignore[no-untyped-def]
    """This request's mixed prior π (None: uniform, the code path of NormalHedge without a prior)."""
    if isinstance(prior, str) and prior == "uniform":
        return None
    if not isinstance(prior, str):
        p = np.asarray(prior, dtype=np.float64)
        if p.shape != (n,):
            raise ValueError(f"HedgeSpec prior has {p.size} entries, the pool has {n} drafters: give one per drafter")
    else:
        p = source.raw(n, ctx)  # type: ignore[union-attr]
    return None if p is None else mix_prior(p, n, alpha)


def _check_policy(epsilon: float, evaluation: str, threshold: float, recheck: int) -> float:
    """Validate the evaluation policy's knobs; returns epsilon as a float."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating)) or not 0.0 < epsilon <= 1.0:
        raise ValueError(
            f"HedgeSpec epsilon (probability of evaluating the pool in a round) must be in (0, 1], got {epsilon!r}"
        )
    if evaluation not in EVALUATIONS:
        raise ValueError(f"HedgeSpec evaluation must be one of {list(EVALUATIONS)}, got {evaluation!r}")
    if evaluation == "adaptive" and float(epsilon) != 1.0:
        raise ValueError(f"HedgeSpec epsilon={epsilon!r} applies to evaluation='random' only; 'adaptive' takes none")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
        raise ValueError(
            f"HedgeSpec threshold (weight above which evaluation is skipped) must be in (0, 1], got {threshold!r}"
        )
    if isinstance(recheck, bool) or not isinstance(recheck, int) or recheck < 1:
        raise ValueError(
            f"HedgeSpec recheck (evaluate at least every recheck rounds) must be an int >= 1, got {recheck!r}"
        )
    return float(epsilon)


def check_options(objective: str, learner: str, delay: str, choice: str, tail_policy: str) -> None:
    """HedgeSpec's string options (shared by the per-request and the batched selector); a bad one is named."""
    for val, allowed, what in (
        (objective, OBJECTIVES, "objective"),
        (learner, tuple(LEARNERS), "learner"),
        (delay, DELAYS, "delay"),
        (choice, CHOICES, "choice"),
        (tail_policy, TAIL_POLICIES, "tail_policy"),
    ):
        if val not in allowed:
            raise ValueError(f"HedgeSpec {what} must be one of {list(allowed)}, got {val!r}")


class HedgeSpec(BaseSelector):
    name = "hedgespec"
    full_information = True

    def __init__(
        self,
        objective: str = "etap",
        learner: str = "normal_hedge",
        delay: str = "queue",
        choice: str = "argmax",
        tail_policy: str = "drop",
        seed: int = 0,
        epsilon: float = 1.0,
        evaluation: str = "random",
        threshold: float = 0.9,
        recheck: int = 8,
        prior: str | Sequence[float] = "uniform",
        prior_alpha: float = 0.5,
        prior_source: PriorSource | None = None,
        late: bool = False,
    ) -> None:
        super().__init__()
        check_options(objective, learner, delay, choice, tail_policy)
        if not isinstance(late, bool):
            raise ValueError(f"HedgeSpec late must be true or false, got {late!r}")
        if late and evaluation != "adaptive":
            raise ValueError(
                f"HedgeSpec late=true delivers skipped rounds' γ later and applies to evaluation='adaptive' only "
                f"(evaluation={evaluation!r} feeds importance-weighted losses instead)"
            )
        #: a runner delivers skipped rounds' γ with the next evaluated round (``RoundFeedback.late``)
        self.late_feedback = late
        self.prior_source = check_prior_options(prior, prior_alpha, learner, prior_source)
        self.prior = prior if isinstance(prior, str) else [float(x) for x in prior]
        self.prior_alpha = float(prior_alpha)
        self.pi: np.ndarray | None = None  # the current request's prior (None: uniform)
        self.objective, self.learner_name, self.delay, self.choice = objective, learner, delay, choice
        self.tail_policy, self.seed = tail_policy, seed
        self.epsilon = _check_policy(epsilon, evaluation, threshold, recheck)
        self.evaluation, self.threshold, self.recheck = evaluation, float(threshold), recheck
        #: "always" (full information every round, the paper's HedgeSpec), "random" (ε < 1) or "adaptive"
        self.policy = "adaptive" if evaluation == "adaptive" else ("always" if self.epsilon == 1.0 else "random")
        base = "hedgespec" if objective == "etap" else "hedgespec_eal"
        self.name = base + {"always": "", "random": "_le", "adaptive": "_adaptive"}[self.policy] + ("_late" * late)
        self.evaluated_rounds = 0  # rounds of the current request whose evaluation this selector asked for

    def _reset(self) -> None:
        self.pi = request_prior(self.prior, self.prior_source, self.n, self.prior_alpha, self.ctx)
        self.rng = request_rng(self.seed, self.ctx.request_id)
        self.ledger = FeedbackLedger(self.n, self.k, self.objective, self.tail_policy)
        if self.delay == "queue":
            self.reduction: Queued | Bold = Queued(self._learner())
        else:
            # A round's losses complete at most K positions (≤ K rounds) after it, so K+1 outstanding
            # predictions suffice; 2K+1 (a loss completes at most 2K positions after its decision) is the
            # safe bound.
            # late feedback: a skipped round's losses come with the evaluation at most `recheck` rounds later
            self.reduction = Bold(self._learner, 2 * self.k + 1 + (self.recheck if self.late_feedback else 0))
        self._weights_of: dict[int, np.ndarray] = {}
        self._remaining: dict[int, int] = {}
        # label-efficient state: coin stream (its own, so the tie-breaking stream is the ε = 1 one), importance
        # weight per outstanding ticket, last position whose γ a weighted EAL window needs, evaluation counters
        self._coins = request_rng(self.seed, self.ctx.request_id).spawn(1)[0] if self.policy == "random" else None
        self._weight_of: dict[int, float] = {}
        self._need_through = -1
        self._since_eval = 0
        self.evaluated_rounds = 0

    def _learner(self):  # type: ignore[no-untyped-def]
        if self.policy == "random" and self.learner_name == "hedge":
            return LabelEfficientHedge(self.n, self.epsilon)  # the step for importance-weighted losses
        if self.pi is not None:
            return NormalHedge(self.n, prior=self.pi)
        return make_learner(self.learner_name, self.n)

    def select(self) -> Decision:
        ticket, w = self.reduction.predict()
        w = np.array(w, copy=True)
        self._weights_of[ticket] = w
        i = argmax_random_ties(w, self.rng) if self.choice == "argmax" else int(self.rng.choice(self.n, p=w))
        if self.policy == "always":
            return Decision(i, tuple(float(x) for x in w), ticket)
        evaluate = self._plan_round(ticket, w)
        return Decision(i, tuple(float(x) for x in w), ticket, evaluate)

    def _plan_round(self, ticket: int, w: np.ndarray) -> bool:
        """Draw this round's evaluation (before it runs); store its importance weight; whether to evaluate."""
        if self.policy == "random":
            coin = bool(self._coins.random() < self.epsilon)
            weight = 1.0 / self.epsilon if coin else 0.0
        else:
            coin = float(w.max()) < self.threshold or self._since_eval + 1 >= self.recheck
            weight = 1.0 if coin or self.late_feedback else 0.0  # late: a skipped round's γ still counts in full
        forced = self.objective == "eal" and self._need_through >= self.ledger.verified  # complete weighted windows
        self._weight_of[ticket] = weight
        evaluate = coin or forced
        self._since_eval = 0 if evaluate else self._since_eval + 1
        self.evaluated_rounds += int(evaluate)
        return evaluate

    def _observe(self, fb: RoundFeedback) -> None:
        ticket = fb.decision.ticket
        if fb.late and not self.late_feedback:
            raise ValueError("HedgeSpec got RoundFeedback.late without late=true")
        if self.policy != "always":
            self._observe_label_efficient(fb, self._weight_of.pop(ticket, 1.0))
            return
        if fb.gamma is None:
            raise ValueError("HedgeSpec needs full-information feedback: RoundFeedback.gamma is None")
        self._remaining[ticket] = self._remaining.get(ticket, 0) + int(np.asarray(fb.gamma).shape[0])
        self._apply(self.ledger.add_round(fb.start, fb.gamma, ticket))

    def _observe_label_efficient(self, fb: RoundFeedback, weight: float) -> None:
        """Weighted γ rows (weight Z/ε, or 1/0 for the adaptive rule) or, without γ, an unobserved round."""
        ticket = fb.decision.ticket
        for late in fb.late:  # earlier skipped rounds first: their positions come before this round's
            self._apply(self.ledger.fill(late.start, late.gamma))
        if fb.gamma is None:
            if fb.decision.evaluate:
                raise ValueError(
                    "HedgeSpec asked for this round's evaluation (Decision.evaluate) but RoundFeedback.gamma is None"
                )
            add = self.ledger.add_pending if self.late_feedback else self.ledger.add_unobserved
            rows, completed = int(fb.emitted), add(fb.start, int(fb.emitted), ticket)
        else:
            rows = int(np.asarray(fb.gamma).shape[0])
            completed = self.ledger.add_round(fb.start, fb.gamma, ticket, weight=weight)
        if weight > 0.0 and self.objective == "eal" and not self.late_feedback:  # late: the windows fill later
            self._need_through = max(self._need_through, fb.start + rows - 1 + self.k - 1)
        self._remaining[ticket] = self._remaining.get(ticket, 0) + rows
        self._apply(completed)

    def _apply(self, completed) -> None:  # type: ignore[no-untyped-def]
        for c in completed:
            self.reduction.feedback(c.ticket, c.loss, self._weights_of[c.ticket])
            self._remaining[c.ticket] -= 1
            if self._remaining[c.ticket] == 0:
                self.reduction.release(c.ticket)
                del self._remaining[c.ticket], self._weights_of[c.ticket]

    def end_request(self) -> None:
        self._apply(self.ledger.finish())
        for t in list(self._remaining):  # dropped tail windows: nothing more will come for these
            self.reduction.release(t)
        self._remaining.clear()
        if self.prior_source is not None:
            self.prior_source.record(self.weights())

    def weights(self) -> np.ndarray:
        return np.array(self.reduction.weights(), copy=True)

    def state_dict(self) -> dict[str, Any]:
        d = super().state_dict()
        d.update(objective=self.objective, learner=self.learner_name, delay=self.delay, choice=self.choice)
        if self.prior != "uniform":
            d.update(prior=self.prior, prior_alpha=self.prior_alpha)
            if self.pi is not None:
                d["prior_weights"] = [float(x) for x in self.pi]
        if self.policy != "always":
            d.update(evaluation=self.evaluation, epsilon=self.epsilon, evaluated_rounds=self.evaluated_rounds)
            if self.policy == "adaptive":
                d.update(threshold=self.threshold, recheck=self.recheck, late=self.late_feedback)
        if self.n:
            d["weights"] = [float(x) for x in self.weights()]
        return d
