#!/usr/bin/env python3
"""transformers peer benchmark: Hugging Face transformers' DeepSeek-V4 on the same config and GPU as Strata.

Why this is the peer
  The CUDA backend's acceptance criterion is a side-by-side against "transformers eager on the same config and GPU;
  at batch 1, >= 30x transformers' decode tokens/s". This script produces the transformers side of that comparison:
  DeepseekV4ForCausalLM (transformers 5.17, model type deepseek_v4) built with random weights directly on one GPU in
  bf16, attention in transformers' eager implementation (V4 supports no other: no SDPA / flash / flex), no
  torch.compile, its own dynamic cache (DeepseekV4HCACache / DeepseekV4CSACache / sliding-window layers). Routed
  experts run through transformers' default experts dispatch (grouped_mm where torch supports it, else the per-expert
  loop); --experts picks another one. The JSON records which one ran.

What it measures
  * prefill: batch 1, one forward of N prompt tokens (use_cache=True, logits for the last token only, as generate()
    does), one warm-up then --repeats timed forwards; median seconds -> tokens/s.
  * decode: for each (batch B, context C): B random sequences are prefilled to C tokens (one forward when B == 1 and
    it fits, else in chunks of --prefill-chunk // B tokens through the cache; a whole-prompt OOM is recorded), then
    one untimed warm-up step and --decode-tokens timed single-token steps of all B sequences through the model's own
    cache object; median ms/step, tokens/s per GPU (B / step) and per user (1 / step).
  Every measurement sits in its own try/except: an OOM or error is recorded and the rest still runs.

Model config: the DeepSeek-V4-Flash shapes of Strata's `flash` preset (src/model/deepseek_v4/presets.cpp, the
ModelConfig defaults in src/model/config.h) truncated to --layers exactly as preset_config(name, layers) does: the
first N entries of the 43-layer schedules (layer_types: HCA, HCA, then HCA/CSA interleaved; mlp_layer_types: 3
hash_moe then moe). So --layers 2 is [HCA, HCA] x [hash_moe, hash_moe]; --layers 4 adds a CSA (indexer) layer and a
top-k routed MoE layer. Random init is transformers' own _init_weights (normal, std 0.02) run on the GPU; the
hash-routing table tid2eid, which transformers zero-fills (every token -> expert 0), is filled with random distinct
experts so routing spreads over all 256 experts.

usage (on the GPU machine, repo root):
  python3 bench/transformers_peer.py --tiny                        # seconds: does it run at all
  python3 bench/transformers_peer.py --commit $(git rev-parse HEAD) --out bench/results/transformers_peer_h200.json
  python3 bench/transformers_peer.py --quick                       # 1 layer, 1024 context
  python3 bench/transformers_peer.py --layers 4 --batch 1,8,32 --context 4096,32768
"""
import argparse
import datetime
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

import torch

import transformers
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

CSA, HCA, SWA = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"


# ---------------------------------------------------------------------------------------------------------------------
# Strata presets -> DeepseekV4Config keyword arguments
# ---------------------------------------------------------------------------------------------------------------------

def default_layer_types(n):
    """Strata's default_layer_types (= transformers' default): 2x HCA, then HCA / CSA interleaved."""
    return [HCA] * min(n, 2) + [CSA if i % 2 else HCA for i in range(max(n - 2, 0))]


