"""A valid EAGLE draft-tree topology with no drafter behind it (torch only, no sglang import).

When every drafter of a HEDGESPEC pool is dropped the worker still verifies a placeholder draft (the last
committed token repeated), so decoding goes on target-only and lossless. For a chain that is SGLang's own
top-1 topology; for a tree (``topk = k > 1``) the topology must follow the conventions of SGLang's draft step,
which :func:`placeholder_tree` builds:

* candidates are numbered as ``organize_draft_results`` numbers them: step 0's k root children are 0..k−1; at
  step s ≥ 1 each of the k frontier nodes f chosen at step s−1 proposes k children, numbered
  k + (s−1)·k² + f·k + c;
* ``parent_list`` (``[B, (steps−1)·k + 1]``, empty for one step) holds −1, then step 0's frontier (every root
  child: 0..k−1), then per step s ≥ 1 the candidate numbers of its k frontier nodes, so candidate x's parent
  is ``parent_list[x // k]`` (0: the root);
* here the frontier chosen at step s ≥ 1 is the first child of each previous frontier node, so the first
  ``num_draft_tokens − 1`` candidates in number order are ancestor-closed and are the selected nodes
  (``top_scores_index``, sorted as SGLang sorts it).
"""

from __future__ import annotations

import torch


def placeholder_tree(
    bs: int, topk: int, num_steps: int, num_draft_tokens: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(parent_list [bs, (num_steps−1)·topk + 1], top_scores_index [bs, num_draft_tokens − 1])`` of a draft
    tree that SGLang's ``build_eagle_verify_input`` accepts (see the module docstring)."""
    k, steps, n = int(topk), int(num_steps), int(num_draft_tokens)
    if k < 2 or steps < 1 or n < 2:
        raise ValueError(
            f"a placeholder tree needs topk >= 2, num_steps >= 1, num_draft_tokens >= 2; got {k, steps, n}"
        )
    candidates = k + (steps - 1) * k * k
    if n - 1 > candidates:
        raise ValueError(f"num_draft_tokens - 1 = {n - 1} exceeds the {candidates} candidates of the draft step")
    parents = [-1, *range(k)]
    for s in range(1, steps - 1):
        parents += [k + (s - 1) * k * k + f * k for f in range(k)]
    width = (steps - 1) * k + 1 if steps > 1 else 0  # SGLang's parent_list is empty for one draft step
    parent_list = torch.tensor(parents[:width], dtype=torch.long, device=device)
    selected = torch.arange(n - 1, dtype=torch.long, device=device)
    return parent_list.expand(bs, -1).contiguous(), selected.expand(bs, -1).contiguous()
