#!/usr/bin/env python3
"""Parity of Strata's CPU forward with transformers' DeepSeek-V4 (fp32, eager) — run on the GPU machine.

For several random V4 configs (every layer type, hash and top-k MoE, hc_mult 2 and 4, o_groups > 1, index_topk
smaller than the number of compressed entries, YaRN on the compress rope), this script
  1. builds DeepseekV4ForCausalLM in fp32 and randomises *every* parameter and persistent buffer (transformers'
     init zeroes sinks, position biases, hc base, correction bias and tid2eid, which would hide bugs);
     values are rounded to bf16 precision so the same model can be stored compactly as a bf16 fixture;
  2. saves it with save_pretrained (Strata must read transformers' own output);
  3. for each prompt length, runs transformers' full forward for the prompt logits and 16 greedy cached decode
     steps, then `strata generate --dump-logits` (whole prompt, and chunked), and compares:
     pass = max|Δ| / max|ref| ≤ 1e-4 for every row and identical greedy tokens;
  4. with --fixtures DIR, writes small fixtures (bf16 checkpoint + expected logits) for the CPU CTest.

usage: python3 tests/reference/parity.py --strata build/strata --work /tmp/parity [--fixtures tests/fixtures]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import time

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

TOL = 1e-4
PROMPT_LENGTHS = [1, 3, 4, 5, 127, 128, 129, 300, 530]
GEN_STEPS = 16

CSA, HCA, SWA = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"

CONFIGS = {
    # All three layer types, hash then top-k MoE, hc_mult 4, two output groups, YaRN compress rope.
    "a_hc4": dict(
        vocab_size=512, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        head_dim=64, q_lora_rank=32, num_experts_per_tok=2, n_routed_experts=8, o_groups=2, o_lora_rank=32,
        index_n_heads=16, index_head_dim=32, index_topk=8, partial_rotary_factor=0.25, sliding_window=128,
        layer_types=[SWA, CSA, HCA, CSA], mlp_layer_types=["hash_moe", "moe", "moe", "moe"], hc_mult=4,
        rope_parameters={"rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 256,
                         "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=4096,
    ),
    # hc_mult 2, four output groups, two hash layers, a different schedule.
    "b_hc2": dict(
        vocab_size=384, hidden_size=48, moe_intermediate_size=24, num_hidden_layers=5, num_attention_heads=8,
        head_dim=32, q_lora_rank=24, num_experts_per_tok=3, n_routed_experts=6, o_groups=4, o_lora_rank=16,
        index_n_heads=12, index_head_dim=32, index_topk=16, partial_rotary_factor=0.5, sliding_window=128,
        layer_types=[CSA, HCA, SWA, CSA, HCA], mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
        hc_mult=2,
        rope_parameters={"rope_type": "yarn", "factor": 8, "original_max_position_embeddings": 512},
        max_position_embeddings=4096,
    ),
    # Short sliding window and small compression rates: many window / compression boundaries per prompt.
    "c_short": dict(
        vocab_size=256, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=3, num_attention_heads=2,
        head_dim=32, q_lora_rank=16, num_experts_per_tok=2, n_routed_experts=4, o_groups=2, o_lora_rank=16,
        index_n_heads=16, index_head_dim=16, index_topk=5, partial_rotary_factor=0.25, sliding_window=16,
        compress_rates={CSA: 4, HCA: 8}, layer_types=[CSA, HCA, SWA], mlp_layer_types=["hash_moe", "moe", "moe"],
        hc_mult=4, hc_sinkhorn_iters=7,
        rope_parameters={"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1024},
        max_position_embeddings=4096,
    ),
}

# Which configs and prompt lengths become CI fixtures (kept small: bf16 weights, a few hundred KB each).
FIXTURES = {"a_hc4": 300, "c_short": 300}


def bf16_round(t):
    return t.to(torch.bfloat16).to(torch.float32)


def randomise(model, cfg, gen):
    """Give every parameter and persistent buffer a non-trivial random value."""
    hidden = cfg.hidden_size
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("sinks"):
                v = torch.randn(p.shape, generator=gen)
            elif name.endswith("position_bias"):
                v = 0.5 * torch.randn(p.shape, generator=gen)
            elif name.endswith(("attn_hc.base", "ffn_hc.base", "hc_base")):
                v = 0.5 * torch.randn(p.shape, generator=gen)
            elif name.endswith(("attn_hc.scale", "ffn_hc.scale", "hc_scale")):
                v = 0.5 + torch.rand(p.shape, generator=gen)
            elif name.endswith(("attn_hc.fn", "ffn_hc.fn", "hc_fn")):
                v = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
            elif "norm" in name and p.dim() == 1:
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=gen)
            elif name.endswith("embed_tokens.weight"):
                v = torch.randn(p.shape, generator=gen)
            elif p.dim() >= 2:
                v = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
            else:
                raise RuntimeError(f"no randomisation rule for parameter {name} {tuple(p.shape)}")
            p.copy_(bf16_round(v))
    for name, b in model.named_buffers():
        with torch.no_grad():
            if name.endswith("e_score_correction_bias"):
                b.copy_(bf16_round(0.1 * torch.randn(b.shape, generator=gen)))
            elif name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[: b.shape[1]] for _ in range(b.shape[0])]
                b.copy_(torch.stack(rows).to(b.dtype))
    return model


def reference_run(model, prompt):
    """Prompt logits from one full forward; then greedy decode through transformers' cache."""
    with torch.no_grad():
        ids = torch.tensor([prompt])
        out = model(input_ids=ids, use_cache=True)
        prompt_logits = out.logits[0].float()
        cache = out.past_key_values
        logits = prompt_logits[-1]
        gen_tokens, gen_logits = [], []
        for step in range(GEN_STEPS):
            tok = int(torch.argmax(logits))
            gen_tokens.append(tok)
            gen_logits.append(logits.clone())
            if step + 1 == GEN_STEPS:
                break
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits = out.logits[0, -1].float()
    return prompt_logits, torch.stack(gen_logits), gen_tokens


