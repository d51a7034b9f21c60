"""hedgespec.decoding: the typed decoding/sampling records, their YAML group and the manifest's decoding block."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hedgespec.decoding import DecodingConfig, SamplingParams
from hedgespec.pools import PoolMismatchError, manifest_decoding

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "decoding").glob("*.yaml")))
def test_every_decoding_option_builds(option):
    dec = DecodingConfig.from_dict(yaml.safe_load((CONF / "decoding" / f"{option}.yaml").read_text()))
    assert dec.mode == option and dec.k == dec.num_steps >= 1
    assert DecodingConfig.from_dict(dec.to_dict()) == dec


def test_chain_fills_num_draft_tokens_like_sglang():
    dec = DecodingConfig.from_dict({"mode": "chain", "num_steps": 3, "topk": 1, "num_draft_tokens": None})
    assert dec.num_draft_tokens == 4


@pytest.mark.parametrize(
    "raw, match",
    [
        ({"mode": "beam", "num_steps": 4, "topk": 1, "num_draft_tokens": 5}, "decoding.mode must be one of"),
        ({"mode": "chain", "num_steps": 0, "topk": 1, "num_draft_tokens": None}, r"num_steps \(speculation depth K\)"),
        ({"mode": "chain", "num_steps": 4, "topk": 2, "num_draft_tokens": 5}, "needs topk=1"),
        ({"mode": "chain", "num_steps": 4, "topk": 1, "num_draft_tokens": 9}, "num_draft_tokens = num_steps \\+ 1"),
        ({"mode": "tree", "num_steps": 4, "topk": 8, "num_draft_tokens": 4}, "topk <= num_draft_tokens"),
        ({"mode": "tree", "num_steps": 4.5, "topk": 2, "num_draft_tokens": 4}, "must be an int"),
        ({"mode": "chain", "k": 4, "topk": 1, "num_draft_tokens": 5}, r"unknown key\(s\) \['k'\]"),
        ({"mode": "chain", "topk": 1, "num_draft_tokens": 5}, r"missing key\(s\) \['num_steps'\]"),
    ],
)
def test_bad_decoding_is_named(raw, match):
    with pytest.raises(ValueError, match=match):
        DecodingConfig.from_dict(raw)


def test_sampling_params_from_the_greedy_option():
    raw = yaml.safe_load((CONF / "sampling" / "greedy.yaml").read_text())
    smp = SamplingParams.from_dict({**raw, "seed": 3})
    assert smp.greedy and smp.seed == 3 and smp.with_seed(7).seed == 7 and smp.with_seed(7).top_p == smp.top_p


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"temperature": -1.0}, "temperature must be a number >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_k": -1}, "top_k"),
        ({"seed": -2}, "seed must be an int >= 0"),
    ],
)
def test_bad_sampling_is_named(kw, match):
    base = {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "seed": None}
    with pytest.raises(ValueError, match=match):
        SamplingParams(**{**base, **kw})


def test_manifest_decoding_reads_the_old_spelling_and_names_bad_blocks():
    assert manifest_decoding({"k": 4, "topk": 1, "tree": "chain"}) == DecodingConfig("chain", 4, 1, 5).to_dict()
    assert manifest_decoding(None) == {}
    with pytest.raises(PoolMismatchError, match="bad 'decoding' block"):
        manifest_decoding({"mode": "chain", "num_steps": 4, "topk": 3, "num_draft_tokens": 5}, "pool manifest x: ")