def flash_preset():
    """src/model/deepseek_v4/presets.cpp flash(): the ModelConfig defaults (src/model/config.h) plus the YaRN
    compress rope and no MTP layer."""
    n = 43
    return dict(
        vocab_size=129280, hidden_size=4096, moe_intermediate_size=2048, num_hidden_layers=n,
        num_attention_heads=64, num_key_value_heads=1, head_dim=512, q_lora_rank=1024,
        num_experts_per_tok=6, n_routed_experts=256, n_shared_experts=1, max_position_embeddings=1048576,
        scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5,
        rope_theta=10000.0, compress_rope_theta=160000.0,
        layer_types=default_layer_types(n), mlp_layer_types=["hash_moe"] * 3 + ["moe"] * (n - 3),
        compress_rates={CSA: 4, HCA: 128}, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=10.0,
        sliding_window=128, o_groups=8, o_lora_rank=1024, index_n_heads=64, index_head_dim=128, index_topk=512,
        num_nextn_predict_layers=0, hidden_act="silu", rms_norm_eps=1e-6, initializer_range=0.02,
        bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        partial_rotary_factor=0.125,  # 64 rotary channels of 512
        # Flat form: DeepseekV4Config.__post_init__ builds {"main": default rope at rope_theta, "compress": these
        # keys at compress_rope_theta, attention_factor defaulted to 1.0} (the form tests/reference/parity.py uses).
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                         "beta_fast": 32.0, "beta_slow": 1.0},
    )


def tiny_preset():
    """src/model/deepseek_v4/presets.cpp tiny(): every layer type, hash then top-k MoE (= fixture a_hc4's shapes)."""
    return dict(
        vocab_size=512, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=1, head_dim=64, q_lora_rank=32, num_experts_per_tok=2, n_routed_experts=8,
        n_shared_experts=1, max_position_embeddings=4096, scoring_func="sqrtsoftplus", norm_topk_prob=True,
        routed_scaling_factor=1.5, rope_theta=10000.0, compress_rope_theta=160000.0,
        layer_types=[SWA, CSA, HCA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
        compress_rates={CSA: 4, HCA: 128}, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, swiglu_limit=10.0,
        sliding_window=128, o_groups=2, o_lora_rank=32, index_n_heads=16, index_head_dim=32, index_topk=8,
        num_nextn_predict_layers=0, hidden_act="silu", rms_norm_eps=1e-6, initializer_range=0.02,
        bos_token_id=0, eos_token_id=1, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        partial_rotary_factor=0.25,
        rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 256,
                         "beta_fast": 32.0, "beta_slow": 1.0},
    )


def truncate_layers(cfg, layers):
    """preset_config(name, layers): layer l takes layer_types[l % n], mlp_layer_types[l] (moe past the end)."""
    n = cfg["num_hidden_layers"]
    cfg = dict(cfg)
    cfg["layer_types"] = [cfg["layer_types"][l % n] for l in range(layers)]
    cfg["mlp_layer_types"] = [cfg["mlp_layer_types"][l] if l < n else "moe" for l in range(layers)]
    cfg["num_hidden_layers"] = layers
    return cfg


# ---------------------------------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------------------------------

def build_model(cfg_kwargs, experts, seed):
    """DeepseekV4ForCausalLM with transformers' random init, created directly on the GPU in bf16."""
    torch.manual_seed(seed)
    config = DeepseekV4Config(**cfg_kwargs)
    old_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            # post_init() runs DeepseekV4PreTrainedModel._init_weights on the GPU: normal(0, 0.02) for the linear
            # layers, embeddings, routers, experts (gate_up_proj / down_proj) and mHC projections.
            model = DeepseekV4ForCausalLM(config)
    finally:
        torch.set_default_dtype(old_dtype)
    model.eval()
    model.config._attn_implementation = "eager"  # the only attention V4 supports; set explicitly anyway
    if experts != "default":
        set_experts(model, experts)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("tid2eid"):  # zero-filled by _init_weights: would send every token to expert 0
                vocab, k = buf.shape
                n_exp = config.n_routed_experts
                rows = []
                for start in range(0, vocab, 16384):  # random distinct experts per token id, in slices
                    r = torch.rand(min(16384, vocab - start), n_exp, generator=gen, device="cuda")
                    rows.append(r.argsort(dim=-1)[:, :k])
                buf.copy_(torch.cat(rows).to(buf.dtype))
    return model, config


def set_experts(model, name):
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation(name)
    else:
        model.config._experts_implementation = name