def strata_run(strata, model_dir, prompt, work, chunk=None):
    dump = os.path.join(work, "dump.safetensors")
    cmd = [strata, "generate", "--model", model_dir, "--prompt-ids", ",".join(map(str, prompt)),
           "--max-tokens", str(GEN_STEPS), "--temperature", "0", "--ignore-eos", "--dump-logits", dump]
    if chunk:
        cmd += ["--chunk", str(chunk)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"strata failed ({r.returncode}): {r.stderr}")
    with safe_open(dump, "pt") as f:
        return f.get_tensor("prompt_logits"), f.get_tensor("gen_logits"), f.get_tensor("gen_tokens").tolist()


def worst_row(ours, ref):
    """max over rows of max|Δ| / max|ref| (per row)."""
    err = (ours - ref).abs().amax(dim=-1) / ref.abs().amax(dim=-1).clamp_min(1e-30)
    return float(err.max()), int(err.argmax())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--fixtures", help="write CI fixtures here")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--lengths", default=",".join(map(str, PROMPT_LENGTHS)))
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    lengths = [int(x) for x in args.lengths.split(",")]
    os.makedirs(args.work, exist_ok=True)
    failures = 0
    print(f"{'config':8} {'len':>4} {'mode':>8} {'prompt max rel':>14} {'gen max rel':>12} {'tokens':>7}")
    for ci, name in enumerate(args.configs.split(",")):
        cfg = DeepseekV4Config(**CONFIGS[name])
        torch.manual_seed(ci)
        model = DeepseekV4ForCausalLM(cfg).to(torch.float32).eval()
        model.config._attn_implementation = "eager"
        randomise(model, cfg, torch.Generator().manual_seed(1000 + ci))
        model_dir = os.path.join(args.work, name)
        model.save_pretrained(model_dir)
        if ci == 0:
            with open(os.path.join(model_dir, "config.json")) as f:
                print("saved config keys:", sorted(json.load(f).keys()))
            files = [x for x in os.listdir(model_dir) if x.endswith(".safetensors")]
            with safe_open(os.path.join(model_dir, files[0]), "pt") as f:
                keys = sorted(f.keys())
            print(f"saved tensor names ({len(keys)}), e.g.:", keys[:6], "...", [k for k in keys if "layers.1." in k][:40])
        gen = torch.Generator().manual_seed(7 + ci)
        for L in lengths:
            prompt = torch.randint(0, cfg.vocab_size, (L,), generator=gen).tolist()
            t0 = time.time()
            ref_p, ref_g, ref_t = reference_run(model, prompt)
            t_ref = time.time() - t0
            modes = [("whole", None)] + ([("chunk7", 7), ("chunk64", 64)] if L > 7 else [])
            for mode, chunk in modes:
                p, g, t = strata_run(args.strata, model_dir, prompt, args.work, chunk)
                ep, rp = worst_row(p, ref_p)
                eg, rg = worst_row(g, ref_g)
                same = t == ref_t
                ok = ep <= TOL and eg <= TOL and same
                failures += not ok
                print(f"{name:8} {L:4d} {mode:>8} {ep:14.2e} {eg:12.2e} {'same' if same else 'DIFF':>7}"
                      f"{'' if ok else '  FAIL (worst prompt row %d, gen row %d)' % (rp, rg)}"
                      f"{'  [ref %.1fs]' % t_ref if mode == 'whole' else ''}", flush=True)
                if not same:
                    print("   ref tokens   ", ref_t, "\n   strata tokens", t)
            if args.fixtures and FIXTURES.get(name) == L:
                write_fixture(args.fixtures, name, model, prompt, ref_p, ref_g, ref_t)
    print("PASS" if failures == 0 else f"FAIL: {failures} rows", flush=True)
    return 0 if failures == 0 else 1


def write_fixture(root, name, model, prompt, ref_p, ref_g, ref_t):
    """A bf16 copy of the model (exact: every value is bf16-representable) and the fp32 reference outputs."""
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    # A copy: casting the live model would also round its non-persistent RoPE inv_freq buffers to bf16.
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(d)
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(d, f))
    save_file({"prompt_ids": torch.tensor(prompt, dtype=torch.int64), "prompt_logits": ref_p.contiguous(),
               "gen_logits": ref_g.contiguous(), "gen_tokens": torch.tensor(ref_t, dtype=torch.int64)},
              os.path.join(d, "expected.safetensors"))
    print(f"   fixture written: {d}")


if __name__ == "__main__":
    sys.exit(main())
