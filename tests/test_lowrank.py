"""Low-rank expert pools: experts as a base drafter plus rank-r deltas (hedgespec.engine.lowrank).

Independent truths: numpy's SVD (Eckart-Young: the truncation error of a rank-r delta is the root sum of its
discarded squared singular values), the dense pool of the same weights (the factored forward must give its
logits), and transformers greedy decoding of the target (lossless output with a low-rank pool).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from _engine_helpers import GREEDY, decoding
from safetensors.torch import load_file, save_file

from hedgespec.build import build_pool
from hedgespec.engine import DrafterPool, SpeculativeEngine, TargetModel
from hedgespec.engine.eagle3 import MATRICES, Eagle3Drafter
from hedgespec.engine.lowrank import (
    FACTORS_FILE,
    LowRankDrafter,
    LowRankStack,
    allocate_ranks,
    delta_svds,
    factorize,
    pool_reads,
    weights_read,
)
from hedgespec.fixtures import agreeing_drafter, greedy_reference, random_drafter
from hedgespec.models import load_target
from hedgespec.pools import CorruptCheckpointError, TargetInfo, load_pool
from hedgespec.pools_import import add_published_drafter
from hedgespec.pools_lowrank import write_low_rank_pool
from hedgespec.selectors import make_selector

torch.set_num_threads(1)
PROMPTS = [torch.tensor([5, 17, 33, 2, 9]), torch.tensor([40, 41, 42])]


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_target("tiny")
    base = agreeing_drafter(model, [p[None] for p in PROMPTS], seed=3, steps=120, length=24, draft_vocab_size=300)
    base.name = "general"
    return model, tok, base


def _expert(base: Eagle3Drafter, seed: int, name: str, scale: float = 0.05) -> Eagle3Drafter:
    """A full-rank fine-tune stand-in: every weight of ``base`` plus noise."""
    g = torch.Generator().manual_seed(seed)
    w = {k: v + scale * v.abs().mean() * torch.randn(v.shape, generator=g) for k, v in base.weights.items()}
    return Eagle3Drafter(base.config, w, base.d2t, base.t2d, name=name)


def _rows(model, pool):
    tgt = TargetModel(model, pool.capture_ids)
    seq = torch.tensor([3, 9, 27, 17, 51, 1, 2, 60, 33, 8, 12, 40])
    _, feats = tgt.prefill(seq)
    return seq[1:], feats[:-1], tgt.embed(seq[1:])[None]


def _dense(d: Eagle3Drafter) -> Eagle3Drafter:
    return Eagle3Drafter(d.config, {k: v.clone() for k, v in d.weights.items()}, d.d2t, d.t2d, name=d.name)


def test_truncation_error_is_eckart_young(tiny):
    _, _, base = tiny
    expert = _expert(base, 1, "sql")
    for rank in (1, 4, 16):
        low = LowRankDrafter.from_expert(base, expert, rank)
        spectra = [
            np.linalg.svd((expert.weights[k] - base.weights[k]).double().numpy(), compute_uv=False) for k in MATRICES
        ]
        lost = sum(float((sv[rank:] ** 2).sum()) for sv in spectra)
        assert low.delta_kept == pytest.approx(
            1 - np.sqrt(lost / sum(float((sv**2).sum()) for sv in spectra)), rel=1e-6
        )
        for key in MATRICES:
            delta = (expert.weights[key] - base.weights[key]).double().numpy()
            s = np.linalg.svd(delta, compute_uv=False)
            want = float(np.sqrt((s[rank:] ** 2).sum()))
            got = float(torch.linalg.norm((expert.weights[key] - low.weights[key]).double()))
            assert got == pytest.approx(want, rel=1e-3, abs=1e-6), (key, rank)
            assert low.factors[key][0].shape[1] == rank


def test_full_rank_pool_equals_the_dense_pool(tiny):
    model, _, base = tiny
    experts = [_expert(base, s, f"e{s}") for s in range(3)]
    low = [LowRankDrafter.from_expert(base, e, "full") for e in experts]
    dense_pool, low_pool = DrafterPool([base, *experts], model), DrafterPool([base, *low], model)
    assert isinstance(low_pool.w["q"], LowRankStack) and isinstance(dense_pool.w["q"], torch.Tensor)
    rows = _rows(model, dense_pool)
    assert torch.allclose(low_pool.evaluate(*rows), dense_pool.evaluate(*rows), atol=1e-4)
    assert torch.allclose(low_pool.k, dense_pool.k, atol=1e-5)


def test_factored_forward_equals_the_dense_forward_of_the_same_weights(tiny):
    model, _, base = tiny
    low = [LowRankDrafter.from_expert(base, _expert(base, s, f"e{s}"), r) for s, r in [(0, 2), (1, 8), (2, 5)]]
    low_pool = DrafterPool([base, *low], model)
    dense_pool = DrafterPool([base, *[_dense(d) for d in low]], model)  # the rank-r weights materialised
    rows = _rows(model, dense_pool)
    assert torch.allclose(low_pool.evaluate(*rows), dense_pool.evaluate(*rows), atol=1e-4)
    # a subset of heads through the same factors, and one head's draft step (its dense rank-r weights)
    tok, feat, emb = rows
    pos = torch.tensor([low_pool.length])
    for sel in ([1, 3], [2]):
        f = low_pool.features(feat[-1:], sel)
        a = low_pool.run(sel, emb[:, -1:], f, True, pos)[0]
        b = dense_pool.run(sel, emb[:, -1:], f, True, pos)[0]
        assert torch.allclose(a, b, atol=1e-4)
    # the factored pool reads the base once plus the factors
    assert weights_read(low_pool.w) < weights_read(dense_pool.w)


def test_greedy_output_with_a_low_rank_pool_is_the_targets(tiny):
    model, _, base = tiny
    pool = [base, *[LowRankDrafter.from_expert(base, _expert(base, s, f"e{s}"), 4) for s in range(2)]]
    for sel in (make_selector("hedgespec"), make_selector("fixed", index=2)):
        engine = SpeculativeEngine(model, pool, sel, decoding("chain", 4))
        for prompt in PROMPTS:
            out, _ = engine.generate(prompt, 20, GREEDY)
            assert torch.equal(out, greedy_reference(model, prompt, 20)[0])


def test_bad_ranks_shapes_and_vocabularies_are_named(tiny):
    model, _, base = tiny
    expert = _expert(base, 1, "sql")
    smallest = min(min(base.weights[k].shape) for k in MATRICES)
    with pytest.raises(ValueError, match=r"drafter 'sql': rank=.* exceeds the rank of weight"):
        factorize(base, expert, smallest + 1)
    for bad in (0, -3, True, 2.5, "big"):
        with pytest.raises(ValueError, match="rank="):
            factorize(base, expert, bad)
    other_shape = random_drafter(model, seed=5, intermediate_size=24, name="wide")
    with pytest.raises(ValueError, match=r"drafter 'wide': intermediate_size=24 differs from base 'general'"):
        factorize(base, other_shape, 2)
    ids = base.target_ids.tolist()  # one draft token swapped for a token outside the base's draft vocabulary
    ids = sorted([*ids[:-1], next(t for t in range(base.config.vocab_size) if t not in set(ids))])
    t2d = torch.zeros_like(base.t2d)
    t2d[ids] = True
    d2t = torch.tensor(ids) - torch.arange(len(ids))
    other_vocab = Eagle3Drafter(base.config, dict(expert.weights), d2t, t2d, name="ownvocab")
    with pytest.raises(ValueError, match=r"'ownvocab': its draft vocabulary differs .*train.draft.vocab=init"):
        factorize(base, other_vocab, 2)
    a, b = factorize(base, expert, 2)["q"]
    with pytest.raises(ValueError, match=r"drafter 'x': factors of q have shapes"):
        LowRankDrafter(base, {**factorize(base, expert, 2), "q": (a, b.t())}, {}, 2, "x")


def _dense_pool(tmp_path, model, tok, base, experts):
    info = TargetInfo.from_model("tiny", model, tok)
    manifest = tmp_path / "pools" / "ft.yaml"
    for d in [base, *experts]:
        d.save(tmp_path / "src" / d.name)
        add_published_drafter(manifest, d.name, str(tmp_path / "src" / d.name), domain=d.name, target=info)
    return manifest, info


def test_written_pool_loads_as_low_rank_and_serves_dense_weights(tiny, tmp_path):
    model, tok, base = tiny
    experts = [_expert(base, s, n) for s, n in [(1, "sql"), (2, "math")]]
    manifest, info = _dense_pool(tmp_path, model, tok, base, experts)
    written = write_low_rank_pool(manifest, "ft-r4", "general", 4)
    man = written.manifest
    assert set(written.delta_kept) == {"sql", "math"} and all(0 < v < 1 for v in written.delta_kept.values())
    assert man.names == ["general", "sql", "math"]
    loaded = load_pool(tmp_path / "pools" / "ft-r4.yaml", info)  # hashes and configs checked against the target
    assert [d.lowrank for d in loaded.drafters] == [{}, {"base": "general", "rank": 4}, {"base": "general", "rank": 4}]
    raw = yaml.safe_load((tmp_path / "pools" / "ft-r4.yaml").read_text())
    assert "lowrank" not in raw["drafters"][0] and raw["drafters"][1]["lowrank"] == {"base": "general", "rank": 4}
    cfg = {"pool": {"name": "ft-r4", "manifest": str(tmp_path / "pools" / "ft-r4.yaml")}, "target": {"name": "tiny"}}
    pool = build_pool(cfg, model, tok)
    assert [type(d).__name__ for d in pool.drafters] == ["Eagle3Drafter", "LowRankDrafter", "LowRankDrafter"]
    want = LowRankDrafter.from_expert(base, experts[0], 4)
    for key in MATRICES:  # what SGLang would load (dense model.safetensors) is the rank-4 expert
        assert torch.allclose(Eagle3Drafter.load(loaded.drafter_path("sql")).weights[key], want.weights[key])
        assert torch.allclose(pool.drafters[1].weights[key], want.weights[key])
    with pytest.raises(FileExistsError, match="ft-r4.yaml exists"):
        write_low_rank_pool(manifest, "ft-r4", "general", 4)
    with pytest.raises(ValueError, match="already low-rank"):
        write_low_rank_pool(tmp_path / "pools" / "ft-r4.yaml", "again", "general", 4)
    with pytest.raises(ValueError, match=r"base='nope': pool 'ft' .* has no such drafter"):
        write_low_rank_pool(manifest, "ft-x", "nope", 4)
    with pytest.raises(ValueError, match=r"drafters=\['nope'\]: pool 'ft' has no drafter\(s\) \['nope'\]"):
        write_low_rank_pool(manifest, "ft-x", "general", 4, drafters=["nope"])
    assert not (tmp_path / "pools" / "ft-x.yaml").exists()
    sub = write_low_rank_pool(manifest, "ft-sub", "general", 4, drafters=["math"]).manifest
    assert sub.names == ["general", "math"]


def test_tampered_factors_or_weights_are_refused(tiny, tmp_path):
    model, tok, base = tiny
    manifest, _ = _dense_pool(tmp_path, model, tok, base, [_expert(base, 1, "sql")])
    write_low_rank_pool(manifest, "ft-r2", "general", 2)
    d = tmp_path / "pools" / "ft-r2" / "sql"
    factors = load_file(str(d / FACTORS_FILE))
    factors["midlayer.self_attn.q_proj.weight.a"] *= 3
    save_file(factors, str(d / FACTORS_FILE), metadata={"base": "general", "rank": "2"})
    with pytest.raises(CorruptCheckpointError, match=r"drafter 'sql': q in model.safetensors is not base 'general'"):
        LowRankDrafter.load_factors(d, base, "sql")
    save_file(factors, str(d / FACTORS_FILE), metadata={"base": "python", "rank": "2"})
    with pytest.raises(ValueError, match=r"deltas of base 'python', not of 'general'"):
        LowRankDrafter.load_factors(d, base, "sql")
    (d / FACTORS_FILE).unlink()
    with pytest.raises(ValueError, match=r"drafter 'sql': .*lowrank.safetensors not found"):
        LowRankDrafter.load_factors(d, base, "sql")


def test_manifest_lowrank_field_is_checked(tiny, tmp_path):
    model, tok, base = tiny
    manifest, _ = _dense_pool(tmp_path, model, tok, base, [_expert(base, 1, "sql")])
    raw = yaml.safe_load(manifest.read_text())
    for low, match in [
        ({"base": "sql", "rank": 2}, r"lowrank.base='sql' must name another, dense drafter"),
        ({"base": "nope", "rank": 2}, r"lowrank.base='nope'"),
        ({"base": "general", "rank": 0}, r"lowrank.rank=0: expected a positive integer, 'full', or a rank per"),
        ({"base": "general", "rank": {"q": 2}}, r"lowrank.rank=.*names each of .*missing \['fc', 'k'"),
        ({"base": "general", "rank": {**dict.fromkeys(MATRICES, 1), "qq": 1}}, r"lowrank.rank=.*unknown \['qq'\]"),
        ({"base": "general", "rank": {**dict.fromkeys(MATRICES, 1), "v": -1}}, r"lowrank.rank.v=-1: expected an int"),
        ({"base": "general"}, r"field lowrank must be \{base: <drafter>, rank: <r>\}"),
    ]:
        raw["drafters"][1]["lowrank"] = low
        bad = tmp_path / "pools" / "bad.yaml"
        bad.write_text(yaml.safe_dump(raw))
        with pytest.raises(ValueError, match=match):
            load_pool(bad, check_files=False)


def _kept_energy(base, experts, ranks):
    """Squared Frobenius norm of the experts' deltas that rank-per-matrix truncations keep (numpy's SVD)."""
    total = 0.0
    for e in experts:
        for k in MATRICES:
            s = np.linalg.svd((e.weights[k] - base.weights[k]).double().numpy(), compute_uv=False)
            total += float((s[: ranks[k]] ** 2).sum())
    return total


def test_per_matrix_ranks_truncate_each_matrix_and_match_the_dense_forward(tiny):
    model, _, base = tiny
    expert = _expert(base, 4, "sql")
    ranks = {**dict.fromkeys(MATRICES, 3), "fc": 0, "lm_head": 7, "q": "full"}
    low = LowRankDrafter.from_expert(base, expert, ranks)
    for key in MATRICES:
        s = np.linalg.svd((expert.weights[key] - base.weights[key]).double().numpy(), compute_uv=False)
        r = len(s) if ranks[key] == "full" else ranks[key]
        got = float(torch.linalg.norm((expert.weights[key] - low.weights[key]).double()))
        assert got == pytest.approx(float(np.sqrt((s[r:] ** 2).sum())), rel=1e-3, abs=1e-6), key
        assert low.factors[key][0].shape[1] == r
    assert torch.equal(low.weights["fc"], base.weights["fc"])  # rank 0: the base's matrix
    pool = DrafterPool([base, low], model)
    dense = DrafterPool([base, _dense(low)], model)
    rows = _rows(model, dense)
    assert torch.allclose(pool.evaluate(*rows), dense.evaluate(*rows), atol=1e-4)


def test_allocated_ranks_fit_the_budget_and_keep_more_than_a_uniform_rank(tiny):
    model, _, base = tiny
    # experts whose deltas differ in spectrum per matrix: low-rank changes on some matrices, noise on others
    experts = []
    for seed, name in [(1, "sql"), (2, "math"), (3, "bio")]:
        e = _expert(base, seed, name, scale=0.02)
        g = torch.Generator().manual_seed(100 + seed)
        for k in ("lm_head", "gate"):
            w = e.weights[k]
            u, v = torch.randn(w.shape[0], 2, generator=g), torch.randn(2, w.shape[1], generator=g)
            e.weights[k] = w + 0.5 * w.abs().mean() * (u @ v)
        experts.append(e)
    single = weights_read(DrafterPool([base], model).w)
    for uniform in (1, 4):
        reads = pool_reads(base, 4, uniform)
        pool = DrafterPool([base, *[LowRankDrafter.from_expert(base, e, uniform) for e in experts]], model)
        assert reads == pytest.approx(weights_read(pool.w) / single)  # the count the stacked pool reads
        for allocation in ("frobenius", "relative"):
            ranks = allocate_ranks(base, experts, reads, allocation)
            low = [LowRankDrafter.from_expert(base, e, ranks) for e in experts]
            got = weights_read(DrafterPool([base, *low], model).w) / single
            assert got <= reads + 1e-9
            assert got == pytest.approx(pool_reads(base, 4, ranks))
            # no matrix could take one more rank within the budget
            for k in MATRICES:
                if ranks[k] < min(base.weights[k].shape):
                    assert pool_reads(base, 4, {**ranks, k: ranks[k] + 1}) > reads, (allocation, k)
        best = allocate_ranks(base, experts, reads, "frobenius")
        assert _kept_energy(base, experts, best) >= _kept_energy(base, experts, dict.fromkeys(MATRICES, uniform))
        assert best["lm_head"] >= 2 and best["gate"] >= 2  # the planted rank-2 changes are kept first


def test_shared_delta_svds_give_the_ranks_and_factors_of_separate_ones(tiny):
    """write_low_rank_pool computes each expert's delta SVDs once for the ranks and the factors: the same ranks
    as svdvals of each delta, the same factors as factorising from scratch, bit for bit."""
    model, _, base = tiny
    experts = [_expert(base, seed, name, scale=0.02) for seed, name in [(1, "sql"), (2, "math")]]
    svds = [delta_svds(base, e) for e in experts]
    for reads in (1.2, 1.6):
        ranks = allocate_ranks(base, experts, reads)
        assert allocate_ranks(base, experts, reads, svds=svds) == ranks
        for e, sv in zip(experts, svds):
            alone, shared = factorize(base, e, ranks), factorize(base, e, ranks, sv)
            for k in MATRICES:
                assert torch.equal(alone[k][0], shared[k][0]) and torch.equal(alone[k][1], shared[k][1])
    with pytest.raises(ValueError, match=r"1 delta SVDs for 2 experts"):
        allocate_ranks(base, experts, 1.2, svds=svds[:1])


def test_reads_budget_errors_are_named(tiny, tmp_path):
    model, tok, base = tiny
    expert = _expert(base, 1, "sql")
    floor = pool_reads(base, 2, dict.fromkeys(MATRICES, 0))
    for bad, match in [(0.5, r"reads=0.5: expected a number >= 1"), ("x", r"reads='x'"), (True, r"reads=True")]:
        with pytest.raises(ValueError, match=match):
            allocate_ranks(base, [expert], bad)
    if floor > 1.0:
        with pytest.raises(ValueError, match=r"reads=1.0: a pool of 2 drafters reads .* at rank 0"):
            allocate_ranks(base, [expert], 1.0)
    with pytest.raises(ValueError, match=r"allocation='energy': expected one of \['frobenius', 'relative'\]"):
        allocate_ranks(base, [expert], 2.0, "energy")
    manifest, _ = _dense_pool(tmp_path, model, tok, base, [expert])
    with pytest.raises(ValueError, match=r"rank=4 and reads=1.5: give one"):
        write_low_rank_pool(manifest, "ft-x", "general", 4, reads=1.5)
    assert not (tmp_path / "pools" / "ft-x.yaml").exists()


def test_a_pool_written_for_a_reads_budget_records_its_ranks_and_loads(tiny, tmp_path):
    model, tok, base = tiny
    experts = [_expert(base, s, n) for s, n in [(1, "sql"), (2, "math")]]
    manifest, info = _dense_pool(tmp_path, model, tok, base, experts)
    written = write_low_rank_pool(manifest, "ft-b", "general", None, reads=1.5)
    assert isinstance(written.rank, dict) and set(written.rank) == set(MATRICES)
    assert 1.0 < written.reads <= 1.5
    loaded = load_pool(tmp_path / "pools" / "ft-b.yaml", info)
    assert [d.lowrank.get("rank") for d in loaded.drafters] == [None, written.rank, written.rank]
    cfg = {"pool": {"name": "ft-b", "manifest": str(tmp_path / "pools" / "ft-b.yaml")}, "target": {"name": "tiny"}}
    pool = build_pool(cfg, model, tok)
    assert [d.rank for d in pool.drafters[1:]] == [written.rank, written.rank]
    single = weights_read(DrafterPool([base], model).w)
    assert weights_read(DrafterPool(pool.drafters, model).w) / single == pytest.approx(written.reads)
    want = LowRankDrafter.from_expert(base, experts[1], written.rank)
    for key in MATRICES:
        assert torch.allclose(pool.drafters[2].weights[key], want.weights[key], atol=1e-6)


def test_script_takes_a_reads_budget_or_a_rank_per_matrix(tiny, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    model, tok, base = tiny
    manifest, _ = _dense_pool(tmp_path, model, tok, base, [_expert(base, 1, "sql")])
    script = Path(__file__).resolve().parents[1] / "scripts" / "lowrank_pool.py"

    def run(*args):
        cmd = [sys.executable, str(script), f"manifest={manifest}", "hydra.run.dir=" + str(tmp_path / "h"), *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    ok = run("reads=1.4", "out=ft-b", f"json={tmp_path / 'ft-b.json'}")
    assert ok.returncode == 0, ok.stderr
    assert "one evaluation of the pool reads" in ok.stdout
    rec = json.loads((tmp_path / "ft-b.json").read_text())
    assert rec["budget"] == {"reads": 1.4, "allocation": "frobenius"} and 1.0 < rec["reads_x_one_head"] <= 1.4
    assert (
        rec["rank"] == yaml.safe_load((tmp_path / "pools" / "ft-b.yaml").read_text())["drafters"][1]["lowrank"]["rank"]
    )
    assert isinstance(
        yaml.safe_load((tmp_path / "pools" / "ft-b.yaml").read_text())["drafters"][1]["lowrank"]["rank"], dict
    )
    per = "{fc:0,q:2,k:2,v:2,o:2,gate:2,up:2,down:2,lm_head:full}"  # a per-matrix rank and a budget: refused
    both = run(f"rank={per}", "reads=1.4", "out=ft-x")
    assert both.returncode == 2
    assert (
        "rank={'fc': 0, 'q': 2, 'k': 2, 'v': 2, 'o': 2, 'gate': 2, 'up': 2, 'down': 2, 'lm_head': 'full'} and "
        "reads=1.4: give one" in both.stderr
    )
    assert not (tmp_path / "pools" / "ft-x.yaml").exists()
