#!/usr/bin/env python3
"""Localises a parity failure reported by parity.py: replays one config and prompt, then compares Strata's residual
streams after every layer (`strata generate --dump-hidden`) with transformers' and prints, per layer, the rows
whose max|Δ|/max|ref| exceeds the tolerance. For CSA layers it also prints the gap between the k-th and (k+1)-th
Lightning Indexer scores at those rows (a gap near fp32 rounding would mean an unresolvable near-tie).

usage: python3 tests/reference/debug_row.py --strata build/strata --config a_hc4 --length 530 [--prefix 63]
"""
import argparse
import os
import subprocess
import tempfile

import torch
from safetensors import safe_open
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

import parity


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--length", type=int, required=True)
    ap.add_argument("--prefix", type=int, default=0, help="use only the first N prompt tokens")
    args = ap.parse_args()
    ci = list(parity.CONFIGS).index(args.config)
    cfg = DeepseekV4Config(**parity.CONFIGS[args.config])
    torch.manual_seed(ci)
    model = DeepseekV4ForCausalLM(cfg).to(torch.float32).eval()
    parity.randomise(model, cfg, torch.Generator().manual_seed(1000 + ci))
    gen = torch.Generator().manual_seed(7 + ci)
    for L in parity.PROMPT_LENGTHS:  # replay parity.py's prompt draws
        prompt = torch.randint(0, cfg.vocab_size, (L,), generator=gen).tolist()
        if L == args.length:
            break
    if args.prefix:
        prompt = prompt[: args.prefix]
    scores, layer_out, routes = {}, {}, {}
    for i, layer in enumerate(model.model.layers):
        layer.register_forward_hook(lambda m, a, out, i=i: layer_out.__setitem__(i, out.detach()))
        if cfg.mlp_layer_types[i] == "moe":
            layer.mlp.gate.register_forward_hook(lambda m, a, out, i=i: routes.__setitem__(i, (m, a[0].detach())))
        comp = layer.self_attn.compressor
        if comp is not None and hasattr(comp, "indexer"):
            comp.indexer.scorer.register_forward_hook(lambda m, a, out, i=i: scores.__setitem__(i, out.detach()))
    with torch.no_grad():
        model(input_ids=torch.tensor([prompt]), use_cache=True)
    work = tempfile.mkdtemp()
    model.save_pretrained(work)
    dump = os.path.join(work, "hidden.safetensors")
    subprocess.run([args.strata, "generate", "--model", work, "--prompt-ids", ",".join(map(str, prompt)),
                    "--max-tokens", "1", "--dump-hidden", dump], check=True, capture_output=True)
    k, rate = cfg.index_topk, cfg.compress_rates["compressed_sparse_attention"]
    print("prompt:", prompt[:80], "..." if len(prompt) > 80 else "")
    with safe_open(dump, "pt") as f:
        for layer in range(cfg.num_hidden_layers):
            ours = f.get_tensor(f"hidden.{layer}")
            ref = layer_out[layer][0].reshape(len(prompt), -1).float()
            err = (ours - ref).abs().amax(-1) / ref.abs().amax(-1)
            bad = (err > parity.TOL).nonzero().flatten().tolist()
            print(f"layer {layer} ({cfg.layer_types[layer]}, {cfg.mlp_layer_types[layer]}): max rel {float(err.max()):.2e}; "
                  f"{len(bad)} rows over tolerance, first: {bad[:12]}")
            if layer in scores:
                for r in bad[:3]:
                    visible = (r + 1) // rate
                    s = scores[layer][0, r, :visible].sort(descending=True).values
                    if visible > k:
                        print(f"   row {r}: indexer k-th {float(s[k-1]):.7g} vs (k+1)-th {float(s[k]):.7g}")
            if layer in routes:
                gate, x = routes[layer]
                with torch.no_grad():
                    sc = gate.score_fn(torch.nn.functional.linear(x.reshape(-1, x.shape[-1]), gate.weight))
                    biased = (sc + gate.e_score_correction_bias).sort(dim=-1, descending=True).values
                for r in bad[:3]:
                    n = cfg.num_experts_per_tok
                    print(f"   row {r}: router k-th {float(biased[r, n-1]):.7g} vs (k+1)-th {float(biased[r, n]):.7g}")


if __name__ == "__main__":
    main()
