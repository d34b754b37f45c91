#!/usr/bin/env python3
"""DeepSeek-V4's MTP draft layer in PyTorch, over a Strata checkpoint directory (docs/mtp.md).

An independent reference for `strata model mtp-logits`: DeepSeek's published MTPBlock formula (inference/model.py,
MTPBlock / Block / ParallelHead; the sources are in docs/mtp.md) written here in plain torch, reading the
checkpoint's safetensors by their official names. Nothing of Strata is imported.

Input: the main model's last-layer hidden streams (before its HyperHead) come from Strata's dump (`"hidden"`), since
this script does not re-implement the main model's CSA/HCA layers. It checks that they are what they claim to be by
running the main model's own HyperHead, norm and head on them and comparing with the dump's `"main_logits"`. Then row
p of the MTP is hidden[p] with token[p + 1]; its logits draft token p + 2.

    # on the GPU machine, after building strata there:
    strata model init --preset tiny --mtp 1 --seed 3 --out /tmp/tiny-mtp
    strata model mtp-logits --model /tmp/tiny-mtp --tokens 5,17,300,2,9,41,77,128,3,260 --out /tmp/strata_mtp.json
    python3 tests/gpu/mtp_reference.py --model /tmp/tiny-mtp --strata /tmp/strata_mtp.json --out /tmp/torch_mtp.json

Output (JSON, --out): {"source": "torch", "model", "tokens", "mtp_layer", "dtype", "device", "mtp_logits": [[...]],
"head_check": {...}, "compare": {"worst_abs", "worst_rel", "per_row": [...], "argmax_agree", "pass"}}. Exit status 1
when a comparison is past the tolerance (--rtol, relative to each row's largest |logit|).
"""
import argparse
import json
import math
import sys
from pathlib import Path

import torch
from safetensors import safe_open

FP4_CODES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


class Checkpoint:
    """Tensors by official name, dequantized to fp32: F32/BF16/F16 as they are, FP8 e4m3 times its block scale
    (weight_block_size, 128×128 by default), packed FP4 (I8/U8 [rows, cols/2], low nibble = even element) times its
    1×32 scale."""

    def __init__(self, directory, device):
        self.dir = Path(directory)
        self.device = device
        self.config = json.loads((self.dir / "config.json").read_text())
        q = self.config.get("quantization_config") or {}
        self.fp8_block = tuple(q.get("weight_block_size", [128, 128]))
        self.files = {}
        index = self.dir / "model.safetensors.index.json"
        if index.exists():
            for name, file in json.loads(index.read_text())["weight_map"].items():
                self.files[name] = self.dir / file
        else:
            for file in sorted(self.dir.glob("*.safetensors")):
                with safe_open(str(file), "pt") as f:
                    for name in f.keys():
                        self.files[name] = file

    def raw(self, name):
        if name not in self.files:
            sys.exit(f"mtp_reference: no tensor '{name}' in {self.dir}")
        with safe_open(str(self.files[name]), "pt", device="cpu") as f:
            return f.get_tensor(name)

    def has(self, name):
        return name in self.files

    def get(self, name):
        t = self.raw(name)
        base = name[: -len(".weight")] if name.endswith(".weight") else None
        if t.dtype == torch.float8_e4m3fn:
            scale = self.raw(base + ".scale").float()
            br, bc = self.fp8_block
            s = scale.repeat_interleave(br, 0)[: t.shape[0]].repeat_interleave(bc, 1)[:, : t.shape[1]]
            return (t.float() * s).to(self.device)
        if t.dtype in (torch.int8, torch.uint8) and base and self.has(base + ".scale"):
            b = t.view(torch.uint8).to(torch.int64)
            codes = torch.tensor(FP4_CODES + [-c for c in FP4_CODES])
            lo, hi = codes[b & 0xF], codes[b >> 4]
            w = torch.stack([lo, hi], dim=-1).reshape(t.shape[0], t.shape[1] * 2)
            scale = self.raw(base + ".scale").float().repeat_interleave(32, 1)
            return (w * scale).to(self.device)
        return t.float().to(self.device)


