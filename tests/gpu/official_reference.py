#!/usr/bin/env python3
"""DeepSeek-V4 with DeepSeek's own numerics, in PyTorch on CUDA: the oracle of `--precision official`.

Written here from the published description of DeepSeek's V4 inference code (inference/model.py and its kernels;
the facts and sources are in docs/official_numerics.md). Nothing of Strata is imported, and none of DeepSeek's code
is copied: the model follows the same dtype flow (bf16 tensors between ops, torch's own bf16 arithmetic where
DeepSeek uses it), and its kernels are emulated from their definitions:
  act_quant     FP8 e4m3 per 1×128 block, scale 2^ceil(log2(max(amax, 1e-4) · fp32(1/448)))
  fp8/fp4 gemm  per K block (128 for FP8 weights, 32 for FP4) an fp32 partial sum of code products, times the
                activation's and the weight's block scales, summed in K order; the result in bf16
  fp4_act_quant e2m1 per 1×32 block (ties to even), scale 2^ceil(log2(max(amax, 6·2^-126) / 6)), back to bf16
  sparse_attn   tiles of 64 index slots (−1 = padding), online softmax in fp32, probabilities rounded to bf16
                before P·V, the sink in the denominator only, the output in bf16
  hadamard      Sylvester-ordered Walsh–Hadamard, scale n^-½, bf16 in and out
  hc sinkhorn   fp32, as described in the research notes

It runs one prompt as DeepSeek's prefill (start_pos 0, the whole prompt), then --decode single-token steps, each fed
its own greedy token, and writes what a CPU test compares against (tests/official_numerics_test.cpp):

    strata model init --preset small --layers 4 --dtype fp4 --seed 3 --out /tmp/official-small
    python3 tests/gpu/official_reference.py --model /tmp/official-small --prompt-len 160 --decode 8 --out ref.json

The prompt is token (i · 7919 + 17) mod vocab for i < --prompt-len. Output JSON: {"source", "model", "prompt",
"generated", "kv_fp8_rounds", "rows": [{"position", "argmax", "top": [[id, logit], ...], "sample": [...]}],
"sample_stride", "streams": [[layer, position, [first 32 values of stream 0]], ...]}.

--mhc-sums float64 computes the mHC's fp32 reductions (the mixing logits, the streams' mean square, the weighted
stream sums) in float64 and rounds them to fp32: results that are as right as torch's, summed in another order.
Compared with compare_official.py against a default run fed the same tokens (--force-tokens that run's JSON), it
measures how far two faithful implementations of the same numerics drift apart, which is what a CPU reimplementation
can be held to.
"""
import argparse
import json
import math
import struct
import sys
from pathlib import Path

import torch

BF16 = torch.bfloat16
F32 = torch.float32
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


# --- the checkpoint ------------------------------------------------------------------------------------------------

