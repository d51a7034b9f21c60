"""Drafting with one head of the pool: chain (depth K) and EAGLE-2/3 dynamic tree.

Both start from the *pending row* (root token x_c, target feature f_{c-1}) at position c−1 on top of the
head's committed cache; deeper steps feed the head its own pre-norm output (EAGLE-3 multi-step drafting). The
pending row's forward is read from :meth:`DrafterPool.root_row` when the pool pass that committed the rows before
it ran it too (the engine asks every pass for it).

Tree (EAGLE-2 style, what SGLang's ``select_top_k_tokens`` does): level 1 = the root's top-k children; at
each next level every frontier node proposes its top-k children, candidates are scored by cumulative draft
log-probability, all candidates enter the pool and the k best become the next frontier (the only nodes
expanded by a head forward). After ``num_steps`` levels the ``num_draft_tokens`` best-scored nodes are kept
(ancestor-closed: a node is taken only after its parent), the root's top-k children always among them, so
the first level's acceptance is exactly the tree γ of Theorem 2 of the HedgeSpec paper (EAGLE may prune one
of them). Siblings are ordered by score, the order the sampling verifier tries them.
"""

from __future__ import annotations

import torch

from hedgespec.decoding import DecodingConfig
from hedgespec.engine.pool import DrafterPool
from hedgespec.engine.records import DraftTree, SamplingState

__all__ = ["DraftTree", "draft_chain", "draft_chain_all", "draft_tree"]


