"""hedgespec.serving.placeholder_tree: the draft-tree topology the worker verifies when no drafter is left.

Checked through the tree-build kernel's CPU port (hedgespec.serving.cpu_kernels, the op SGLang's verify-input
build calls on CPU): every node hangs under the root through nodes of the tree, one level deeper than its parent,
and no deeper than the draft steps; and against SGLang's own numbering of candidates, rebuilt here from its
draft step's rules (k root children, then k children per frontier node, parents looked up as
``parent_list[x // k]``).
"""

from __future__ import annotations

import pytest
import torch

from hedgespec.serving import cpu_kernels as ck
from hedgespec.serving.placeholder_tree import placeholder_tree

SHAPES = [(2, 3, 6), (2, 3, 7), (4, 4, 16), (3, 1, 3), (2, 2, 5), (4, 5, 8), (2, 5, 10)]


def _build(parents: torch.Tensor, selected: torch.Tensor, k: int, steps: int, n: int, seq_lens: list[int]):
    bs = len(seq_lens)
    seq = torch.tensor(seq_lens)
    mask = torch.zeros(int(n * (seq.sum() + n * bs)), dtype=torch.bool)
    positions = torch.empty(bs * n, dtype=torch.long)
    links = torch.full((3, bs, n), -1, dtype=torch.long)
    ck.build_tree_kernel_efficient(parents, selected, seq, mask, positions, *links, k, steps, n, 0)
    return positions.view(bs, n), links[1], links[2]


@pytest.mark.parametrize("k,steps,n", SHAPES)
def test_every_node_hangs_under_the_root(k, steps, n):
    parents, selected = placeholder_tree(2, k, steps, n)
    assert tuple(parents.shape) == (2, (steps - 1) * k + 1 if steps > 1 else 0)
    assert tuple(selected.shape) == (2, n - 1)
    positions, next_token, next_sibling = _build(parents, selected, k, steps, n, [5, 9])
    for b, seq_len in enumerate((5, 9)):
        depth = {0: 0}
        frontier = [0]
        while frontier:  # walk the retrieval links from the root: first child, then its siblings
            node = frontier.pop()
            child = int(next_token[b, node])
            while child != -1:
                assert child not in depth, "a node is reached twice"
                depth[child] = depth[node] + 1
                frontier.append(child)
                child = int(next_sibling[b, child])
        assert sorted(depth) == list(range(n)), "every node is reachable from the root"
        assert max(depth.values()) <= steps
        assert positions[b].tolist() == [seq_len + depth[t] for t in range(n)]


@pytest.mark.parametrize("k,steps,n", SHAPES)
def test_candidates_are_numbered_as_sglangs_draft_step_numbers_them(k, steps, n):
    """Rebuild the candidate tree from the draft step's rules: root children 0..k-1; at step s >= 1, frontier
    node f's children k + (s-1)k^2 + f k + c; the chosen frontier's parent entries. Every selected candidate's
    parent entry must be the root (-1) or a selected candidate one level up."""
    parents, selected = placeholder_tree(1, k, steps, n)
    parents, selected = parents[0].tolist(), selected[0].tolist()
    assert selected == sorted(selected) and len(set(selected)) == n - 1
    level = {x: 1 for x in range(k)}
    for s in range(1, steps):
        for f in range(k):
            for c in range(k):
                level[k + (s - 1) * k * k + f * k + c] = s + 1
    for x in selected:
        parent = parents[x // k] if x // k else -1
        if parent == -1:
            assert level[x] == 1
        else:
            assert parent in selected and level[parent] == level[x] - 1, (x, parent)


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match="topk >= 2"):
        placeholder_tree(1, 1, 3, 4)
    with pytest.raises(ValueError, match="exceeds the 6 candidates"):
        placeholder_tree(1, 2, 2, 8)
