"""Load test of a HedgeSpec SGLang server driven by SGLang's own client (``python -m sglang.benchmark.serving``).

One server is started for the pool; then, with greedy decoding throughout:

1. **reference** - every distinct prompt (held-out eval prompts of the workload + seeded random word prompts) at
   concurrency 1: its output served alone;
2. **passes** - the same prompt file at each concurrency (same file and ``--seed``, so the client sends the rows in
   the same order): failed requests, lost requests (sent but not answered) and outputs that differ from the
   reference, with the client's throughput and TTFT / inter-token latency percentiles;
3. **histograms** - a batch of concurrent native ``/generate`` calls: each request's ``hedgespec_histogram`` must
   sum to its ``spec_verify_ct`` (every verify round was charged to exactly one drafter);
4. **soak** - ``soak.requests`` requests (the prompts repeated) at ``soak.concurrency`` while the RSS of the server's
   process tree is sampled: the outputs must be the reference ones (as a multiset: the client shuffles the rows),
   and RSS growth after warm-up is reported.

``scripts/load_test.py`` is the entry point; :func:`run_load_test` returns the result dict it writes as JSON.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from transformers import AutoTokenizer

from hedgespec.bench.workloads import load_workload
from hedgespec.serving.argv import ServePlan, build_plan
from hedgespec.serving.launch import ServerProcess

CLIENT = "sglang.benchmark.serving"
#: words of the seeded random prompts (the target's tokenizer splits them into a few tokens each)
_WORDS = "alpha river table seven blue quickly number garden proof token signal cell market green light".split()


def random_prompts(n: int, seed: int, words: int = 24) -> list[str]:
    """``n`` distinct prompts of ``words`` seeded random words (numbered, so no two are equal)."""
    rng = random.Random(seed)
    return [f"{j}: " + " ".join(rng.choice(_WORDS) for _ in range(words)) for j in range(n)]


def sharegpt_file(prompts: Sequence[str], path: Path) -> Path:
    """The prompts as a ShareGPT-format JSON file (the answer turn is a placeholder: the output length is fixed)."""
    rows = [
        {"id": f"p{j}", "conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "ok ok ok ok"}]}
        for j, p in enumerate(prompts)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return path


def client_pass(
    plan: ServePlan, dataset: Path, n: int, concurrency: int, output_len: int, seed: int, out: Path, timeout_s: float
) -> dict[str, Any]:
    """One ``sglang.benchmark.serving`` run over ``dataset``; its JSON line (with ``--output-details``)."""
    argv = [
        sys.executable, "-m", CLIENT, "--backend", "sglang", "--base-url", plan.base_url,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--num-prompts", str(n),
        "--sharegpt-output-len", str(output_len), "--max-concurrency", str(concurrency),
        "--model", plan.target_path, "--tokenizer", plan.target_path, "--seed", str(seed),
        "--output-file", str(out), "--output-details", "--disable-tqdm",
    ]  # fmt: skip
    out.unlink(missing_ok=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"{CLIENT} exited with code {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(out.read_text().splitlines()[-1])


def pass_summary(res: Mapping[str, Any], n_sent: int, reference: Sequence[str] | None) -> dict[str, Any]:
    """Failed / lost / mismatched counts and the client's throughput and latency figures of one pass."""
    texts, errors = list(res.get("generated_texts") or []), list(res.get("errors") or [])
    failed = sum(1 for e in errors if e)
    done = int(res.get("completed", 0))
    mismatches = None
    if reference is not None:
        mismatches = sum(1 for t, r, e in zip(texts, reference, errors) if not e and t != r)
    keys = ("request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms")
    keys += ("median_e2e_latency_ms", "p99_e2e_latency_ms", "duration")
    return {
        "sent": n_sent,
        "completed": done,
        "failed": failed,
        "lost": n_sent - done - failed,
        "greedy_mismatches": mismatches,
        **{k: res.get(k) for k in keys},
    }


