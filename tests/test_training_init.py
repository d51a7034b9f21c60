"""train.draft.init (SpecForge weights-only warm start) and the pipeline's regeneration stage, on the tiny target."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _train_helpers import compose_train, specforge_or_skip, tiny_overrides

specforge_or_skip()

from hedgespec.training.pipeline import train_drafter  # noqa: E402

TINY4 = {"name": "tiny", "kind": "tiny", "arch": {"num_hidden_layers": 4}}


def _state(d: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(d.glob("*.safetensors"))
    assert files, f"no safetensors in {d}"
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def _target_rows(d2t: torch.Tensor) -> torch.Tensor:
    return torch.arange(d2t.numel()) + d2t.long()


def test_target_head_init_then_fine_tune_from_a_drafter(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    from hedgespec.models import load_target

    model, _ = load_target(TINY4)
    head = model.get_output_embeddings().weight.detach().float()
    norm = model.model.norm.weight.detach().float()

    # target_head: the warm start SpecForge loads has the target's rows of this run's draft vocab and its norm
    gen = train_drafter(compose_train(tmp_path, *tiny_overrides("domain=general", "train.draft.init=target_head")))
    warm = _state(gen.run_dir / "warm_start")
    mapping = torch.load(gen.stages["vocab"]["path"], weights_only=True)
    torch.testing.assert_close(warm["lm_head.weight"].float(), head[_target_rows(mapping["d2t"])])
    torch.testing.assert_close(warm["norm.weight"].float(), norm)
    import yaml

    run = yaml.safe_load((gen.run_dir / "run.yaml").read_text())
    assert run["model"]["draft_checkpoint_path"] == str(gen.run_dir / "warm_start") and gen.final_step == 6

    # <drafter>: every weight of the exported generalist, lm_head re-indexed by target token id
    sql = train_drafter(
        compose_train(tmp_path, *tiny_overrides("domain=sql", "train.draft.init=general", "train.draft.vocab_size=128"))
    )
    src = _state(gen.export_dir)
    warm = _state(sql.run_dir / "warm_start")
    torch.testing.assert_close(warm["fc.weight"].float(), src["fc.weight"].float())
    src_row = {int(t): i for i, t in enumerate(_target_rows(src["d2t"]).tolist())}
    ids = _target_rows(torch.load(sql.stages["vocab"]["path"], weights_only=True)["d2t"]).tolist()
    shared = [(d, src_row[t]) for d, t in enumerate(ids) if t in src_row]
    assert shared, "the two draft vocabularies share tokens"
    for d, r in shared[:20]:
        torch.testing.assert_close(warm["lm_head.weight"][d].float(), src["lm_head.weight"][r].float())
    for d, t in [(d, t) for d, t in enumerate(ids) if t not in src_row][:20]:
        torch.testing.assert_close(warm["lm_head.weight"][d].float(), head[t])
    assert sql.final_step == 6

    # train.draft.vocab=init: the fine-tune keeps the generalist's draft vocabulary, so its deltas have the
    # generalist's shapes and the pool can be written as generalist + rank-r deltas
    with pytest.raises(ValueError, match=r"source drafter's vocabulary \(\d+ draft ids.*set train.draft.vocab_size="):
        train_drafter(
            compose_train(
                tmp_path,
                *tiny_overrides(
                    "domain=math", "train.draft.init=general", "train.draft.vocab=init", "train.draft.vocab_size=128"
                ),
            )
        )
    math = train_drafter(
        compose_train(
            tmp_path,
            *tiny_overrides(
                "domain=math", "train.draft.init=general", "train.draft.vocab=init", "train.overwrite=true"
            ),
        )
    )
    got = _state(math.export_dir)
    assert torch.equal(got["d2t"], src["d2t"]) and torch.equal(got["t2d"].bool(), src["t2d"].bool())
    from hedgespec.build import build_pool
    from hedgespec.engine.lowrank import LowRankDrafter
    from hedgespec.pools import load_pool
    from hedgespec.pools_lowrank import write_low_rank_pool

    man = load_pool(math.manifest)
    assert man.drafter("math").vocab_mapping_hash == man.drafter("general").vocab_mapping_hash
    with pytest.raises(ValueError, match=r"drafter 'sql': draft_vocab_size=128 differs from base 'general'"):
        write_low_rank_pool(math.manifest, "tiny-r4", "general", 4)  # sql kept its own vocabulary
    write_low_rank_pool(math.manifest, "tiny-r4", "general", 4, drafters=["math"])
    cfg = {"pool": {"name": "tiny-r4", "manifest": str(math.manifest.parent / "tiny-r4.yaml")}, "target": TINY4}
    pool = build_pool(cfg, model, None)
    low = pool.drafters[pool.names.index("math")]
    assert isinstance(low, LowRankDrafter) and low.rank == 4 and low.base.name == "general"


def test_bad_init_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="drafter 'general' of pool 'tiny' is not exported"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("train.draft.init=general")))
    with pytest.raises(ValueError, match="names the drafter being trained"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("train.draft.init=sql")))
    with pytest.raises(ValueError, match="expected scratch, target_head or a drafter name"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("train.draft.init='../x'")))
    with pytest.raises(ValueError, match=r"train.draft.vocab=init needs train.draft.init=<drafter of this pool>"):
        train_drafter(
            compose_train(tmp_path, *tiny_overrides("train.draft.init=target_head", "train.draft.vocab=init"))
        )
    with pytest.raises(ValueError, match=r"train.draft.vocab='theirs': expected one of own, init"):
        train_drafter(compose_train(tmp_path, *tiny_overrides("train.draft.vocab=theirs")))
    assert not (tmp_path / "outputs").exists(), "nothing was written"


def test_regenerated_data_is_made_by_the_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """data.regenerated with a regenerate budget: answers generated with the pipeline's own target, then trained on.

    The generator is wrapped so its answers are non-empty (a random tiny target's greedy text often decodes to
    nothing); it must receive the model the pipeline already loaded, with the budget's settings.
    """
    torch.set_num_threads(1)
    import data_recipes.regenerate as rg
    from data_recipes import read_jsonl

    seen: list[dict] = []

    def fake_generator(target, max_new_tokens, temperature, seed, loaded=None):
        seen.append({"target": target, "max_new_tokens": max_new_tokens, "layers": loaded[0].config.num_hidden_layers})

        def gen(messages):
            return f"SELECT {len(messages[0]['content'])};"

        gen.batch = lambda many: [gen(m) for m in many]
        return gen

    monkeypatch.setattr(rg, "transformers_generator", fake_generator)
    over = [
        "target=tiny",
        "train=tiny",
        "domain=sql",
        "train.regenerate.enabled=true",
        "train.regenerate.max_examples=5",
        "+train.regenerate.max_new_tokens=7",
        "+train.regenerate.batch_size=2",
        "train.features.max_length=384",
        "train.specforge.data.max_length=384",
    ]  # SQL schemas are long
    res = train_drafter(compose_train(tmp_path, *over))
    assert seen == [{"target": "tiny", "max_new_tokens": 7, "layers": 4}]
    regen = tmp_path / "data" / "offline" / "sql" / "regen" / "train.tiny.jsonl"
    src = read_jsonl(tmp_path / "data" / "offline" / "sql" / "train.jsonl")
    recs = read_jsonl(regen)
    assert [r["id"] for r in recs] == [r["id"] for r in src[:5]]
    assert all(r["conversations"][-1]["content"].startswith("SELECT ") for r in recs)
    assert res.final_step == 6 and 3 <= res.stages["features"]["samples"] <= 5  # too-long ones are dropped
    again = train_drafter(compose_train(tmp_path, *over))  # nothing left to regenerate: features reused
    assert again.stages["features"]["reused"] is True and len(read_jsonl(regen)) == 5


def test_fit_window_regenerates_only_what_the_budget_window_reads(tmp_path: Path, monkeypatch) -> None:
    """train.regenerate.fit_window: the data stage asks for each answer only up to the budget's window (the smaller
    max_length) plus the margin, and writes and reads the window's own file."""
    import data_recipes.regenerate as rg
    from data_recipes import read_jsonl
    from hedgespec.models import load_target, load_tokenizer
    from hedgespec.training import pipeline

    caps: list[int] = []

    def fake_generator(target, max_new_tokens, temperature, seed, loaded=None):
        def gen(messages, max_new=None):
            return gen.batch([messages], [max_new])[0]

        def batch(many, max_new=None):
            caps.extend(max_new)
            return [f"SELECT {c};" for c in max_new]

        gen.batch = batch
        return gen  # no prompt_tokens: regenerate counts with the target's tokenizer

    monkeypatch.setattr(rg, "transformers_generator", fake_generator)
    over = ["target=tiny", "train=tiny", "domain=sql", "train.regenerate.enabled=true"]
    over += ["train.regenerate.max_examples=4", "+train.regenerate.max_new_tokens=300"]
    over += ["+train.regenerate.batch_size=2", "+train.regenerate.fit_window=true"]
    over += ["train.features.max_length=384", "train.specforge.data.max_length=320"]
    cfg = pipeline._plain(compose_train(tmp_path, *over))
    assert pipeline.regen_window(cfg) == 320
    domain_dir = Path(cfg["data_dir"]) / "offline" / "sql"
    out = pipeline._regenerated(cfg, "sql", "offline", domain_dir, load_target("tiny"))
    assert out == pipeline.regenerated_path(cfg, domain_dir) and out.name == "train.tiny.w320.jsonl"
    tok = load_tokenizer("tiny")
    lengths = sorted(rg.prompt_tokens(tok, rg._prompt_of(r)) for r in read_jsonl(domain_dir / "train.jsonl")[:4])
    kept = [n for n in lengths if n < 320]
    assert caps == [min(300, 320 - n + rg.WINDOW_MARGIN) for n in kept] and caps
    assert len(read_jsonl(out)) == len(kept)
    cfg["train"]["regenerate"]["fit_window"] = False
    assert pipeline.regenerated_path(cfg, domain_dir).name == "train.tiny.jsonl"