def smoke_forward(model, vocab, gen):
    """None if an 8-token forward plus one cached decode step run; else the error text."""
    try:
        with torch.no_grad():
            out = model(input_ids=torch.randint(0, vocab, (1, 8), generator=gen, device="cuda"), use_cache=True)
            model(input_ids=torch.randint(0, vocab, (1, 1), generator=gen, device="cuda"),
                  past_key_values=out.past_key_values, use_cache=True)
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001
        return failure(exc)[1]


def param_summary(model):
    n = sum(p.numel() for p in model.parameters())
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    experts = [p for name, p in model.named_parameters() if name.endswith("experts.gate_up_proj")]
    std = float(experts[0][0].float().std()) if experts else None
    std_other = float(experts[0][-1].float().std()) if experts else None
    same = bool(torch.equal(experts[0][0], experts[0][-1])) if experts else None
    return {"parameters": n, "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "dtypes": dtypes, "expert0_gate_up_std": std, "expert_last_gate_up_std": std_other,
            "first_and_last_expert_identical": same}


class RoutingProbe:
    """Forward hooks on every layer's router (mlp.gate: DeepseekV4TopKRouter / DeepseekV4HashRouter, which return
    (logits, weights, indices)): how many distinct experts a forward hit, per layer. Only on when armed."""

    def __init__(self, model):
        self.armed = False
        self.hits = {}
        self.handles = []
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate") and type(mod).__name__.endswith("Router"):
                self.handles.append(mod.register_forward_hook(self._hook(name, type(mod).__name__)))

    def _hook(self, name, kind):
        def hook(_mod, _inp, out):
            if self.armed:
                idx = out[-1]
                self.hits[name] = {"router": kind, "distinct_experts": int(torch.unique(idx).numel()),
                                   "routed_rows": int(idx.shape[0])}
        return hook


# ---------------------------------------------------------------------------------------------------------------------
# Timing helpers
# ---------------------------------------------------------------------------------------------------------------------

def timed(fn):
    """(result, seconds) of fn() on the GPU timeline: CUDA events around it, the queue drained before and after."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn()
    end.record()
    torch.cuda.synchronize()
    return out, start.elapsed_time(end) / 1000.0


def cleanup():
    gc.collect()
    torch.cuda.empty_cache()


def is_oom(exc):
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def failure(exc):
    status = "oom" if is_oom(exc) else "error"
    msg = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    if status == "error":
        traceback.print_exc(file=sys.stderr)
    return status, msg


def seq_length(cache):
    try:
        return int(cache.get_seq_length())
    except Exception as exc:  # noqa: BLE001 - informational only
        return f"unavailable ({type(exc).__name__})"


def gib(nbytes):
    return round(nbytes / 2**30, 2)


def random_ids(batch, length, vocab, gen):
    return torch.randint(0, vocab, (batch, length), generator=gen, device="cuda")


# ---------------------------------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------------------------------

def measure_prefill(model, vocab, tokens, repeats, gen, probe):
    entry = {"batch": 1, "tokens": tokens, "repeats": repeats}
    try:
        torch.cuda.reset_peak_memory_stats()
        ids = random_ids(1, tokens, vocab, gen)
        with torch.no_grad():
            probe.armed, probe.hits = True, {}
            _, warm = timed(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1))
            probe.armed = False
            entry["routing"] = dict(probe.hits)
            times = []
            for _ in range(repeats):
                _, s = timed(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1))
                times.append(s)
        med = statistics.median(times)
        entry.update(status="ok", warmup_s=round(warm, 4), seconds=[round(t, 4) for t in times],
                     seconds_median=round(med, 4), tokens_per_s=round(tokens / med, 1),
                     peak_mem_gib=gib(torch.cuda.max_memory_allocated()))
    except Exception as exc:  # noqa: BLE001 - record and go on
        probe.armed = False
        entry["status"], entry["error"] = failure(exc)
    cleanup()
    return entry


def prefill_context(model, ids, chunk):
    """Prefill ids [B, C] into a fresh cache, `chunk` tokens per forward; returns the model's own cache object."""
    cache = None
    with torch.no_grad():
        for start in range(0, ids.shape[1], chunk):
            out = model(input_ids=ids[:, start:start + chunk], past_key_values=cache, use_cache=True,
                        logits_to_keep=1)
            cache = out.past_key_values
            del out
    return cache


