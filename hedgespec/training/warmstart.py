"""Draft initialisation for short budgets, handed to SpecForge as a weights-only warm start.

SpecForge starts an EAGLE-3 draft from random weights unless ``model.draft_checkpoint_path`` names a
pretrained draft directory (``config.json`` + safetensors with *every* draft weight; the embedding may be
missing).  With the CPU budgets (a few hundred steps) a random ``lm_head`` over the draft vocabulary is most
of what the run spends its steps on, so ``train.draft.init`` offers:

* ``scratch`` -- SpecForge's own random init (the paper's setting, and the GPU budget's);
* ``target_head`` -- random fc/midlayer, but ``lm_head`` = the target's output rows of the draft vocabulary
  and ``norm`` = the target's final norm: the draft then only has to learn to reproduce the target's last
  hidden state, which is what EAGLE's feature-level objective asks of it anyway;
* ``<drafter>`` (e.g. ``general``) -- every weight of that already-exported drafter of the same pool, with its
  ``lm_head`` rows re-indexed into this run's draft vocabulary (tokens it did not have get the target's rows):
  domain experts as fine-tunes of the generalist.

The directory is written once per run (``<run>/warm_start``) and used only for the first training segment;
a resumed run continues from its own checkpoint (SpecForge forbids both at once).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from hedgespec.io import atomic_dir
from hedgespec.training._specforge import require_specforge

SCRATCH = "scratch"
TARGET_HEAD = "target_head"


def draft_target_ids(mapping_path: Path) -> torch.Tensor:
    """Target token id of each draft id (``d + d2t[d]``, SpecForge's offset convention)."""
    m = torch.load(mapping_path, weights_only=True)
    d2t = m["d2t"].long()
    return torch.arange(d2t.numel()) + d2t


def target_head_and_norm(model: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's output matrix ``(V, H)`` and final RMSNorm weight ``(H,)`` (Llama-style decoders)."""
    out = model.get_output_embeddings()
    head = (out.weight if out is not None else model.get_input_embeddings().weight).detach().float().cpu()
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    norm = getattr(decoder, "norm", None)
    if norm is None or getattr(norm, "weight", None) is None:
        raise ValueError(
            f"train.draft.init={TARGET_HEAD!r} needs a decoder with a final `norm` (Llama-style); "
            f"{type(model).__name__} has none: use train.draft.init={SCRATCH!r}"
        )
    return head, norm.weight.detach().float().cpu()


def _exported_state(export_dir: Path) -> dict[str, torch.Tensor]:
    path = Path(export_dir) / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(
            f"train.draft.init: no exported drafter at {export_dir} (train it first, "
            f"e.g. `python train/run.py domain=general ...` with the same pool)"
        )
    return load_file(str(path))


def build_warm_start(
    out_dir: Path,
    draft_config_path: Path,
    mapping_path: Path,
    *,
    init: str,
    target_head: torch.Tensor,
    target_norm: torch.Tensor,
    seed: int = 0,
    source_export: Path | None = None,
) -> Path:
    """Write the warm-start directory for ``init`` (not ``scratch``) and return it."""
    require_specforge()
    from specforge.modeling.auto import AutoDraftModel, AutoDraftModelConfig

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    config = AutoDraftModelConfig.from_file(str(draft_config_path))
    torch.manual_seed(int(seed))
    model = AutoDraftModel.from_config(config, torch_dtype=torch.float32)
    ids = draft_target_ids(mapping_path)
    head = target_head[ids].clone()
    state: dict[str, torch.Tensor] = {"norm.weight": target_norm.clone()}
    if init != TARGET_HEAD:
        src = _exported_state(Path(source_export)) if source_export is not None else None
        if src is None:
            raise ValueError(f"train.draft.init={init!r}: no source drafter given")
        src_ids = torch.arange(src["d2t"].numel()) + src["d2t"].long()
        row_of = {int(t): i for i, t in enumerate(src_ids.tolist())}
        src_head = src["lm_head.weight"].float()
        for d, t in enumerate(ids.tolist()):
            r = row_of.get(int(t))
            if r is not None:
                head[d] = src_head[r]
        state.update({k: v.float() for k, v in src.items() if k not in ("lm_head.weight", "d2t", "t2d")})
    state["lm_head.weight"] = head
    own = model.state_dict()
    bad = [k for k, v in state.items() if k not in own or tuple(own[k].shape) != tuple(v.shape)]
    if bad:
        raise ValueError(
            f"train.draft.init={init!r}: tensors {bad} do not fit this draft architecture "
            f"(draft config {draft_config_path}); the source drafter must share width and layers"
        )
    model.load_state_dict(state, strict=False)
    with atomic_dir(out_dir) as tmp:  # an existing directory without config.json is incomplete: replaced
        model.save_pretrained(str(tmp))
    return out_dir