class Checkpoint:
    """Safetensors read byte by byte (no dtype support needed from the installed libraries)."""

    def __init__(self, directory, device):
        self.dir = Path(directory)
        self.device = device
        self.config = json.loads((self.dir / "config.json").read_text())
        self.entries = {}
        for file in sorted(self.dir.glob("*.safetensors")):
            with open(file, "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(n))
                base = 8 + n
            for name, e in header.items():
                if name != "__metadata__":
                    self.entries[name] = (file, base + e["data_offsets"][0], base + e["data_offsets"][1], e["dtype"], e["shape"])

    def has(self, name):
        return name in self.entries

    def raw(self, name):
        if name not in self.entries:
            sys.exit(f"official_reference: no tensor '{name}' in {self.dir}")
        file, a, b, dtype, shape = self.entries[name]
        with open(file, "rb") as f:
            f.seek(a)
            data = bytearray(f.read(b - a))
        u8 = torch.frombuffer(data, dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
        if dtype == "F32":
            t = u8.view(F32)
        elif dtype == "BF16":
            t = u8.view(BF16)
        elif dtype == "F8_E4M3":
            t = u8.view(torch.float8_e4m3fn) if HAS_FP8 else e4m3_decode(u8)
        elif dtype == "F8_E8M0":  # 2^(v − 127)
            t = torch.pow(2.0, u8.to(F32) - 127.0)
        elif dtype == "I64":
            t = u8.view(torch.int64)
        elif dtype == "I32":
            t = u8.view(torch.int32)
        elif dtype in ("I8", "U8"):
            t = u8
        else:
            sys.exit(f"official_reference: tensor '{name}' has dtype {dtype}, not handled")
        return dtype, t.reshape(shape).to(self.device)

    def floats(self, name):
        return self.raw(name)[1].to(F32)

    def linear(self, name):
        """A matrix as DeepSeek holds it: ("fp8", codes fp32, scales [⌈out/128⌉, ⌈in/128⌉]), ("fp4", codes fp32,
        scales [out, in/32]) or ("bf16", weight)."""
        dtype, w = self.raw(name + ".weight")
        if dtype == "F8_E4M3":
            return ("fp8", w.to(F32), self.floats(name + ".scale"))
        if dtype in ("I8", "U8"):
            table = torch.tensor(E2M1, device=self.device)
            lo, hi = table[(w & 0xF).long()], table[(w >> 4).long()]
            codes = torch.stack([lo, hi], dim=-1).reshape(w.shape[0], w.shape[1] * 2)
            return ("fp4", codes, self.floats(name + ".scale"))
        return ("bf16", w.to(BF16))


# --- the kernels, from their definitions ---------------------------------------------------------------------------

def pow2_ceil(t):
    """2^ceil(log2 t), exactly: the exponent bits, plus one when a mantissa bit is set."""
    bits = t.contiguous().view(torch.int32)
    e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return torch.ldexp(torch.ones_like(t), e)


# torch before 2.1 has no float8 dtypes (Debian 12's python3-torch is 1.13): there the codes are decoded and fp32 is
# rounded to e4m3 (round to nearest even, 3 mantissa bits, subnormals below 2^-6 in steps of 2^-9) by hand.
HAS_FP8 = hasattr(torch, "float8_e4m3fn")
_E4M3 = None


def e4m3_decode(u8):
    """e4m3fn codes (uint8) → fp32."""
    global _E4M3
    if _E4M3 is None:
        values = []
        for code in range(256):
            sign, exp, man = -1.0 if code & 0x80 else 1.0, (code >> 3) & 0xF, code & 7
            if exp == 0xF and man == 7:
                values.append(math.nan)
            elif exp == 0:
                values.append(sign * man * 2.0 ** -9)
            else:
                values.append(sign * (1 + man / 8) * 2.0 ** (exp - 7))
        _E4M3 = torch.tensor(values, dtype=F32)
    return _E4M3.to(u8.device)[u8.long()]


def e4m3_round(x):
    """fp32 values in [-448, 448] → the nearest e4m3 value (ties to even), as fp32."""
    if HAS_FP8:
        return x.to(torch.float8_e4m3fn).to(F32)
    a = x.abs().to(torch.float64)
    step = torch.pow(2.0, torch.floor(torch.log2(a.clamp(min=2.0 ** -6))) - 3)
    return (torch.round(a / step) * step * torch.sign(x.to(torch.float64))).to(F32)


def act_quant(x, block):
    """x [..., K] (bf16) → (codes fp32 [..., K], scales fp32 [..., K/block])."""
    shape = x.shape
    xb = x.to(F32).reshape(*shape[:-1], shape[-1] // block, block)
    amax = xb.abs().amax(-1).clamp(min=1e-4)
    s = pow2_ceil(amax * torch.tensor(1.0 / 448.0, dtype=F32))
    q = e4m3_round((xb / s.unsqueeze(-1)).clamp(-448, 448))
    return q.reshape(shape), s


def fake_fp8(x, block, rounds):
    """act_quant in place and back, as DeepSeek's KV step: bf16 out."""
    if not rounds:
        return x.to(BF16)
    q, s = act_quant(x, block)
    shape = x.shape
    back = q.reshape(*shape[:-1], shape[-1] // block, block) * s.unsqueeze(-1)
    return back.reshape(shape).to(BF16)


def round_e2m1(a):
    """Nearest e2m1 magnitude of a ≥ 0 (ties to even), saturating at 6."""
    a = a.clamp(max=6.0)
    e = torch.floor(torch.log2(a.clamp(min=1.0)))
    quantum = torch.where(a < 1.0, torch.full_like(a, 0.5), torch.pow(2.0, e - 1))
    return torch.minimum(torch.round(a / quantum) * quantum, torch.full_like(a, 6.0))


def fake_fp4(x):
    """fp4_act_quant in place: 1×32 blocks through e2m1, back in bf16."""
    shape = x.shape
    xb = x.to(F32).reshape(*shape[:-1], shape[-1] // 32, 32)
    amax = xb.abs().amax(-1).clamp(min=6.0 * 2.0 ** -126)
    s = pow2_ceil(amax / 6.0).unsqueeze(-1)
    v = (xb / s).clamp(-6, 6)
    q = torch.sign(v) * round_e2m1(v.abs())
    return (q * s).reshape(shape).to(BF16)


_hadamards = {}


def hadamard(x):
    n = x.shape[-1]
    if n not in _hadamards:
        h = torch.ones(1, 1, dtype=F32)
        while h.shape[0] < n:
            h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
        _hadamards[n] = h.to(x.device)
    assert x.dtype == BF16
    return ((x.to(F32) @ _hadamards[n].T) * (n ** -0.5)).to(BF16)


def linear(x, w):
    """DeepSeek's linear(): FP8/FP4 weights see FP8 activations; bf16 weights F.linear in bf16."""
    kind = w[0]
    if kind == "bf16":
        return torch.nn.functional.linear(x, w[1])
    codes, wscale = w[1], w[2]
    k = codes.shape[1]
    qa, sa = act_quant(x, 128)
    qa = qa.reshape(-1, k)
    sa = sa.reshape(-1, k // 128)
    kb = 128 if kind == "fp8" else 32
    total = torch.zeros(qa.shape[0], codes.shape[0], dtype=F32, device=x.device)
    for b in range(k // kb):
        part = qa[:, b * kb:(b + 1) * kb] @ codes[:, b * kb:(b + 1) * kb].T
        a_scale = sa[:, (b * kb) // 128].unsqueeze(1)
        if kind == "fp8":
            w_scale = wscale[:, b].repeat_interleave(128)[: codes.shape[0]].unsqueeze(0)
        else:
            w_scale = wscale[:, b].unsqueeze(0)
        total = total + part * (a_scale * w_scale)
    return total.to(BF16).reshape(*x.shape[:-1], codes.shape[0])


def dequantized_bf16(w):
    """wo_a: FP8 codes × their block scale in fp32, then bf16 (DeepSeek's conversion)."""
    if w[0] == "bf16":
        return w[1]
    codes, scale = w[1], w[2]
    full = scale.repeat_interleave(128, 0)[: codes.shape[0]].repeat_interleave(128, 1)[:, : codes.shape[1]]
    return (codes * full).to(BF16)


def sparse_attn(q, kv, sink, index, scale):
    """q [H, D] bf16, kv [N, D] bf16, index [L] (−1 = padding): tiles of 64 slots, online softmax."""
    h, d = q.shape
    m = torch.full((h,), -math.inf, dtype=F32, device=q.device)
    total = torch.zeros(h, dtype=F32, device=q.device)
    acc = torch.zeros(h, d, dtype=F32, device=q.device)
    qf = q.to(F32)
    for t0 in range(0, index.numel(), 64):
        idx = index[t0:t0 + 64]
        valid = idx >= 0
        if not bool(valid.any()):
            continue
        keys = kv[idx.clamp(min=0)].to(F32)
        s = (qf @ keys.T) * scale
        s = torch.where(valid.unsqueeze(0), s, torch.full_like(s, -math.inf))
        m_new = torch.maximum(m, s.amax(1))
        rescale = torch.exp(m - m_new)
        p = torch.exp(s - m_new.unsqueeze(1))
        total = total * rescale + p.sum(1)
        acc = acc * rescale.unsqueeze(1) + p.to(BF16).to(F32) @ keys
        m = m_new
    total = total + torch.exp(sink - m)
    return (acc / total.unsqueeze(1)).to(BF16)


def rms_norm(x, weight, eps):
    xf = x.to(F32)
    xf = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (weight * xf).to(BF16)


def yarn_freqs(dim, seqlen, original, base, factor, beta_fast, beta_slow):
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=F32) / dim))
    if original > 0:
        def corr(rot):
            return dim * math.log(original / (rot * 2 * math.pi)) / (2 * math.log(base))
        low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(dim // 2, dtype=F32) - low) / (high - low)).clamp(0, 1)
        smooth = 1 - ramp
        freqs = freqs / factor * (1 - smooth) + freqs * smooth
    angles = torch.outer(torch.arange(seqlen, dtype=F32), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def rope(x, freqs, inverse=False):
    """Interleaved pairs of the last dims of x (bf16), complex multiply in fp32, back to bf16. freqs: [rows, rd/2]."""
    shape = x.shape
    xc = torch.view_as_complex(x.to(F32).reshape(*shape[:-1], -1, 2).contiguous())
    f = freqs.conj() if inverse else freqs
    while f.dim() < xc.dim():
        f = f.unsqueeze(-2)
    return torch.view_as_real(xc * f).reshape(shape).to(BF16)


def with_rope(x, rd, freqs, inverse=False):
    return torch.cat([x[..., :-rd], rope(x[..., -rd:], freqs, inverse)], -1)


# --- the model -----------------------------------------------------------------------------------------------------

class Model:
    def __init__(self, ck, kv_fp8_rounds, mhc_float64=False):
        c = ck.config
        self.ck, self.c, self.kv_rounds = ck, c, kv_fp8_rounds
        self.sums = torch.float64 if mhc_float64 else F32
        self.d, self.hc, self.eps = c["hidden_size"], c["hc_mult"], c["rms_norm_eps"]
        self.hd, self.heads = c["head_dim"], c["num_attention_heads"]
        self.rd = c.get("qk_rope_head_dim") or int(c["head_dim"] * c["partial_rotary_factor"])
        self.win, self.topk = c["sliding_window"], c["index_topk"]
        self.ih, self.ihd = c["index_n_heads"], c["index_head_dim"]
        rates = c["compress_rates"]
        self.ratio = {"sliding_attention": 0, "compressed_sparse_attention": rates["compressed_sparse_attention"],
                      "heavily_compressed_attention": rates["heavily_compressed_attention"]}
        rp = c["rope_parameters"]
        seqlen = c["max_position_embeddings"]
        main, comp = rp["main"], rp["compress"]
        self.freqs_main = yarn_freqs(self.rd, seqlen, 0, main["rope_theta"], 1, 32, 1).to(ck.device)
        self.freqs_comp = yarn_freqs(self.rd, seqlen, comp.get("original_max_position_embeddings", 0),
                                     comp["rope_theta"], comp.get("factor", 1), comp.get("beta_fast", 32),
                                     comp.get("beta_slow", 1)).to(ck.device)
        self.layers = []
        for l, kind in enumerate(c["layer_types"]):
            self.layers.append({"ratio": self.ratio[kind], "hash": c["mlp_layer_types"][l] == "hash_moe",
                                "p": f"layers.{l}", "cache": {}})
        self.embed = ck.raw("embed.weight")[1].to(BF16)
        self.head = ck.raw("head.weight")[1].to(F32) if ck.has("head.weight") else self.embed.to(F32)

    # mHC
    def mixes(self, x, fn):
        """The mixing logits of streams x [rows, hc, d]: (x · fnᵀ) · rsqrt(mean(x²) + eps), summed in self.sums."""
        xf = x.reshape(x.shape[0], -1).to(self.sums)
        return ((xf @ fn.to(self.sums).T) * torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps)).to(F32)

    def collapse(self, pre, x):
        """Σ_h pre[h] · stream h, summed in self.sums, then the bf16 block input."""
        return (pre.to(self.sums).unsqueeze(-1) * x.to(self.sums)).sum(1).to(F32).to(BF16)

    def hc_pre(self, x, p, site):
        fn, scale, base = (self.ck.floats(f"{p}.hc_{site}_{n}") for n in ("fn", "scale", "base"))
        hc = self.hc
        mixes = self.mixes(x, fn)
        pre = torch.sigmoid(mixes[:, :hc] * scale[0] + base[:hc]) + self.c["hc_eps"]
        post = 2 * torch.sigmoid(mixes[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
        comb = (mixes[:, 2 * hc:] * scale[2] + base[2 * hc:]).reshape(-1, hc, hc)
        eps = self.c["hc_eps"]
        comb = torch.softmax(comb, -1) + eps
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
        for _ in range(self.c["hc_sinkhorn_iters"] - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + eps)
            comb = comb / (comb.sum(-2, keepdim=True) + eps)
        return self.collapse(pre, x), post, comb

    def hc_post(self, out, residual, post, comb):
        t = self.sums
        y = (post.to(t).unsqueeze(-1) * out.to(t).unsqueeze(1) +
             (comb.to(t).unsqueeze(-1) * residual.to(t).unsqueeze(2)).sum(1))
        return y.to(F32).to(BF16)

    # attention pieces
    def compress(self, x, layer, name, dim, rotate, positions, freqs):
        """Entries closed by `positions` (this step's rows): the compressor's fp32 history grows by these rows."""
        ck, p = self.ck, layer["p"]
        ratio = layer["ratio"]
        overlap = ratio == 4
        cache = layer["cache"].setdefault(name, {"kv": [], "score": [], "entries": []})
        xf = x.to(F32)
        kv = xf @ ck.floats(f"{p}.attn.{name}.wkv.weight").T
        score = xf @ ck.floats(f"{p}.attn.{name}.wgate.weight").T
        ape = ck.floats(f"{p}.attn.{name}.ape")
        norm = ck.floats(f"{p}.attn.{name}.norm.weight")
        for r, pos in enumerate(positions):
            cache["kv"].append(kv[r])
            cache["score"].append(score[r] + ape[pos % ratio])
            if (pos + 1) % ratio:
                continue
            w = pos // ratio
            start = w * ratio
            kvs = torch.stack(cache["kv"][start:start + ratio])
            scs = torch.stack(cache["score"][start:start + ratio])
            if overlap:
                if w > 0:
                    prev_kv = torch.stack(cache["kv"][start - ratio:start])[:, :dim]
                    prev_sc = torch.stack(cache["score"][start - ratio:start])[:, :dim]
                else:
                    prev_kv = torch.zeros(ratio, dim, device=x.device)
                    prev_sc = torch.full((ratio, dim), -math.inf, device=x.device)
                kvs = torch.cat([prev_kv, kvs[:, dim:]], 0)
                scs = torch.cat([prev_sc, scs[:, dim:]], 0)
            entry = (kvs * scs.softmax(0)).sum(0)
            entry = rms_norm(entry.to(BF16), norm, self.eps)
            entry = with_rope(entry, self.rd, freqs[start])
            if rotate:
                entry = fake_fp4(hadamard(entry))
            else:
                entry = torch.cat([fake_fp8(entry[:-self.rd], 64, self.kv_rounds), entry[-self.rd:]])
            cache["entries"].append(entry)
        return cache["entries"]

    def indexer(self, x, qr, layer, positions, prefill, freqs):
        ck, p = self.ck, layer["p"]
        q = linear(qr, ck.linear(f"{p}.attn.indexer.wq_b")).reshape(-1, self.ih, self.ihd)
        q = with_rope(q, self.rd, freqs[positions])
        q = fake_fp4(hadamard(q))
        entries = self.compress(x, layer, "indexer.compressor", self.ihd, True, positions, freqs)
        keys = torch.stack(entries) if entries else torch.zeros(0, self.ihd, dtype=BF16, device=x.device)
        weights = linear(x, ck.linear(f"{p}.attn.indexer.weights_proj")) * (self.ihd ** -0.5 * self.ih ** -0.5)
        out = []
        n = len(positions)
        end = positions[-1] + 1
        width = min(self.topk, end // layer["ratio"])
        for r, pos in enumerate(positions):
            visible = (pos + 1) // layer["ratio"]
            score = torch.einsum("hd,td->ht", q[r], keys[: end // layer["ratio"]])
            score = (score.relu_() * weights[r].unsqueeze(-1)).sum(0)
            if prefill:
                score = score + torch.where(torch.arange(score.numel(), device=x.device) >= visible, -math.inf, 0.0)
            if width == 0:
                out.append(torch.zeros(0, dtype=torch.long, device=x.device))
                continue
            top = score.topk(width).indices
            if prefill:
                top = torch.where(top >= visible, torch.full_like(top, -1), top)
            out.append(top)
        assert n == len(out)
        return out, keys

    def attention(self, x, layer, positions, prefill):
        ck, p, rd = self.ck, layer["p"], self.rd
        ratio = layer["ratio"]
        freqs = self.freqs_comp if ratio else self.freqs_main
        f = freqs[positions]
        qr = rms_norm(linear(x, ck.linear(f"{p}.attn.wq_a")), ck.floats(f"{p}.attn.q_norm.weight"), self.eps)
        q = linear(qr, ck.linear(f"{p}.attn.wq_b")).reshape(-1, self.heads, self.hd)
        q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + self.eps)  # bf16 arithmetic, as DeepSeek
        q = with_rope(q, rd, f)
        kv = rms_norm(linear(x, ck.linear(f"{p}.attn.wkv")), ck.floats(f"{p}.attn.kv_norm.weight"), self.eps)
        kv = with_rope(kv, rd, f)
        kv = torch.cat([fake_fp8(kv[:, :-rd], 64, self.kv_rounds), kv[:, -rd:]], -1)
        window = layer["cache"].setdefault("window", [])
        window.extend(kv)
        picks = None
        if ratio == 4:
            picks, _ = self.indexer(x, qr, layer, positions, prefill, freqs)
        entries = self.compress(x, layer, "compressor", self.hd, False, positions, freqs) if ratio else []
        rows = torch.stack(window + entries) if entries else torch.stack(window)
        n_window = len(window)
        sink = ck.floats(f"{p}.attn.attn_sink")
        n = len(positions)
        out = []
        for r, pos in enumerate(positions):
            width = min(n, self.win) if prefill else self.win
            idx = list(range(max(0, pos - self.win + 1), pos + 1))
            idx += [-1] * (width - len(idx))
            if ratio == 4:
                idx += [int(e) + n_window if e >= 0 else -1 for e in picks[r].tolist()]
            elif ratio:
                closed = (pos + 1) // ratio
                cwidth = n // ratio if prefill else closed
                idx += [e + n_window for e in range(closed)] + [-1] * (cwidth - closed)
            index = torch.tensor(idx, dtype=torch.long, device=x.device)
            out.append(sparse_attn(q[r], rows, sink, index, self.hd ** -0.5))
        o = torch.stack(out)
        o = with_rope(o, rd, f, inverse=True)
        groups = self.c["o_groups"]
        wo_a = dequantized_bf16(ck.linear(f"{p}.attn.wo_a")).reshape(groups, self.c["o_lora_rank"], -1)
        o = torch.einsum("sgd,grd->sgr", o.reshape(n, groups, -1), wo_a)
        return linear(o.reshape(n, -1), ck.linear(f"{p}.attn.wo_b"))

    def expert(self, x, prefix, weights=None):
        ck, limit = self.ck, self.c["swiglu_limit"]
        gate = linear(x, ck.linear(f"{prefix}.w1")).to(F32)
        up = linear(x, ck.linear(f"{prefix}.w3")).to(F32)
        if limit > 0:
            up = up.clamp(-limit, limit)
            gate = gate.clamp(max=limit)
        h = torch.nn.functional.silu(gate) * up
        if weights is not None:
            h = weights * h
        return linear(h.to(BF16), ck.linear(f"{prefix}.w2"))

    def moe(self, x, layer, tokens):
        ck, p, c = self.ck, layer["p"], self.c
        scores = x.to(F32) @ ck.floats(f"{p}.ffn.gate.weight").T
        scores = torch.nn.functional.softplus(scores).sqrt()
        if layer["hash"]:
            indices = ck.raw(f"{p}.ffn.gate.tid2eid")[1].long()[tokens]
        else:
            indices = (scores + ck.floats(f"{p}.ffn.gate.bias")).topk(c["num_experts_per_tok"], -1).indices
        weights = scores.gather(1, indices)
        weights = weights / weights.sum(-1, keepdim=True) * c["routed_scaling_factor"]
        y = torch.zeros(x.shape, dtype=F32, device=x.device)
        for e in range(c["n_routed_experts"]):
            rows, slot = torch.where(indices == e)
            if rows.numel():
                y[rows] += self.expert(x[rows], f"{p}.ffn.experts.{e}", weights[rows, slot, None]).to(F32)
        y += self.expert(x, f"{p}.ffn.shared_experts").to(F32)
        return y.to(BF16)

    def forward(self, tokens, positions, prefill, streams_out):
        ck = self.ck
        t = torch.tensor(tokens, device=ck.device)
        h = self.embed[t].unsqueeze(1).repeat(1, self.hc, 1)
        for l, layer in enumerate(self.layers):
            p = layer["p"]
            residual = h
            x, post, comb = self.hc_pre(h, p, "attn")
            x = rms_norm(x, ck.floats(f"{p}.attn_norm.weight"), self.eps)
            h = self.hc_post(self.attention(x, layer, positions, prefill), residual, post, comb)
            residual = h
            x, post, comb = self.hc_pre(h, p, "ffn")
            x = rms_norm(x, ck.floats(f"{p}.ffn_norm.weight"), self.eps)
            h = self.hc_post(self.moe(x, layer, t), residual, post, comb)
            streams_out.append([l, positions[-1], h[-1, 0, :32].float().tolist()])
        last = h[-1:]
        fn, scale, base = ck.floats("hc_head_fn"), ck.floats("hc_head_scale"), ck.floats("hc_head_base")
        pre = torch.sigmoid(self.mixes(last, fn) * scale + base) + self.c["hc_eps"]
        y = self.collapse(pre, last)
        y = rms_norm(y, ck.floats("norm.weight"), self.eps)
        return (y.to(F32) @ self.head.T)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=160)
    ap.add_argument("--decode", type=int, default=8)
    ap.add_argument("--kv-fp8-rounds", choices=["on", "off"], default="on")
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--sample-stride", type=int, default=64)
    ap.add_argument("--mhc-sums", choices=["float32", "float64"], default="float32")
    ap.add_argument("--force-tokens", help="a JSON this script wrote: feed its generated tokens instead of our own")
    ap.add_argument("--full-logits", action="store_true", help="also write every logit of every step")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cpu: for measuring the oracle's own drift where no GPU is lent (both runs of a comparison on "
                         "the CPU); the fixtures come from CUDA, whose torch.topk tie order is DeepSeek's")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("official_reference: needs CUDA (torch.topk's tie order on CUDA is the one DeepSeek's code sees); "
                 "--device cpu runs it on the CPU for drift measurements")
    if args.device == "cpu":
        print("official_reference: on the CPU — torch.topk breaks exact ties differently from CUDA", file=sys.stderr)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ck = Checkpoint(args.model, args.device)
    model = Model(ck, args.kv_fp8_rounds == "on", args.mhc_sums == "float64")
    forced = json.loads(Path(args.force_tokens).read_text())["generated"] if args.force_tokens else None
    vocab = ck.config["vocab_size"]
    prompt = [(i * 7919 + 17) % vocab for i in range(args.prompt_len)]
    rows, streams, generated = [], [], []
    tokens, positions, prefill = prompt, list(range(len(prompt))), True
    for step in range(args.decode + 1):
        with torch.no_grad():
            logits = model.forward(tokens, positions, prefill, streams)
        top = logits.topk(args.top)
        rows.append({"position": positions[-1], "argmax": int(logits.argmax()),
                     "top": [[int(i), float(v)] for v, i in zip(top.values.tolist(), top.indices.tolist())],
                     "sample": logits[:: args.sample_stride].tolist()})
        if args.full_logits:
            rows[-1]["logits"] = logits.tolist()
        nxt = int(logits.argmax()) if forced is None or step >= len(forced) else forced[step]
        generated.append(nxt)
        tokens, positions, prefill = [nxt], [positions[-1] + 1], False
    out = {"source": "tests/gpu/official_reference.py (torch " + torch.__version__ + ", " +
           (torch.cuda.get_device_name() if args.device == "cuda" else "CPU") + ")", "model": args.model, "prompt_len": args.prompt_len,
           "prompt": prompt, "generated": generated[: args.decode], "kv_fp8_rounds": args.kv_fp8_rounds == "on",
           "mhc_sums": args.mhc_sums, "sample_stride": args.sample_stride, "rows": rows, "streams": streams}
    Path(args.out).write_text(json.dumps(out))
    print(f"official_reference: {args.prompt_len} prompt tokens, {args.decode} decoded: {generated[: args.decode]}")


if __name__ == "__main__":
    main()