def measure_decode(model, vocab, batch, context, steps, prefill_chunk, gen, probe):
    entry = {"batch": batch, "context": context, "steps": steps}
    notes = []
    cache = None
    try:
        torch.cuda.reset_peak_memory_stats()
        ids = random_ids(batch, context, vocab, gen)
        # 1. Fill the cache. Batch 1 tries the whole context in one forward first (what a transformers user would
        #    do); if that runs out of memory (eager attention materialises [heads, C, C] scores) the OOM is recorded
        #    and the cache is filled in chunks. Larger batches go straight to chunks of prefill_chunk // B tokens.
        chunk = max(1, min(context, prefill_chunk // batch))
        whole_oom = None
        t0 = time.perf_counter()
        if batch == 1:
            try:
                cache = prefill_context(model, ids, context)
                chunk = context
            except Exception as exc:  # noqa: BLE001
                if not is_oom(exc) or chunk >= context:
                    raise
                whole_oom = failure(exc)[1]
        if whole_oom is not None:  # outside the except block, so the failed forward's tensors can be freed
            cache = None
            cleanup()
            entry["whole_prefill"] = {"status": "oom", "error": whole_oom}
            notes.append(f"whole-context prefill of {context} tokens ran out of memory (transformers' eager "
                         f"attention); the cache was filled in chunks of {chunk} tokens instead")
            t0 = time.perf_counter()
        if cache is None:
            cache = prefill_context(model, ids, chunk)
        entry["prefill_mode"] = "whole" if chunk >= context else f"chunks of {chunk}"
        torch.cuda.synchronize()
        entry["prefill_s"] = round(time.perf_counter() - t0, 3)
        del ids
        entry["cache"] = type(cache).__name__
        layers = getattr(cache, "layers", None)
        if layers is not None:
            entry["cache_layers"] = [type(layer).__name__ for layer in layers]
        entry["cache_seq_length_after_prefill"] = seq_length(cache)

        # 2. Decode: one untimed warm-up step (routing recorded), then `steps` timed steps.
        toks = random_ids(batch, steps + 1, vocab, gen)
        times = []
        with torch.no_grad():
            probe.armed, probe.hits = True, {}
            out = model(input_ids=toks[:, :1], past_key_values=cache, use_cache=True)
            probe.armed = False
            entry["routing_first_step"] = dict(probe.hits)
            cache = out.past_key_values
            del out
            for i in range(1, steps + 1):
                out, s = timed(lambda i=i: model(input_ids=toks[:, i:i + 1], past_key_values=cache, use_cache=True))
                cache = out.past_key_values
                del out
                times.append(s)
        med = statistics.median(times)
        entry.update(status="ok", ms_per_step=[round(t * 1000, 3) for t in times],
                     ms_per_step_median=round(med * 1000, 3), ms_per_step_min=round(min(times) * 1000, 3),
                     tokens_per_s_per_gpu=round(batch / med, 2), tokens_per_s_per_user=round(1 / med, 2),
                     cache_seq_length_after_decode=seq_length(cache),
                     peak_mem_gib=gib(torch.cuda.max_memory_allocated()))
    except Exception as exc:  # noqa: BLE001 - record and go on
        probe.armed = False
        entry["status"], entry["error"] = failure(exc)
        exc = None
    if notes:
        entry["notes"] = notes
    cache = None
    cleanup()
    return entry


def cache_check(model, vocab, gen, length):
    """Tiny mode: last-token logits of one full no-cache forward of length+1 tokens vs. the same tokens fed as two
    prefill chunks and one decode step through the cache (relative max difference; bf16, so ~1e-2 is fine)."""
    try:
        ids = random_ids(1, length + 1, vocab, gen)
        with torch.no_grad():
            full = model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()
            half = length // 2
            out = model(input_ids=ids[:, :half], use_cache=True)
            out = model(input_ids=ids[:, half:length], past_key_values=out.past_key_values, use_cache=True)
            out = model(input_ids=ids[:, length:], past_key_values=out.past_key_values, use_cache=True)
            step = out.logits[0, -1].float()
        rel = float((full - step).abs().max() / full.abs().max().clamp_min(1e-30))
        return {"status": "ok", "tokens": length + 1, "rel_max_diff": rel,
                "same_argmax": bool(full.argmax() == step.argmax())}
    except Exception as exc:  # noqa: BLE001
        status, msg = failure(exc)
        return {"status": status, "error": msg}


# ---------------------------------------------------------------------------------------------------------------------

def int_list(s):
    return [int(x) for x in str(s).split(",") if x.strip()]


def git_commit():
    """The commit, "-dirty" when tracked files differ from it (scripts/provenance.sh: STRATA_COMMIT without .git)."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "provenance.sh")
    try:
        return subprocess.run(["bash", script, "--commit"], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, help="decoder layers (default 2; --quick 1; --tiny 4)")
    ap.add_argument("--batch", help="decode batch sizes, e.g. 1,8,32 (default 1)")
    ap.add_argument("--context", help="decode context lengths, e.g. 4096,32768 (default 4096; --quick 1024)")
    ap.add_argument("--decode-tokens", type=int, help="timed decode steps (default 16; --quick 8)")
    ap.add_argument("--prefill", help="prefill lengths at batch 1 (default 1024,4096; --quick 1024)")
    ap.add_argument("--repeats", type=int, default=3, help="timed prefill forwards after one warm-up (default 3)")
    ap.add_argument("--prefill-chunk", type=int, default=4096,
                    help="tokens per forward (over the whole batch) when filling a decode context in chunks")
    ap.add_argument("--experts", default="default", choices=["default", "eager", "grouped_mm", "batched_mm"],
                    help="transformers experts implementation (default: transformers' own choice)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="layers 1, context 1024, prefill 1024, decode 8")
    ap.add_argument("--tiny", action="store_true", help="Strata's tiny preset (hidden 64, 8 experts): a smoke test")
    ap.add_argument("--out", help="write the JSON here too")
    ap.add_argument("--commit", help="Strata commit to record (default: git rev-parse HEAD)")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("transformers_peer.py needs a CUDA GPU")
    t_start = time.perf_counter()
    notes = []

    if args.tiny:
        preset, base = "tiny", tiny_preset()
        d = dict(layers=4, batch="1,4", context="512", decode=4, prefill="128,512")
    elif args.quick:
        preset, base = "flash", flash_preset()
        d = dict(layers=1, batch="1", context="1024", decode=8, prefill="1024")
    else:
        preset, base = "flash", flash_preset()
        d = dict(layers=2, batch="1", context="4096", decode=16, prefill="1024,4096")
    layers = args.layers if args.layers is not None else d["layers"]
    batches = int_list(args.batch if args.batch is not None else d["batch"])
    contexts = int_list(args.context if args.context is not None else d["context"])
    decode_tokens = args.decode_tokens if args.decode_tokens is not None else d["decode"]
    prefills = int_list(args.prefill if args.prefill is not None else d["prefill"])
    cfg_kwargs = truncate_layers(base, layers)

    print(f"building {preset} x {layers} layers on {torch.cuda.get_device_name(0)} "
          f"(transformers {transformers.__version__}, torch {torch.__version__}) ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    model, config = build_model(cfg_kwargs, args.experts, args.seed)
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    summary = param_summary(model)
    probe = RoutingProbe(model)
    gen = torch.Generator(device="cuda").manual_seed(args.seed + 2)
    vocab = config.vocab_size
    print(f"built in {build_s:.1f} s: {summary['parameters'] / 1e9:.2f} B parameters, "
          f"{gib(summary['parameter_bytes'])} GiB", file=sys.stderr, flush=True)

    # Smoke forward: if transformers' default experts dispatch (grouped_mm) cannot run here, fall back to its
    # per-expert loop rather than losing every measurement.
    smoke = smoke_forward(model, vocab, gen)
    if smoke is not None and getattr(model.config, "_experts_implementation", None) != "eager":
        notes.append(f"smoke forward failed with experts implementation "
                     f"'{getattr(model.config, '_experts_implementation', None)}' ({smoke}); switched to 'eager'")
        set_experts(model, "eager")
        smoke = smoke_forward(model, vocab, gen)
    if smoke is not None:
        notes.append(f"smoke forward failed: {smoke}")
    experts_impl = getattr(model.config, "_experts_implementation", None)
    attn_impl = getattr(model.config, "_attn_implementation", None)
    notes += [
        f"attention: transformers '{attn_impl}' (DeepseekV4 declares no SDPA / flash / flex support); no torch.compile",
        f"routed experts: transformers experts implementation '{experts_impl}'"
        + (" (transformers' default choice)" if args.experts == "default" else " (requested with --experts)"),
        "weights: random, transformers' _init_weights on the GPU (normal std 0.02); tid2eid (zero-filled by "
        "transformers) set to random distinct experts per token id; sinks, position biases and the router "
        "correction bias stay at transformers' zero init (values do not change the work done)",
        "dtype: built under torch.set_default_dtype(bfloat16), so parameters are bf16 (model.dtypes lists them); "
        "from_pretrained would keep _keep_in_fp32_modules_strict (norms, mHC, sinks, position biases) in fp32 - "
        "tiny tensors, negligible time",
        "prefill timing: one forward, use_cache=True, logits_to_keep=1 (as generate() does); batch 1",
        "decode timing: random (not greedy) next tokens so no argmax / host sync sits between steps; each step is "
        "timed with CUDA events after a synchronize",
        f"layer_types {cfg_kwargs['layer_types']}, mlp_layer_types {cfg_kwargs['mlp_layer_types']} (Strata's "
        f"preset_config('{preset}', {layers}) truncation)",
    ]
    if SWA not in cfg_kwargs["layer_types"]:
        notes.append("no sliding-only layer in this truncation")
    if CSA not in cfg_kwargs["layer_types"]:
        notes.append("no CSA layer (lightning indexer) in this truncation; --layers 4 includes one")
    if "moe" not in cfg_kwargs["mlp_layer_types"]:
        notes.append("no top-k routed MoE layer in this truncation (hash routing only); --layers 4 includes one")

    result = {
        "peer": "transformers",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": args.commit or git_commit(),
        "config": {"preset": preset, "layers": layers, **{k: v for k, v in cfg_kwargs.items()},
                   "rope_parameters_resolved": config.rope_parameters,
                   "qk_rope_head_dim": getattr(config, "qk_rope_head_dim", None),
                   "dtype": "bfloat16", "attn_implementation": attn_impl,
                   "experts_implementation": experts_impl},
        "model": {**summary, "build_s": round(build_s, 1)},
        "prefill": [],
        "decode": [],
        "notes": notes,
    }

    if args.tiny:
        result["cache_check"] = cache_check(model, vocab, gen, 300)
        print("cache check:", result["cache_check"], file=sys.stderr, flush=True)

    for n in prefills:
        e = measure_prefill(model, vocab, n, args.repeats, gen, probe)
        result["prefill"].append(e)
        print(f"prefill {n}: {e.get('status')} {e.get('tokens_per_s', e.get('error', ''))} tok/s",
              file=sys.stderr, flush=True)

    for c in contexts:
        for b in batches:
            e = measure_decode(model, vocab, b, c, decode_tokens, args.prefill_chunk, gen, probe)
            result["decode"].append(e)
            print(f"decode B={b} C={c}: {e.get('status')} "
                  f"{e.get('ms_per_step_median', e.get('error', ''))} ms/step, "
                  f"{e.get('tokens_per_s_per_gpu', '-')} tok/s/GPU", file=sys.stderr, flush=True)

    result["total_s"] = round(time.perf_counter() - t_start, 1)
    text = json.dumps(result, indent=2, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