def rms_norm(x, weight, eps):
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def rope(x, positions, theta, rd, inverse=False):
    """Interleaved RoPE on the trailing rd channels of x [..., n, hd]: pairs (2i, 2i+1) as complex numbers times
    exp(i · pos · θ^(-2i/rd)) (DeepSeek's apply_rotary_emb; conjugate for the inverse)."""
    freqs = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float32, device=x.device) / rd))
    angle = positions.float()[:, None] * freqs[None, :]
    rot = torch.polar(torch.ones_like(angle), -angle if inverse else angle)
    tail = torch.view_as_complex(x[..., -rd:].float().contiguous().unflatten(-1, (-1, 2)))
    out = x.clone()
    out[..., -rd:] = torch.view_as_real(tail * rot).flatten(-2)
    return out


class MtpReference:
    def __init__(self, ck, layer, dtype):
        self.ck, self.dtype = ck, dtype
        c = ck.config
        self.c = c
        self.p = f"mtp.{layer}"
        self.d, self.hc = c["hidden_size"], c.get("hc_mult", 4)
        self.eps, self.hc_eps = c.get("rms_norm_eps", 1e-6), c.get("hc_eps", 1e-6)
        self.heads, self.hd = c["num_attention_heads"], c["head_dim"]
        rp = c.get("rope_parameters") or {}
        main = rp.get("main", {}) if "main" in rp else {}
        if main.get("rope_type", "default") not in ("default", None):
            sys.exit("mtp_reference: the window layers' RoPE is not the default one; only that is implemented")
        self.theta = main.get("rope_theta", c.get("rope_theta", 10000.0))
        factor = main.get("partial_rotary_factor", c.get("partial_rotary_factor"))
        self.rd = int(self.hd * factor) if factor else c.get("qk_rope_head_dim", 64)
        self.window = c.get("sliding_window", 128)

    def w(self, name):
        return self.ck.get(name).to(self.dtype)

    def linear(self, x, name):
        return (x.to(self.dtype) @ self.w(name).T).float()

    def hc_pre(self, x, site):
        """mHC collapse: pre/post/comb from the flattened streams, comb made doubly stochastic (Sinkhorn)."""
        hc = self.hc
        fn, base, scale = self.ck.get(site + "_fn"), self.ck.get(site + "_base"), self.ck.get(site + "_scale")
        flat = x.flatten(1)
        mixes = (flat @ fn.T) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.eps)
        pre = torch.sigmoid(mixes[:, :hc] * scale[0] + base[:hc]) + self.hc_eps
        post = 2 * torch.sigmoid(mixes[:, hc : 2 * hc] * scale[1] + base[hc : 2 * hc])
        comb = (mixes[:, 2 * hc :] * scale[2] + base[2 * hc :]).view(-1, hc, hc)
        comb = comb.softmax(-1) + self.hc_eps
        comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
        for _ in range(self.c.get("hc_sinkhorn_iters", 20) - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + self.hc_eps)
            comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
        y = (pre.unsqueeze(-1) * x).sum(1)
        return y, post, comb

    @staticmethod
    def hc_post(out, x, post, comb):
        # new stream j = post[j] · out + Σ_i comb[i, j] · stream i
        return post.unsqueeze(-1) * out.unsqueeze(1) + (comb.unsqueeze(-1) * x.unsqueeze(2)).sum(1)

    def attention(self, x, positions):
        """Window-only shared-KV MQA with sinks: q via LoRA and a per-head unweighted norm, K = V, RoPE, inverse RoPE
        on the output, grouped low-rank output projection."""
        a, n = self.p + ".attn", x.shape[0]
        qr = rms_norm(self.linear(x, a + ".wq_a.weight"), self.ck.get(a + ".q_norm.weight"), self.eps)
        q = self.linear(qr, a + ".wq_b.weight").view(n, self.heads, self.hd)
        q = rms_norm(q, None, self.eps).transpose(0, 1)  # [heads, n, hd]
        q = rope(q, positions, self.theta, self.rd)
        kv = rms_norm(self.linear(x, a + ".wkv.weight"), self.ck.get(a + ".kv_norm.weight"), self.eps)
        kv = rope(kv, positions, self.theta, self.rd)
        scores = (q @ kv.T) / math.sqrt(self.hd)  # [heads, n, n]
        i, j = positions[:, None], positions[None, :]
        visible = (j <= i) & (j > i - self.window)
        scores = scores.masked_fill(~visible, float("-inf"))
        sink = self.ck.get(a + ".attn_sink").view(-1, 1, 1).expand(-1, n, 1)
        probs = torch.cat([scores, sink], -1).softmax(-1)[..., :n]  # the sink takes mass, gives no value
        o = rope(probs @ kv, positions, self.theta, self.rd, inverse=True)  # [heads, n, hd]
        o = o.transpose(0, 1).reshape(n, -1)
        groups, rank = self.c["o_groups"], self.c["o_lora_rank"]
        wo_a = self.w(a + ".wo_a.weight").view(groups, rank, -1)
        low = torch.einsum("ngd,grd->ngr", o.view(n, groups, -1).to(self.dtype), wo_a).float().flatten(1)
        return self.linear(low, a + ".wo_b.weight")

    def expert(self, x, p, weight):
        limit = self.c.get("swiglu_limit", 10.0)
        gate = self.linear(x, p + ".w1.weight").clamp(max=limit)
        up = self.linear(x, p + ".w3.weight").clamp(-limit, limit)
        return self.linear(weight * torch.nn.functional.silu(gate) * up, p + ".w2.weight")

    def moe(self, x):
        """Score-based gate (the MTP layer is past the hash layers): sqrt(softplus) scores, top-k of score + bias,
        weights = the chosen scores normalised × routed_scaling_factor; plus the shared expert."""
        f = self.p + ".ffn"
        scores = x @ self.ck.get(f + ".gate.weight").T
        func = self.c.get("scoring_func", "sqrtsoftplus")
        scores = {"sqrtsoftplus": lambda s: torch.nn.functional.softplus(s).sqrt(), "sigmoid": torch.sigmoid,
                  "softmax": lambda s: s.softmax(-1)}[func](scores)
        k = self.c["num_experts_per_tok"]
        idx = (scores + self.ck.get(f + ".gate.bias")).topk(k, -1).indices
        weights = scores.gather(1, idx)
        if func != "softmax":
            weights = weights / weights.sum(-1, keepdim=True)
        weights = weights * self.c.get("routed_scaling_factor", 1.5)
        y = torch.zeros_like(x)
        for e in idx.unique().tolist():
            rows, slot = torch.where(idx == e)
            y[rows] += self.expert(x[rows], f"{f}.experts.{e}", weights[rows, slot, None])
        if self.c.get("n_shared_experts", 1) > 0:
            y += self.expert(x, f + ".shared_experts", 1.0)
        return y

    def hyper_head(self, x, prefix):
        hc = self.hc
        fn, base, scale = (self.ck.get(prefix + n) for n in ("hc_head_fn", "hc_head_base", "hc_head_scale"))
        flat = x.flatten(1)
        mixes = (flat @ fn.T) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.eps)
        pre = torch.sigmoid(mixes * scale + base) + self.hc_eps
        return (pre.unsqueeze(-1) * x).sum(1)

    def head_weight(self):
        name = "head.weight" if self.ck.has("head.weight") else "embed.weight"  # tie_word_embeddings
        return self.w(name)

    def logits(self, y, norm_name):
        return (rms_norm(y, self.ck.get(norm_name), self.eps).to(self.dtype) @ self.head_weight().T).float()

    def main_head(self, hidden):
        """The main model's HyperHead, norm and head on its last-layer streams (checks the dump's hidden)."""
        return self.logits(self.hyper_head(hidden, ""), "norm.weight")

    def forward(self, hidden, next_tokens, positions):
        p = self.p
        e = self.ck.get("embed.weight")[next_tokens]
        e = rms_norm(e, self.ck.get(p + ".enorm.weight"), self.eps)
        h = rms_norm(hidden, self.ck.get(p + ".hnorm.weight"), self.eps)
        x = self.linear(e, p + ".e_proj.weight").unsqueeze(1) + self.linear(h, p + ".h_proj.weight")
        y, post, comb = self.hc_pre(x, p + ".hc_attn")
        x = self.hc_post(self.attention(rms_norm(y, self.ck.get(p + ".attn_norm.weight"), self.eps), positions), x, post, comb)
        y, post, comb = self.hc_pre(x, p + ".hc_ffn")
        x = self.hc_post(self.moe(rms_norm(y, self.ck.get(p + ".ffn_norm.weight"), self.eps)), x, post, comb)
        return self.logits(self.hyper_head(x, p + "."), p + ".norm.weight")