def _draft_law(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return (logits / temperature).softmax(-1) if temperature > 0 else logits.softmax(-1)


@torch.no_grad()
def draft_chain(
    pool: DrafterPool, i: int, root: int, feat: torch.Tensor, emb_fn, k: int, sampling: SamplingState
) -> tuple[list[int], torch.Tensor]:
    """K chain drafts from head ``i``; returns draft target ids and their draft laws q [K, V] (target vocab).

    Greedy (temperature 0): d_j = argmax of the draft logits; sampling: d_j ~ softmax(logits / T), drawn
    from the request's stream. The first step is read from :meth:`DrafterPool.root_row` when the pool's last
    pass ran it (K − 1 head forwards then).
    """
    temperature = sampling.params.temperature
    c0 = pool.length  # committed rows; the pending row sits at position c0
    tok = torch.tensor([root])
    first = pool.root_row(i, root)  # the first step, when the pass that committed the rows ran it
    hid, from_target = (pool.features(feat[None], [i]) if first is None else None), True
    ek = ev = None
    drafts: list[int] = []
    qs = []
    for j in range(k):
        if j == 0 and first is not None:
            logits, out, kk, vv = first
        else:
            logits, out, kk, vv = pool.run([i], emb_fn(tok)[None], hid, from_target, torch.tensor([c0 + j]), ek, ev)
        ek = kk if ek is None else torch.cat([ek, kk], dim=2)
        ev = vv if ev is None else torch.cat([ev, vv], dim=2)
        law = pool.to_target(_draft_law(logits, temperature), [i])[0, 0]
        if temperature > 0:
            d = int(torch.multinomial(law, 1, generator=sampling.gen))
        else:
            d = int(pool.target_ids[i, int(torch.argmax(logits[0, 0]))])
        drafts.append(d)
        qs.append(law)
        tok, hid, from_target = torch.tensor([d]), out, False
    return drafts, torch.stack(qs)


@torch.no_grad()
def draft_chain_all(
    pool: DrafterPool, idx: list[int], root: int, feat: torch.Tensor, emb_fn, k: int, upto: int
) -> torch.Tensor:
    """Greedy K-step chains of heads ``idx`` batched, from a round start with ``upto`` committed rows.

    Used for the full-counterfactual trace; returns target ids [len(idx), K].
    """
    tok = emb_fn(torch.tensor([root]))[None]
    hid, from_target = pool.features(feat[None], idx), True
    ek = ev = None
    out_ids = []
    for j in range(k):
        logits, out, kk, vv = pool.run(idx, tok, hid, from_target, torch.tensor([upto + j]), ek, ev, upto=upto)
        ek = kk if ek is None else torch.cat([ek, kk], dim=2)
        ev = vv if ev is None else torch.cat([ev, vv], dim=2)
        d = pool.target_ids[idx].gather(1, logits[:, 0].argmax(-1, keepdim=True))  # [n, 1]
        out_ids.append(d[:, 0])
        tok, hid, from_target = emb_fn(d[:, 0])[:, None], out, False
    return torch.stack(out_ids, dim=1)


class _TreeDraft:
    """One head's dynamic-tree drafting state: uncommitted KV rows, their ancestor sets, the candidates.

    Draft-local rows are the rows fed to the head (the root row, then each expanded frontier); candidates
    are every proposed node, with token, parent candidate (-1 under the root), cumulative score and depth.
    """

    def __init__(self, pool: DrafterPool, i: int, c0: int, emb_fn, topk: int) -> None:
        self.pool, self.i, self.c0, self.emb_fn, self.topk = pool, i, c0, emb_fn, topk
        self.kk = min(topk, int(pool.valid[i].sum()))  # children per node (at most the head's draft vocab)
        self.ek: torch.Tensor | None = None
        self.ev: torch.Tensor | None = None
        self.row_anc: list[set[int]] = []  # ancestor sets (incl. self) over draft-local rows
        self.tok: list[int] = []
        self.parent: list[int] = []
        self.score: list[float] = []
        self.depth: list[int] = []
        self.hidden_of: dict[int, torch.Tensor] = {}  # hidden state fed with candidate c's token
        self.row_of_parent: dict[int, int] = {}  # draft-local row whose output proposed candidate c

    @property
    def n_rows(self) -> int:
        return 0 if self.ek is None else int(self.ek.shape[2])

    def forward(
        self, tokens: list[int], hidden: torch.Tensor, from_target: bool, depths: list[int], parents_local: list[int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the head over new draft-local rows (tree-masked); returns log-probs [T, V_d] and outputs."""
        n_prev, t = self.n_rows, len(tokens)
        local = torch.zeros(t, n_prev + t, dtype=torch.bool)
        for r, pl in enumerate(parents_local):
            anc = (self.row_anc[pl] if pl >= 0 else set()) | {n_prev + r}
            self.row_anc.append(anc)
            local[r, sorted(anc)] = True
        mask = torch.cat([torch.ones(t, self.c0, dtype=torch.bool), local], dim=1)
        pos = torch.tensor([self.c0 + d for d in depths])
        emb = self.emb_fn(torch.tensor(tokens))[None]
        ek, ev = self.ek, self.ev
        logits, out, kk, vv = self.pool.run([self.i], emb, hidden, from_target, pos, ek, ev, mask, upto=self.c0)
        self.ek = kk if self.ek is None else torch.cat([self.ek, kk], dim=2)
        self.ev = vv if self.ev is None else torch.cat([self.ev, vv], dim=2)
        return logits[0].log_softmax(-1), out

    def _add(self, draft_id: int, parent: int, score: float, depth: int, hidden: torch.Tensor, row: int) -> int:
        self.tok.append(int(self.pool.target_ids[self.i, draft_id]))
        self.parent.append(parent)
        self.score.append(score)
        self.depth.append(depth)
        c = len(self.tok) - 1
        self.hidden_of[c], self.row_of_parent[c] = hidden, row
        return c

    def root_level(self, root: int, feat: torch.Tensor) -> list[int]:
        """Level 1: the root's top-k children; returns them (the first frontier). The root row's forward is read
        from :meth:`DrafterPool.root_row` when the pool's last pass ran it."""
        first = self.pool.root_row(self.i, root) if self.c0 == self.pool.length else None
        if first is None:
            logp, out = self.forward([root], self.pool.features(feat[None], [self.i]), True, [0], [-1])
        else:
            logits, out, self.ek, self.ev = first
            self.row_anc.append({0})
            logp = logits[0].log_softmax(-1)
        top = torch.topk(logp[0], self.kk)
        root_out = out[:, 0:1]
        return [self._add(d, -1, s, 1, root_out, 0) for s, d in zip(top.values.tolist(), top.indices.tolist())]

    def next_level(self, frontier: list[int]) -> list[int]:
        """Expand the frontier (one head forward); returns the k best new candidates (the next frontier)."""
        hid = torch.cat([self.hidden_of[c] for c in frontier], dim=1)
        base = self.n_rows
        logp, out = self.forward(
            [self.tok[c] for c in frontier],
            hid,
            False,
            [self.depth[c] for c in frontier],
            [self.row_of_parent[c] for c in frontier],
        )
        top = torch.topk(logp, self.kk, dim=-1)
        scores = torch.tensor([self.score[c] for c in frontier])[:, None] + top.values
        new_ids = [
            self._add(
                int(top.indices[fi, j]), c, float(scores[fi, j]), self.depth[c] + 1, out[:, fi : fi + 1], base + fi
            )
            for fi, c in enumerate(frontier)
            for j in range(self.kk)
        ]
        return sorted(new_ids, key=lambda c: -self.score[c])[: self.topk]

    def keep(self, root: int, num_draft_tokens: int) -> DraftTree:
        """The ``num_draft_tokens`` best candidates, ancestor-closed, as verification rows.

        Ties go shallower first, then older; the root's top-k children are always kept, so level-1
        acceptance is exactly the tree γ (Theorem 2 of the HedgeSpec paper).
        """
        order = sorted(range(len(self.tok)), key=lambda c: (self.depth[c] > 1, -self.score[c], self.depth[c], c))
        chosen: list[int] = []
        taken: set[int] = set()
        for c in order:
            if len(chosen) >= num_draft_tokens:
                break
            if self.parent[c] == -1 or self.parent[c] in taken:
                chosen.append(c)
                taken.add(c)
        # rows: sort by (depth, score desc) so parents precede children and siblings are score-ordered
        chosen.sort(key=lambda c: (self.depth[c], -self.score[c], c))
        row_of = {c: r + 1 for r, c in enumerate(chosen)}
        return DraftTree(
            tokens=[root] + [self.tok[c] for c in chosen],
            parents=[-1] + [0 if self.parent[c] == -1 else row_of[self.parent[c]] for c in chosen],
            depth=[0] + [self.depth[c] for c in chosen],
        )


@torch.no_grad()
def draft_tree(
    pool: DrafterPool, i: int, root: int, feat: torch.Tensor, emb_fn, decoding: DecodingConfig, upto: int | None = None
) -> DraftTree:
    """EAGLE dynamic tree from head ``i`` (module docstring); scores use log-softmax of the draft logits.

    ``upto``: draft from a round start with that many committed rows (the full-counterfactual trace).
    """
    tree = _TreeDraft(pool, i, pool.length if upto is None else upto, emb_fn, decoding.topk)
    frontier = tree.root_level(root, feat)
    for _level in range(2, decoding.num_steps + 1):
        frontier = tree.next_level(frontier)
    return tree.keep(root, decoding.num_draft_tokens)