def generate(base_url: str, body: Mapping[str, Any], timeout_s: float = 600.0) -> Any:
    """One native ``/generate`` call (a request, or a batch when ``text`` / ``input_ids`` is a list); its JSON."""
    req = urllib.request.Request(
        base_url + "/generate", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as fh:
        return json.loads(fh.read())


def greedy(text: str, output_len: int) -> dict[str, Any]:
    """The body of a greedy request for exactly ``output_len`` tokens (EOS ignored)."""
    return {"text": text, "sampling_params": {"temperature": 0.0, "max_new_tokens": output_len, "ignore_eos": True}}


def check_histograms(plan: ServePlan, prompts: Sequence[str], output_len: int, concurrency: int) -> dict[str, Any]:
    """Concurrent native ``/generate`` calls; counts requests whose drafter histogram misses verify rounds."""

    def one(p: str) -> tuple[int, int]:
        m = generate(plan.base_url, greedy(p, output_len))["meta_info"]
        return sum(int(h) for h in m.get("hedgespec_histogram") or []), int(m.get("spec_verify_ct") or 0)

    with ThreadPoolExecutor(concurrency) as ex:
        pairs = list(ex.map(one, prompts))
    bad = [(h, v) for h, v in pairs if h != v]
    return {"requests": len(pairs), "histogram_mismatches": len(bad), "examples": bad[:3]}


class Sampler:
    """Samples ``read()`` every ``period_s`` in a thread: ``samples`` holds (seconds since start, value) pairs; a
    reading that raises (a process gone, a tool missing) is skipped."""

    def __init__(self, read: Callable[[], int], period_s: float = 1.0) -> None:
        self.read, self.period_s = read, period_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def peak(self) -> int:
        return max((v for _, v in self.samples), default=0)

    def _sample(self) -> None:
        try:
            self.samples.append((time.monotonic() - self._t0, int(self.read())))
        except Exception:  # noqa: BLE001 - see the class docstring
            pass

    def _run(self) -> None:
        while True:  # one reading at the start, one per period, one at the end (__exit__)
            self._sample()
            if self._stop.wait(self.period_s):
                return

    def __enter__(self) -> Sampler:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


class RssSampler(Sampler):
    """Samples the resident memory of a process and its children every ``period_s`` in a thread."""

    def __init__(self, pid: int, period_s: float = 1.0) -> None:
        self.proc = psutil.Process(pid)
        super().__init__(self.rss, period_s)

    def rss(self) -> int:
        total = 0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:  # a child exited between listing and reading
                pass
        return total


def rss_summary(samples: Sequence[tuple[float, int]], warmup_fraction: float) -> dict[str, Any]:
    """RSS after warm-up (the first sample past ``warmup_fraction`` of the soak) vs the peak and the last sample."""
    if not samples:
        return {"samples": 0}
    t_end = samples[-1][0]
    after = [r for t, r in samples if t >= warmup_fraction * t_end] or [samples[-1][1]]
    base = after[0]
    return {
        "samples": len(samples),
        "rss_after_warmup_mb": round(base / 2**20, 1),
        "rss_last_mb": round(samples[-1][1] / 2**20, 1),
        "rss_peak_mb": round(max(r for _, r in samples) / 2**20, 1),
        "growth_after_warmup": round(samples[-1][1] / base - 1.0, 4),
        "peak_growth_after_warmup": round(max(after) / base - 1.0, 4),
    }


def load_prompts(cfg: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(real, random) prompts: the workload's held-out eval prompts and seeded random ones."""
    lt = cfg["load"]
    real = [r.prompt for r in load_workload(cfg["workload"], cfg["data"], int(lt["seed"]))]
    return real[: int(lt["real_prompts"])], random_prompts(int(lt["random_prompts"]), int(lt["seed"]))


def last_tokens(prompts: Sequence[str], tokenizer: Any, n: int) -> list[str]:
    """Each prompt cut to its last ``n`` tokens (as the bench does), so every request fits the context."""
    out = []
    for p in prompts:
        ids = tokenizer(p, add_special_tokens=False)["input_ids"]
        out.append(p if len(ids) <= n else tokenizer.decode(ids[-n:]))
    return out


def _validate(lt: Mapping[str, Any]) -> None:
    conc = list(lt["concurrency"])
    if not conc or any(not isinstance(c, int) or c < 1 for c in conc):
        raise ValueError(f"load.concurrency={conc!r}: expected a non-empty list of ints >= 1, e.g. [1,8,32,64]")
    if int(lt["output_len"]) < 4:
        raise ValueError(f"load.output_len={lt['output_len']}: SGLang's client needs >= 4 output tokens")
    if int(lt["soak"]["requests"]) < 0 or int(lt["soak"]["concurrency"]) < 1:
        raise ValueError(f"load.soak={dict(lt['soak'])!r}: requests >= 0 and concurrency >= 1")


def run_load_test(cfg: Mapping[str, Any], run_dir: Path) -> dict[str, Any]:
    """Start the server of ``cfg`` (a composed ``conf/load_test.yaml``), run the stages above, stop it."""
    lt = cfg["load"]
    _validate(lt)
    plan = build_plan(cfg, prepare=True)
    real, rand = load_prompts(cfg)
    prompts = last_tokens(real + rand, AutoTokenizer.from_pretrained(plan.target_path), int(lt["max_prompt_tokens"]))
    t0 = time.monotonic()
    with ServerProcess(plan, run_dir / "server.log", float(cfg.get("startup_timeout_s", 600))) as srv:
        startup_s = time.monotonic() - t0
        passes, reference = _passes(plan, prompts, lt, run_dir)
        hist = None  # drafter histograms exist on HEDGESPEC servers only
        if plan.algorithm == "HEDGESPEC":
            hist = check_histograms(plan, prompts[: int(lt["histogram_requests"])], int(lt["output_len"]), 16)
        soak = _soak(plan, srv, prompts, reference, lt, run_dir)
    return {
        "schema": "hedgespec.load_test/v1",
        "server": {
            "command": plan.command(),
            "algorithm": plan.algorithm,
            "selector": plan.selector,
            "drafters": plan.drafter_names,
            "startup_s": round(startup_s, 1),
        },  # fmt: skip
        "client": CLIENT,
        "prompts": {"real": len(real), "random": len(rand), "output_len": int(lt["output_len"])},
        "passes": passes,
        "histograms": hist,
        "soak": soak,
    }


def _passes(
    plan: ServePlan, prompts: list[str], lt: Mapping[str, Any], run_dir: Path
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Reference at concurrency 1, then each configured concurrency over the same file and seed."""
    data = sharegpt_file(prompts, run_dir / "prompts.sharegpt.json")
    n, L, seed, tmo = len(prompts), int(lt["output_len"]), int(lt["seed"]), float(lt["pass_timeout_s"])
    ref_res = client_pass(plan, data, n, 1, L, seed, run_dir / "client_c1.jsonl", tmo)
    ref_texts = list(ref_res["generated_texts"])
    ordered = _client_order(prompts, seed)
    lens = [len(t) for t in AutoTokenizer.from_pretrained(plan.target_path)(list(ordered))["input_ids"]]
    if lens != list(ref_res["input_lens"]):
        raise RuntimeError(f"{CLIENT} sent the prompts in an order this load test cannot reproduce (seed {seed})")
    passes = [{"concurrency": 1, **pass_summary(ref_res, n, None)}]
    for c in [c for c in lt["concurrency"] if c != 1]:
        res = client_pass(plan, data, n, c, L, seed, run_dir / f"client_c{c}.jsonl", tmo)
        passes.append({"concurrency": c, **pass_summary(res, n, ref_texts)})
    return passes, dict(zip(ordered, ref_texts))


def _client_order(prompts: list[str], seed: int) -> list[str]:
    """The order SGLang's ShareGPT loader sends the rows in: ``random.seed(seed)`` then one shuffle."""
    rows = list(prompts)
    random.Random(seed).shuffle(rows)
    return rows


def _soak(
    plan: ServePlan, srv: ServerProcess, prompts: list[str], reference: dict[str, str], lt: Mapping[str, Any],
    run_dir: Path,
) -> dict[str, Any]:  # fmt: skip
    """``soak.requests`` requests at ``soak.concurrency`` with RSS sampling; outputs compared as a multiset."""
    n = int(lt["soak"]["requests"])
    if n == 0:
        return {"requests": 0}
    repeated = [prompts[j % len(prompts)] for j in range(n)]
    data = sharegpt_file(repeated, run_dir / "soak.sharegpt.json")
    with RssSampler(srv.proc.pid, float(lt["soak"]["rss_period_s"])) as rss:
        res = client_pass(
            plan, data, n, int(lt["soak"]["concurrency"]), int(lt["output_len"]), int(lt["seed"]),
            run_dir / "client_soak.jsonl", float(lt["soak"]["timeout_s"]),
        )  # fmt: skip
    got = Counter(t for t, e in zip(res["generated_texts"], res["errors"]) if not e)
    want = Counter(reference[p] for p in repeated)
    summary = pass_summary(res, n, None)
    summary["greedy_mismatches"] = sum((want - got).values())
    return {"concurrency": int(lt["soak"]["concurrency"]), **summary,
            "rss": rss_summary(rss.samples, float(lt["soak"]["warmup_fraction"]))}  # fmt: skip