def compare(got, want, rtol):
    per_row, worst_abs, worst_rel, agree = [], 0.0, 0.0, 0
    for r in range(want.shape[0]):
        diff = (got[r] - want[r]).abs().max().item()
        scale = max(1.0, want[r].abs().max().item())
        per_row.append({"row": r, "max_abs": diff, "rel": diff / scale,
                        "argmax": [int(got[r].argmax()), int(want[r].argmax())]})
        worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, diff / scale)
        agree += int(got[r].argmax() == want[r].argmax())
    return {"worst_abs": worst_abs, "worst_rel": worst_rel, "argmax_agree": f"{agree}/{want.shape[0]}",
            "pass": worst_rel <= rtol, "per_row": per_row}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Strata checkpoint directory (config.json + safetensors)")
    ap.add_argument("--strata", required=True, help="`strata model mtp-logits --out` JSON: tokens, hidden, logits")
    ap.add_argument("--out", help="where to write this script's JSON (default: stdout)")
    ap.add_argument("--layer", type=int, help="MTP layer (default: the dump's mtp_layer)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                    help="matrix products in fp32 (compare with Strata's CPU) or bf16 (DeepSeek's activations)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rtol", type=float, default=None,
                    help="pass when every row's max |difference| / max(1, max |logit|) is at most this "
                         "(default 1e-4 for fp32, 3e-2 for bf16)")
    args = ap.parse_args()
    rtol = args.rtol if args.rtol is not None else (1e-4 if args.dtype == "fp32" else 3e-2)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    dump = json.loads(Path(args.strata).read_text())
    tokens = dump["tokens"]
    layer = args.layer if args.layer is not None else dump.get("mtp_layer", 0)
    ck = Checkpoint(args.model, args.device)
    if not ck.has(f"mtp.{layer}.e_proj.weight"):
        sys.exit(f"mtp_reference: {args.model} has no MTP layer {layer} (write one with `strata model init --mtp 1`)")
    ref = MtpReference(ck, layer, torch.float32 if args.dtype == "fp32" else torch.bfloat16)
    hc, d = ref.hc, ref.d
    with torch.no_grad():
        hidden = torch.tensor(dump["hidden"], dtype=torch.float32, device=args.device).view(len(tokens), hc, d)
        head_check = compare(ref.main_head(hidden).cpu(), torch.tensor(dump["main_logits"]), rtol)
        n = len(tokens) - 1
        positions = torch.arange(n, device=args.device)
        next_tokens = torch.tensor(tokens[1:], device=args.device)
        logits = ref.forward(hidden[:n], next_tokens, positions).cpu()
    result = {"source": "torch", "model": args.model, "tokens": tokens, "mtp_layer": layer, "dtype": args.dtype,
              "device": args.device, "rtol": rtol, "mtp_logits": logits.tolist(),
              "head_check": {k: v for k, v in head_check.items() if k != "per_row"},
              "compare": compare(torch.tensor(dump["mtp_logits"]), logits, rtol)}
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    c = result["compare"]
    print(f"main head on the dumped hidden: worst rel {head_check['worst_rel']:.3g} "
          f"(argmax {head_check['argmax_agree']}); MTP logits vs strata: worst abs {c['worst_abs']:.3g}, "
          f"worst rel {c['worst_rel']:.3g}, argmax {c['argmax_agree']} → {'PASS' if c['pass'] and head_check['pass'] else 'FAIL'}",
          file=sys.stderr)
    sys.exit(0 if c["pass"] and head_check["pass"] else 1)


if __name__ == "__main__":
    main()
