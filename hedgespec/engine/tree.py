"""Drafting with one head of the pool: chain (depth K) and EAGLE-2/3 dynamic tree.

Both start from the *pending row* (root token x_c, target feature f_{c-1}) at position c−1 on top of the
head's committed cache; deeper steps feed the head its own pre-norm output (EAGLE-3 multi-step drafting).

Tree (EAGLE-2 style, what SGLang's ``select_top_k_tokens`` does): level 1 = the root's top-k children; at
each next level every frontier node proposes its top-k children, candidates are scored by cumulative draft
log-probability, all candidates enter the pool and the k best become the next frontier (the only nodes
expanded by a head forward). After ``depth`` levels the ``num_draft_tokens`` best-scored nodes are kept
(ancestor-closed: a node is taken only after its parent), the root's top-k children always among them (so
the first level's acceptance is exactly the tree γ of SPEC §1 Thm 2; EAGLE may prune one of them). Siblings are ordered by score, the order the
sampling verifier tries them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hedgespec.engine.pool import DrafterPool


@dataclass
class DraftTree:
    """Draft nodes in verification-row order (row 0 = root, rows 1..M = nodes)."""

    tokens: list[int]  # [M+1] target ids; tokens[0] = root token
    parents: list[int]  # [M+1] parent row; parents[0] = -1
    depth: list[int]  # [M+1] depth; depth[0] = 0

    @property
    def size(self) -> int:
        return len(self.tokens) - 1

    def children(self) -> list[list[int]]:
        ch: list[list[int]] = [[] for _ in self.tokens]
        for r in range(1, len(self.tokens)):
            ch[self.parents[r]].append(r)
        return ch

    def ancestor_mask(self) -> torch.Tensor:
        """[M+1, M+1] bool: row r may attend row c iff c is r or an ancestor of r."""
        m = len(self.tokens)
        mask = torch.eye(m, dtype=torch.bool)
        for r in range(1, m):
            mask[r] |= mask[self.parents[r]]
        return mask


def _draft_law(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return (logits / temperature).softmax(-1) if temperature > 0 else logits.softmax(-1)


@torch.no_grad()
def draft_chain(
    pool: DrafterPool, i: int, root: int, feat: torch.Tensor, emb_fn, k: int, temperature: float, gen: torch.Generator | None
) -> tuple[list[int], torch.Tensor]:
    """K chain drafts from head ``i``; returns draft target ids and their draft laws q [K, V] (target vocab).

    Greedy (temperature 0): d_j = argmax of the draft logits; sampling: d_j ~ softmax(logits / T).
    """
    c0 = pool.length  # committed rows; the pending row sits at position c0
    tok = torch.tensor([root])
    hid, from_target = pool.features(feat[None], [i]), True
    ek = ev = None
    drafts: list[int] = []
    qs = []
    for j in range(k):
        logits, out, kk, vv = pool.run([i], emb_fn(tok)[None], hid, from_target, torch.tensor([c0 + j]), ek, ev)
        ek = kk if ek is None else torch.cat([ek, kk], dim=2)
        ev = vv if ev is None else torch.cat([ev, vv], dim=2)
        law = pool.to_target(_draft_law(logits, temperature), [i])[0, 0]
        if temperature > 0:
            d = int(torch.multinomial(law, 1, generator=gen))
        else:
            d = int(pool.target_ids[i, int(torch.argmax(logits[0, 0]))])
        drafts.append(d)
        qs.append(law)
        tok, hid, from_target = torch.tensor([d]), out, False
    return drafts, torch.stack(qs)


@torch.no_grad()
def draft_chain_all(pool: DrafterPool, idx: list[int], root: int, feat: torch.Tensor, emb_fn, k: int, upto: int) -> torch.Tensor:
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


@torch.no_grad()
def draft_tree(
    pool: DrafterPool, i: int, root: int, feat: torch.Tensor, emb_fn, depth: int, topk: int, num_draft_tokens: int,
    upto: int | None = None,
) -> DraftTree:
    """EAGLE dynamic tree from head ``i`` (module docstring); scores use log-softmax of the draft logits."""
    c0 = pool.length if upto is None else upto
    # draft-local rows (root row + expanded nodes): token, parent draft-row, tree depth
    ek = ev = None
    row_anc: list[set[int]] = []  # ancestor sets (incl. self) over draft-local rows
    # candidates: (score, depth, token, parent candidate id, draft-row of the parent)
    cand_tok: list[int] = []
    cand_parent: list[int] = []  # candidate id of parent, -1 for root children
    cand_score: list[float] = []
    cand_depth: list[int] = []

    def forward(tokens: list[int], hidden: torch.Tensor, from_target: bool, depths: list[int], parents_local: list[int]):
        nonlocal ek, ev
        n_prev = 0 if ek is None else ek.shape[2]
        t = len(tokens)
        local = torch.zeros(t, n_prev + t, dtype=torch.bool)
        for r, pl in enumerate(parents_local):
            anc = (row_anc[pl] if pl >= 0 else set()) | {n_prev + r}
            row_anc.append(anc)
            local[r, sorted(anc)] = True
        mask = torch.cat([torch.ones(t, c0, dtype=torch.bool), local], dim=1)
        pos = torch.tensor([c0 + d for d in depths])
        logits, out, kk, vv = pool.run([i], emb_fn(torch.tensor(tokens))[None], hidden, from_target, pos, ek, ev, mask, upto=c0)
        ek = kk if ek is None else torch.cat([ek, kk], dim=2)
        ev = vv if ev is None else torch.cat([ev, vv], dim=2)
        return logits[0].log_softmax(-1), out

    # level 1: the root row
    logp, out = forward([root], pool.features(feat[None], [i]), True, [0], [-1])
    frontier = []  # (candidate id, draft-local row of the node once expanded)
    top = torch.topk(logp[0], min(topk, int(pool.valid[i].sum())))
    root_out = out[:, 0:1]
    for s, d in zip(top.values.tolist(), top.indices.tolist()):
        cand_tok.append(int(pool.target_ids[i, d])); cand_parent.append(-1); cand_score.append(s); cand_depth.append(1)
    frontier = list(range(len(cand_tok)))
    hidden_of: dict[int, torch.Tensor] = {c: root_out for c in frontier}  # hidden fed with candidate c's token
    local_row_of_parent: dict[int, int] = {c: 0 for c in frontier}
    for _level in range(2, depth + 1):
        toks = [cand_tok[c] for c in frontier]
        hid = torch.cat([hidden_of[c] for c in frontier], dim=1)
        base = 0 if ek is None else ek.shape[2]
        logp, out = forward(toks, hid, False, [cand_depth[c] for c in frontier], [local_row_of_parent[c] for c in frontier])
        kk = min(topk, int(pool.valid[i].sum()))
        top = torch.topk(logp, kk, dim=-1)
        scores = torch.tensor([cand_score[c] for c in frontier])[:, None] + top.values
        new_ids = []
        for fi, c in enumerate(frontier):
            for j in range(kk):
                cand_tok.append(int(pool.target_ids[i, int(top.indices[fi, j])]))
                cand_parent.append(c); cand_score.append(float(scores[fi, j])); cand_depth.append(cand_depth[c] + 1)
                new_ids.append(len(cand_tok) - 1)
                hidden_of[new_ids[-1]] = out[:, fi : fi + 1]
                local_row_of_parent[new_ids[-1]] = base + fi
        order = sorted(new_ids, key=lambda c: -cand_score[c])
        frontier = order[:topk]
    # keep the num_draft_tokens best, ancestor-closed, ties -> shallower first, then older
    # the root's top-k children are always kept, so level-1 acceptance is exactly γ_tree (SPEC §1 Thm 2)
    order = sorted(range(len(cand_tok)), key=lambda c: (cand_depth[c] > 1, -cand_score[c], cand_depth[c], c))
    chosen: list[int] = []
    taken: set[int] = set()
    for c in order:
        if len(chosen) >= num_draft_tokens:
            break
        if cand_parent[c] == -1 or cand_parent[c] in taken:
            chosen.append(c)
            taken.add(c)
    # rows: sort by (depth, parent row, score desc) so parents precede children and siblings are score-ordered
    chosen.sort(key=lambda c: (cand_depth[c], -cand_score[c], c))
    row_of = {c: r + 1 for r, c in enumerate(chosen)}
    return DraftTree(
        tokens=[root] + [cand_tok[c] for c in chosen],
        parents=[-1] + [0 if cand_parent[c] == -1 else row_of[cand_parent[c]] for c in chosen],
        depth=[0] + [cand_depth[c] for c in chosen],
    )
