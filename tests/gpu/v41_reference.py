#!/usr/bin/env python3
"""DeepSeek-V4.1-Flash TEXT model: an independent PyTorch reference forward (correctness oracle for Strata).

Written from the facts in docs/deepseek_v4_1_reference.md only (no HF/vLLM code was read or copied). Sections used:
  §1.1-1.2 config fields and layer schedule   §1.3-1.4 rope (default + YaRN), interleaved apply / inverse
  §2 Engram (normalised-vocab map, hash multipliers, primes/offsets, sticky rolling-XOR hash, gate, injection)
  §3 attention (Q path, SWA KV, compressor ratio 1/2, shared compressed KV, sink, grouped wo_a, wo_b), §3.9 QAT
  §4 indexer (keys, scores, two-level candidate blocks, top-k, reuse)   §5 MoE   §6 mHC   §7 norms/head
  §9 per-sequence decode state   §10 tensor names   §11 order of one forward (HF *cache* path, see §3.8).

Everything runs in the weights' dtype (fp32 by default; float64 is accepted for tests). HF's bf16 roundings are NOT
reproduced, except cos/sin rounded to bf16 under `hf_numerics=True` (§1.3). Batch size is 1: token_ids is 1-D [T].
`forward` is literally one chunk through the same stateful step that `decode_step` uses (a fresh DecodeState), which
is the HF cache path (use_cache=True) the sheet calls the intended semantics; the buggy HF no-cache concatenation of
compressed KV across sources (§3.8 WARNING) is deliberately not reproduced.

Assumptions (items the sheet marks UNKNOWN, or leaves open):
  A1  Top-k ties (indexer top-k, candidate-block top-k, MoE expert top-k) are broken by (-score, index): the lowest
      index wins. torch.topk's order is implementation defined (§4.4); only exact ties are affected.
  A2  sqrtsoftplus = sqrt(softplus(x)) with torch's softplus (beta 1, threshold 20) (§5, §13).
  A3  Engram tables held as float are used as-is (already dequantised). If a sibling `engram.embed.scale` exists, it
      is applied per 32 channels as 2^(e-127) (uint8 E8M0) or multiplied directly (float scale) (§2.5).
  A4  The compressed-vocabulary map needs the tokenizer's normalisers (§2.1), which this file does not run: a config
      supplies `engram_token_map` (list or path to a JSON list; extension key), or the map is the identity when
      engram_compressed_vocab_size == vocab_size. pad code = map[engram_pad_id].
  A5  Engram hash multipliers: numpy default_rng(10007*L) when numpy is present; else the sheet's values for the
      release (compressed vocab 99092, layers 1/14); else the extension key `engram_hash_multipliers` must be given.
      small_config() without numpy falls back to a torch generator and records the values in the config.
  A6  No live/padding mask: every token is live (no DEAD codes), and the Engram gate is never zeroed (HF passes
      token_mask=None, §2.6). The hash code still handles DEAD = -1 entries in the history.
  A7  YaRN: `factor` is read from the rope dict as the sheet says; small_config keeps max_position_embeddings /
      original_max_position_embeddings == factor so a loader that derives factor from that ratio agrees. If the
      YaRN ramp bounds coincide, 0.001 is added to the upper one (avoids 0/0). attention_factor defaults to 1.0.
  A8  Indexer keys are owned by layers that are both kv source and index source; a consumer with ratio > 0 uses the
      latest `topk_bias` only if its width equals the shared compressed-KV length, else all compressed entries are
      masked (the sheet's no-bias fallback, §3.5). The compressor `rope_theta` from rope_scaling is overridden by
      compress_rope_theta.
  A9  Fake-quant e4m3 rounding is done arithmetically (RNE on the e4m3 grid, saturating at 448) instead of a
      float8 cast; the fp8 path clamps to +-448 before, so this equals the cast (§3.9).
  A10 DSpark/MTP layers, vision and image tokens are not implemented (§8). Routed experts stored as packed MXFP4 and
      fp8 dense weights are not loaded; `--weights` reads F32/F16/BF16/I64/U8 safetensors only.
  A11 The checkpoint names of §10 are used as-is (`head.weight`, no `model.` prefix). Random weights come from one
      torch CPU generator in the order of weight_specs(); their values are this file's choice, not the release's.
  A12 A kv source publishes its running compressed KV (not only index keys, §4.1) even when no group completed in
      this call; the compressed KV has no window (§9). Masked window entries use -inf instead of HF's finite minimum
      (identical after the sink softmax, since every query sees itself).
  A13 partial_rotary_factor = qk_rope_head_dim / head_dim (64/512 in the release), for both rope types; the indexer
      rotates the last qk_rope_head_dim channels of its index_head_dim with the compress rope.
  A14 The multiplier bound uses engram_compressed_vocab_size (99092 in the release) for any config.

Checked: `--self-test` passes 10/10 with Debian's python3-torch 1.13 on CPU (`/usr/bin/python3` on the dev machine):
fp32 decode vs full 4.8e-6, prefix 3.1e-6, fp64 QAT decode vs full 7e-15; rope and primes equal the sheet's values.

CLI: --self-test | --config JSON | --small SEED, --weights-seed N, --tokens a,b,c | --random-tokens N, --out FILE,
     --dump-weights DIR, --weights DIR, --device cpu|cuda, --qat, --hf-numerics.
"""
import argparse
import dataclasses
import json
import math
import os
import struct
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
import torch.nn.functional as F

DEAD = -1
NEG_INF = float("-inf")
DEFAULT_RATIOS_40 = [0, 0] + [2] * 18 + [1] * 20
# §2.2, confirmed against numpy: (compressed vocab, layer id) -> multipliers (odd, value*2+1)
RELEASE_MULTIPLIERS = {
    (99092, 1): [76632096046245, 4839876093313, 35959672319349, 73987337458391],
    (99092, 14): [67716810739261, 51510806800915, 30921347202721, 82619226485591],
}


# ============================================================================================ config (§1)
@dataclass
class V41Config:
    vocab_size: int = 129280
    hidden_size: int = 5120
    num_hidden_layers: int = 40
    num_attention_heads: int = 64
    num_key_value_heads: int = 1
    head_dim: int = 512
    q_lora_rank: int = 1280
    qk_rope_head_dim: int = 64
    rope_theta: float = 10000.0
    compress_rope_theta: float = 160000.0
    rope_parameters: Optional[Dict[str, Any]] = None
    rope_scaling: Optional[Dict[str, Any]] = None
    max_position_embeddings: int = 1048576
    attention_bias: bool = False
    attention_dropout: float = 0.0
    sliding_window: int = 128
    compress_ratios: Optional[List[int]] = None
    kv_source_layer_ids: Optional[List[int]] = None
    index_source_layer_ids: Optional[List[int]] = None
    candidate_source_layer_id: Optional[int] = None
    candidate_topk_blocks: int = 2048
    candidate_block_size: int = 8
    index_n_heads: int = 32
    index_head_dim: int = 128
    index_topk: int = 512
    o_groups: int = 8
    o_lora_rank: int = 1024
    moe_intermediate_size: int = 2304
    n_routed_experts: int = 384
    n_shared_experts: int = 1
    num_experts_per_tok: int = 6
    scoring_func: str = "sqrtsoftplus"
    gate_temp: float = 1.0
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.5
    topk_method: str = "noaux_tc"
    swiglu_limit: float = 10.0
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    engram_layer_ids: Optional[List[int]] = None
    engram_vocab_size: int = 16000000
    engram_num_embeddings: Optional[List[int]] = None
    engram_max_ngram_size: int = 4
    engram_n_heads: int = 8
    engram_head_dim: int = 256
    engram_pad_id: int = 2
    engram_compressed_vocab_size: int = 99092
    num_nextn_predict_layers: int = 3
    dspark_block_size: int = 5
    dspark_noise_token_id: int = 128799
    dspark_target_layer_ids: Optional[List[int]] = None
    dspark_markov_rank: int = 256
    dspark_n_routed_experts: int = 128
    dspark_num_experts_per_tok: int = 3
    hidden_act: str = "silu"
    initializer_range: float = 0.02
    rms_norm_eps: float = 1e-20
    use_cache: bool = True
    tie_word_embeddings: bool = False
    pad_token_id: Optional[int] = None
    bos_token_id: Optional[int] = None
    eos_token_id: Any = 1
    output_router_logits: bool = False
    router_aux_loss_coef: float = 0.001
    router_jitter_noise: float = 0.0
    layer_types: Optional[List[str]] = None
    # extension keys of this reference (not HF fields): see assumptions A4/A5
    engram_hash_multipliers: Optional[List[List[int]]] = None
    engram_token_map: Any = None

    def __post_init__(self):
        self._derive_schedule()
        self._derive_rope()
        self._derive_engram()

    # ---- §1.2 layer schedule
    def _derive_schedule(self):
        n, m = self.num_hidden_layers, self.num_nextn_predict_layers
        if self.compress_ratios is None:
            if n == 40:
                r = list(DEFAULT_RATIOS_40)
            else:
                n_slide = min(2, n)
                n_enc = max(0, (n - n_slide + 1) // 2)
                r = [0] * n_slide + [2] * n_enc + [1] * (n - n_slide - n_enc)
        else:
            r = [int(v) for v in self.compress_ratios]
        if not (n <= len(r) <= n + m):
            raise ValueError(f"compress_ratios has {len(r)} entries, need {n}..{n + m}")
        self.compress_ratios = r[:n] + r[n:n + m] + [0] * (n + m - len(r))
        bb = self.compress_ratios[:n]
        if self.kv_source_layer_ids is None:
            if bb == DEFAULT_RATIOS_40:
                self.kv_source_layer_ids = [2, 8, 14, 20]
            else:
                self.kv_source_layer_ids = [i for i in range(n) if bb[i] > 0 and (i == 0 or bb[i - 1] != bb[i])]
        if self.index_source_layer_ids is None:
            if self.kv_source_layer_ids == [2, 8, 14, 20]:
                self.index_source_layer_ids = [2, 8, 14, 20, 24, 28, 32, 36]
            else:
                self.index_source_layer_ids = list(self.kv_source_layer_ids)
        if self.candidate_source_layer_id is None:
            self.candidate_source_layer_id = self.kv_source_layer_ids[-1] if self.kv_source_layer_ids else -1
        kvs, ixs = self.kv_source_layer_ids, self.index_source_layer_ids
        if self.candidate_source_layer_id >= 0 and self.candidate_source_layer_id not in ixs:
            raise ValueError("candidate_source_layer_id must be an index source")
        if self.dspark_target_layer_ids is None:
            self.dspark_target_layer_ids = sorted(i for i in range(n) if i not in kvs)[-3:]
        for s in kvs:
            if not (0 <= s < n and bb[s] > 0):
                raise ValueError(f"kv source {s} out of range or ratio 0")
        for s in ixs:
            if not (0 <= s < n and bb[s] > 0 and any(k <= s for k in kvs)):
                raise ValueError(f"index source {s} needs ratio > 0 and a kv source at or before it")
        for i in range(n):
            if bb[i] > 0 and not any(k <= i for k in kvs):
                raise ValueError(f"layer {i} has ratio > 0 but no kv source at or before it")
        if self.layer_types is None:
            self.layer_types = ["shared_compressed_attention" if i in kvs else "sliding_attention" for i in range(n)]
        if self.engram_layer_ids is None:
            self.engram_layer_ids = []

    def kv_source_of(self, layer):   # the most recent kv source at or before `layer` (§1.2)
        return max(s for s in self.kv_source_layer_ids if s <= layer)

    def index_source_of(self, layer):   # the latest index source at or before `layer` (§4.5)
        return max(s for s in self.index_source_layer_ids if s <= layer)

    # ---- §1.3 rope parameters per rope type
    def _derive_rope(self):
        partial = self.qk_rope_head_dim / self.head_dim
        rp = self.rope_parameters
        if not (isinstance(rp, dict) and isinstance(rp.get("main"), dict) and isinstance(rp.get("compress"), dict)):
            main = {"rope_type": "default", "rope_theta": self.rope_theta, "partial_rotary_factor": partial}
            comp = {k: v for k, v in (self.rope_scaling or {}).items() if k not in ("main", "compress")}
            comp["rope_theta"] = self.compress_rope_theta
            comp["partial_rotary_factor"] = partial
            comp.setdefault("rope_type", "default")   # a legacy "type" key alone therefore means no YaRN (§1.3)
            if comp["rope_type"] == "yarn":
                comp.setdefault("attention_factor", 1.0)
            self.rope_parameters = {"main": main, "compress": comp}
        self._rope = {kind: rope_inv_freq(self.rope_parameters[kind], self.head_dim, self.max_position_embeddings)
                      for kind in ("main", "compress")}

    # ---- §2.1-2.3 Engram tables, multipliers, token map
    def _derive_engram(self):
        ids = self.engram_layer_ids
        self._primes, self._offsets = find_engram_primes(len(ids), self.engram_max_ngram_size - 1,
                                                         self.engram_n_heads, self.engram_vocab_size)
        sums = [sum(sum(g) for g in layer) for layer in self._primes]
        if self.engram_num_embeddings is None or list(self.engram_num_embeddings) == [0] * len(ids):
            self.engram_num_embeddings = sums
        elif list(self.engram_num_embeddings) != sums:
            raise ValueError(f"engram_num_embeddings {self.engram_num_embeddings} != prime sums {sums}")
        if not ids:
            self._token_map = None
            self._mult = []
            return
        tm = self.engram_token_map
        if isinstance(tm, str):
            with open(tm) as f:
                tm = json.load(f)
        if tm is None:
            if self.engram_compressed_vocab_size != self.vocab_size:
                raise ValueError("engram needs engram_token_map (the normalised-vocabulary map, §2.1)")
            tm = list(range(self.vocab_size))
        if len(set(tm)) != self.engram_compressed_vocab_size:
            raise ValueError(f"token map has {len(set(tm))} distinct ids, expected {self.engram_compressed_vocab_size}")
        self._token_map = torch.tensor(tm, dtype=torch.int64)
        self._pad_code = int(tm[self.engram_pad_id])
        if self.engram_hash_multipliers is not None:
            self._mult = [[int(v) for v in row] for row in self.engram_hash_multipliers]
        else:
            self._mult = compute_hash_multipliers(ids, self.engram_compressed_vocab_size, self.engram_max_ngram_size)
            if self._mult is None:
                raise RuntimeError("numpy is missing: pass engram_hash_multipliers in the config")

    def to_json_dict(self):
        d = dataclasses.asdict(self)
        if isinstance(self.engram_token_map, str):
            d["engram_token_map"] = self._token_map.tolist() if self._token_map is not None else None
        return d


def config_from_json(path):
    with open(path) as f:
        d = json.load(f)
    if isinstance(d.get("text_config"), dict):
        d = d["text_config"]
    aliases = {"intermediate_size": "moe_intermediate_size", "num_local_experts": "n_routed_experts",
               "engram_pad_token_id": "engram_pad_id"}
    names = {f.name for f in dataclasses.fields(V41Config)}
    kw = {}
    for k, v in d.items():
        k = aliases.get(k, k)
        if k in names and k not in kw:
            kw[k] = v
    return V41Config(**kw)


def _is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    i = 3
    while i * i <= n:
        if n % i == 0:
            return False
        i += 2
    return True


def find_engram_primes(n_layers, n_ngrams, n_heads, vocab_size):
    """§2.3: one global `seen` set; per layer, per n-gram the search restarts at vocab_size-1; per head take the
    next prime > current not yet used. Returns primes[L][g][h] and offsets[L][g*n_heads+h] (per-layer running sum)."""
    seen, primes, offsets = set(), [], []
    for _ in range(n_layers):
        layer = []
        for _ in range(n_ngrams):
            current, row = vocab_size - 1, []
            for _ in range(n_heads):
                current += 1
                while not _is_prime(current) or current in seen:
                    current += 1
                seen.add(current)
                row.append(current)
            layer.append(row)
        flat = [p for row in layer for p in row]
        offsets.append([sum(flat[:c]) for c in range(len(flat))])
        primes.append(layer)
    return primes, offsets


def compute_hash_multipliers(layer_ids, compressed_vocab, n_shifts):
    """§2.2: bound = max(1, (int64_max // V) // 2); default_rng(10007*L).integers(0, bound, n_shifts) * 2 + 1."""
    bound = max(1, ((2 ** 63 - 1) // compressed_vocab) // 2)
    try:
        import numpy as np
        return [[int(v) * 2 + 1 for v in np.random.default_rng(10007 * L).integers(
            low=0, high=bound, size=(n_shifts,), dtype=np.int64)] for L in layer_ids]
    except ImportError:
        rows = [RELEASE_MULTIPLIERS.get((compressed_vocab, L)) for L in layer_ids]
        return rows if all(r is not None and len(r) == n_shifts for r in rows) else None


def small_config(seed=0):
    """Tiny config with the release's STRUCTURE: layers 0-1 SWA only (main rope), 2-3 ratio 2 (2 = kv+index source,
    3 consumer), 4-7 ratio 1 (4 = kv + index + candidate source, 5 consumer, 6 "reindex" index source, 7 reuses 6's
    top-k), Engram on layers 1 and 4, hc 4, window 8, index_topk 10 inside a 4x4-position candidate pool.
    seed 0: identity token map; seed != 0: a random many-to-one map renumbered by first appearance (like §2.1)."""
    vocab = 256
    token_map, cvs = None, vocab
    if seed != 0:
        g = torch.Generator().manual_seed(int(seed))
        raw = torch.randint(0, vocab * 3 // 4, (vocab,), generator=g).tolist()
        raw[0:4] = [-1, -2, -3, -4]   # distinct special tokens
        first = {}
        token_map = [first.setdefault(k, len(first)) for k in raw]
        cvs = len(first)
    engram_ids, n_shifts = [1, 4], 4
    mult = compute_hash_multipliers(engram_ids, cvs, n_shifts)
    if mult is None:   # A5 fallback: not numpy's values, but recorded in the config
        bound = max(1, ((2 ** 63 - 1) // cvs) // 2)
        mult = []
        for L in engram_ids:
            g = torch.Generator().manual_seed(10007 * L)
            mult.append([int(v) * 2 + 1 for v in torch.randint(0, bound, (n_shifts,), generator=g,
                                                                 dtype=torch.int64).tolist()])
    return V41Config(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=1,
        head_dim=64, q_lora_rank=32, qk_rope_head_dim=16, rope_theta=10000.0, compress_rope_theta=160000.0,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32, "beta_slow": 1,
                      "original_max_position_embeddings": 256},
        max_position_embeddings=1024, sliding_window=8, compress_ratios=[0, 0, 2, 2, 1, 1, 1, 1],
        kv_source_layer_ids=None, index_source_layer_ids=[2, 4, 6], candidate_source_layer_id=None,
        candidate_topk_blocks=4, candidate_block_size=4, index_n_heads=4, index_head_dim=32, index_topk=10,
        o_groups=2, o_lora_rank=32, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2,
        swiglu_limit=3.0, hc_mult=4, engram_layer_ids=engram_ids, engram_vocab_size=300,
        engram_max_ngram_size=n_shifts, engram_n_heads=2, engram_head_dim=16, engram_pad_id=2,
        engram_compressed_vocab_size=cvs, num_nextn_predict_layers=0, engram_hash_multipliers=mult,
        engram_token_map=token_map)


# ============================================================================================ rope (§1.3-1.4)
def rope_inv_freq(params, head_dim, max_pos):
    """Returns (inv_freq fp32 [dim/2] on CPU, attention_factor). Default: 1/base^(2i/dim). YaRN as in §1.3."""
    base = float(params["rope_theta"])
    dim = int(head_dim * float(params.get("partial_rotary_factor", 1.0)))
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)   # [dim/2] fp32
    inv_extra = 1.0 / pos_freqs
    if params.get("rope_type", "default") != "yarn":
        return inv_extra, 1.0
    factor = float(params["factor"])
    orig = float(params.get("original_max_position_embeddings", max_pos))
    beta_fast, beta_slow = float(params.get("beta_fast", 32)), float(params.get("beta_slow", 1))

    def corr(r):
        return dim * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))

    low, high = corr(beta_fast), corr(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)   # [dim/2]
    extra = 1 - ramp
    inv_inter = 1.0 / (factor * pos_freqs)
    inv = inv_inter * (1 - extra) + inv_extra * extra
    return inv, float(params.get("attention_factor", 1.0))


def rope_cos_sin(cfg, kind, positions, hf_numerics, dtype):
    """cos/sin [S, dim/2] at absolute positions (int64 [S]); freqs = inv_freq * float(pos) in fp32."""
    inv, af = cfg._rope[kind]
    inv = inv.to(positions.device)
    freqs = positions.to(torch.float32)[:, None] * inv[None, :]   # [S, dim/2]
    cos, sin = torch.cos(freqs) * af, torch.sin(freqs) * af
    if hf_numerics:   # HF casts cos/sin to the model dtype (bf16)
        cos, sin = cos.to(torch.bfloat16).to(torch.float32), sin.to(torch.bfloat16).to(torch.float32)
    return cos.to(dtype), sin.to(dtype)


def apply_rope(x, cos, sin, inverse=False):
    """Rotate the LAST 2*len(cos) channels of x ([S, C] or [S, H, C]) in interleaved pairs (even, odd);
    the leading channels pass unchanged. inverse=True rotates by -theta."""
    half = cos.shape[-1]
    C = x.shape[-1]
    if x.dim() == 3:
        cos, sin = cos[:, None, :], sin[:, None, :]   # [S, 1, half]
    if inverse:
        sin = -sin
    nope = x[..., :C - 2 * half]
    xr = x[..., C - 2 * half:]
    even, odd = xr[..., 0::2], xr[..., 1::2]   # [..., half] each
    out_even = even * cos - odd * sin
    out_odd = even * sin + odd * cos
    rot = torch.stack([out_even, out_odd], dim=-1).flatten(-2)   # [..., 2*half], re-interleaved
    return torch.cat([nope, rot], dim=-1)


def rms_norm(x, weight, eps):
    """y = weight * (x * rsqrt(mean(x^2) + eps)); weight None = unweighted."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight


# ============================================================================================ fake-quant (§3.9)
def _pow2(e, like):
    """2^e for an integer tensor e (normal range), as like's dtype, built exactly from the exponent bits."""
    e = e.to(torch.int64)
    if like.dtype == torch.float64:
        return ((e + 1023).clamp(1, 2046) << 52).view(torch.float64)
    bits = ((e + 127).clamp(1, 254) << 23).to(torch.int32)
    return bits.view(torch.float32).to(like.dtype)


def pow2ceil(t):
    """2^ceil(log2 t) for positive normal t (= 2^(E-127+[M != 0]) on the fp32 fields)."""
    m, e = torch.frexp(t)   # t = m * 2^e, m in [0.5, 1)
    return torch.where(m == 0.5, _pow2(e - 1, t), _pow2(e, t))


def round_e4m3(v):
    """Round to the nearest float8_e4m3fn value (ties to even), saturating at +-448 (A9)."""
    a = v.abs()
    _, e = torch.frexp(a)
    exp = (e - 1).clamp_min(-6)   # floor(log2 a); subnormals share the exponent -6 (spacing 2^-9)
    spacing = _pow2(exp - 3, a)   # 3 mantissa bits
    q = (torch.round(a / spacing) * spacing).clamp_max(448.0)   # torch.round = half to even
    return torch.copysign(q, v)


def e2m1_round(y):
    """§3.9 e2m1 codes: y already in [-6, 6]; returns the grid value with sign from signbit."""
    dt, dev = y.dtype, y.device
    inf = torch.tensor(float("inf"), dtype=torch.float32)
    up = lambda b: torch.nextafter(torch.tensor(b, dtype=torch.float32), inf).item()
    thresholds = [up(0.25), 0.75, up(1.25), 1.75, up(2.5), 3.5, up(5.0)]
    m = y.abs()
    code = torch.zeros_like(m, dtype=torch.int64)
    for thr in thresholds:
        code = code + (m >= thr).to(torch.int64)
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=dt, device=dev)
    val = grid[code]
    return torch.where(torch.signbit(y), -val, val)


def fake_quant_fp8_block(x, block=32):
    """_fake_quant_fp8_block: per `block` channels, scale = pow2ceil(max(amax,1e-4) * fp32(1/448)), e4m3 RNE."""
    C = x.shape[-1]
    if C % block != 0:
        return x
    xb = x.reshape(*x.shape[:-1], C // block, block)   # [..., nblk, block]
    amax = xb.abs().amax(-1, keepdim=True).clamp_min(1e-4)
    inv448 = torch.tensor(1.0 / 448.0, dtype=torch.float32).to(x.dtype)
    scale = pow2ceil(amax * inv448)
    q = round_e4m3((xb / scale).clamp(-448.0, 448.0))
    return (q * scale).reshape(x.shape)


def fake_quant_fp4_block(x, block=32, e4m3_scales=False):
    """_fake_quant_fp4_block: ue8m0 scales (pow2ceil(max(amax, 6*2^-126) * fp32(1/6))) or, with e4m3_scales,
    e4m3(max(amax, 6*2^-9) / 6); values rounded to e2m1."""
    C = x.shape[-1]
    if C % block != 0:
        return x
    xb = x.reshape(*x.shape[:-1], C // block, block)   # [..., nblk, block]
    amax = xb.abs().amax(-1, keepdim=True)
    if e4m3_scales:
        scale = round_e4m3(amax.clamp_min(6.0 * 2.0 ** -9) / 6.0)
    else:
        inv6 = torch.tensor(1.0 / 6.0, dtype=torch.float32).to(x.dtype)
        scale = pow2ceil(amax.clamp_min(6.0 * 2.0 ** -126) * inv6)
    q = e2m1_round((xb / scale).clamp(-6.0, 6.0))
    return (q * scale).reshape(x.shape)


# ============================================================================================ engram (§2)
def engram_hash_ids(cfg, history, positions):
    """§2.4 sticky rolling-XOR hash. history: int64 [P] compressed ids by absolute position (DEAD = -1);
    positions: int64 [S]. Returns int64 [S, n_engram_layers, (max_ngram-1)*n_heads], columns (2-gram h0.., 3-gram..)."""
    n_shift, nh = cfg.engram_max_ngram_size, cfg.engram_n_heads
    pad = torch.full_like(positions, cfg._pad_code)
    blocked = torch.zeros_like(positions, dtype=torch.bool)   # [S]
    toks = []
    for s in range(n_shift):
        src = history[(positions - s).clamp_min(0)]           # [S]
        blocked = blocked | (positions < s) | (src == DEAD)
        toks.append(torch.where(blocked, pad, src))            # [S]
    per_layer = []
    for li in range(len(cfg.engram_layer_ids)):
        mult = cfg._mult[li]
        r = toks[0] * mult[0]                                  # prod_0, int64 (no overflow, §2.2)
        cols = []
        for g in range(1, n_shift):                            # r_g = (g+1)-gram hash
            r = torch.bitwise_xor(r, toks[g] * mult[g])
            for h in range(nh):
                prime = cfg._primes[li][g - 1][h]
                cols.append(torch.remainder(r, prime) + cfg._offsets[li][(g - 1) * nh + h])
        per_layer.append(torch.stack(cols, dim=-1))            # [S, n_ids]
    return torch.stack(per_layer, dim=1)                       # [S, nL, n_ids]


def engram_lookup(W, prefix, ids):
    """§2.5 rows of the layer's table; ids int64 [S, n_ids] -> [S, n_ids, ehd] (A3 for scales)."""
    rows = W[prefix + "embed.weight"][ids]                     # [S, n_ids, ehd]
    sname = prefix + "embed.scale"
    if sname in W:
        sc = W[sname][ids]                                     # [S, n_ids, ehd/32]
        if sc.dtype == torch.uint8:
            sc = _pow2(sc.to(torch.int64) - 127, rows[..., :sc.shape[-1]])
        sc = sc.to(rows.dtype)
        S, n, ehd = rows.shape
        rows = (rows.reshape(S, n, sc.shape[-1], ehd // sc.shape[-1]) * sc[..., None]).reshape(S, n, ehd)
    return rows


def engram_forward(cfg, W, layer, h, ids):
    """§2.6: gated injection of the hashed n-gram memory into all hc streams. h [S, hc, D], ids [S, n_ids]."""
    p = f"layers.{layer}.engram."
    S, hc, D = h.shape
    rows = engram_lookup(W, p, ids)                            # [S, n_ids, ehd]
    E = rows.reshape(S, rows.shape[1] * rows.shape[2])         # id-major flatten [S, n_ids*ehd]
    kv = E @ W[p + "wkv.weight"].t()                           # [S, (hc+1)*D]
    key = kv[:, :hc * D].reshape(S, hc, D)                     # [S, hc, D]
    value = kv[:, hc * D:]                                     # [S, D]
    w = W[p + "q_weight"] * W[p + "k_weight"]                  # [hc, D]
    eps = cfg.rms_norm_eps
    rstd = torch.rsqrt(h.pow(2).mean(-1) + eps) * torch.rsqrt(key.pow(2).mean(-1) + eps)   # [S, hc]
    dot = ((h * w[None, :, :]) * key).sum(-1) * rstd * (D ** -0.5)                        # [S, hc]
    gate = torch.sigmoid(torch.copysign(torch.sqrt(dot.abs().clamp_min(1e-6)), dot))     # [S, hc]
    return h + gate[:, :, None] * value[:, None, :]            # [S, hc, D]


# ============================================================================================ mHC (§6)
def hc_mixes(cfg, h, fn, scale, base):
    """h [S, hc, D] -> pre [S, hc], post [S, hc], comb [S, hc(j), hc(k)] (Sinkhorn)."""
    S, hc, D = h.shape
    f = h.reshape(S, hc * D)                                                   # [S, hc*D]
    f = f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)   # unweighted, eps = rms_norm_eps
    mixes = f @ fn.t()                                                         # [S, (2+hc)*hc]
    eps = cfg.hc_eps
    pre = torch.sigmoid(mixes[:, 0:hc] * scale[0] + base[0:hc]) + eps          # [S, hc]
    post = 2.0 * torch.sigmoid(mixes[:, hc:2 * hc] * scale[1] + base[hc:2 * hc])
    C = (mixes[:, 2 * hc:2 * hc + hc * hc] * scale[2] + base[2 * hc:2 * hc + hc * hc]).reshape(S, hc, hc)
    comb = torch.softmax(C, dim=-1) + eps                                      # softmax over k
    comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)                       # columns (sum over j)
    for _ in range(cfg.hc_sinkhorn_iters - 1):
        comb = comb / (comb.sum(dim=-1, keepdim=True) + eps)                   # rows (sum over k)
        comb = comb / (comb.sum(dim=-2, keepdim=True) + eps)                   # columns
    return pre, post, comb


def hc_collapse(h, pre):
    """sum_k pre[:, k] * h[:, k, :]: [S, hc, D], [S, hc] -> [S, D] (pre is not normalised)."""
    return (pre[:, :, None] * h).sum(dim=1)


def hc_expand(x, res, post, comb):
    """out[:, k] = post[:, k] * x + sum_j comb[:, j, k] * res[:, j]. x [S, D], res [S, hc, D] -> [S, hc, D]."""
    mixed = torch.einsum("sjk,sjd->skd", comb, res)           # [S, hc, D]
    return post[:, :, None] * x[:, None, :] + mixed


# ============================================================================================ attention (§3)
class StepCtx:
    """Per-call facts shared by all layers: absolute query positions, per-rope-type cos/sin, flags."""

    def __init__(self, cfg, positions, qat, hf_numerics, dtype):
        self.cfg, self.pos, self.qat, self.hf_numerics, self.dtype = cfg, positions, qat, hf_numerics, dtype
        self.cos, self.sin = {}, {}
        for kind in ("main", "compress"):
            self.cos[kind], self.sin[kind] = rope_cos_sin(cfg, kind, positions, hf_numerics, dtype)

    def rope_at(self, kind, positions):
        return rope_cos_sin(self.cfg, kind, positions, self.hf_numerics, self.dtype)


def swa_update(cfg, st, kv, pos):
    """§3.2: keys = ring (<= window-1 past entries) + new S entries; query p sees j iff p - window < j <= p.
    Returns keys [N, hd] and the additive mask [S, N]; the ring keeps the last window-1 entries."""
    keys = torch.cat([st.swa_k, kv], dim=0)                    # [N, hd]
    kpos = torch.cat([st.swa_pos, pos], dim=0)                 # [N]
    win = cfg.sliding_window
    allowed = (kpos[None, :] <= pos[:, None]) & (kpos[None, :] > pos[:, None] - win)   # [S, N]
    mask = torch.zeros(allowed.shape, dtype=kv.dtype, device=kv.device).masked_fill(~allowed, NEG_INF)
    keep = win - 1
    start = max(0, keys.shape[0] - keep)
    st.swa_k, st.swa_pos = keys[start:], kpos[start:]
    return keys, mask


def compressor_forward(cfg, W, layer, x, st):
    """§3.3 at kv sources. Returns (pre-rope latent [G, hd] or None, first_group_position)."""
    p = f"layers.{layer}.attn.compressor."
    ratio = cfg.compress_ratios[layer]
    first_pos = st.entry_count * ratio
    if ratio == 1:   # every token is its own entry
        return rms_norm(x @ W[p + "wkv.weight"].t(), W[p + "norm.weight"], cfg.rms_norm_eps), first_pos
    kvp = torch.cat([st.buf_kv, x @ W[p + "wkv.weight"].t()], dim=0)      # [R + S, hd]
    g = torch.cat([st.buf_gate, x @ W[p + "wgate.weight"].t()], dim=0)    # [R + S, hd]
    n_full = (kvp.shape[0] // ratio) * ratio
    st.buf_kv, st.buf_gate = kvp[n_full:], g[n_full:]                     # leftovers of the incomplete group
    if n_full == 0:
        return None, first_pos
    G = n_full // ratio
    kvg = kvp[:n_full].reshape(G, ratio, -1)                               # [G, ratio, hd]
    wts = torch.softmax(g[:n_full].reshape(G, ratio, -1), dim=1)           # per channel over the group's tokens
    latent = (kvg * wts).sum(dim=1)                                        # [G, hd]
    return rms_norm(latent, W[p + "norm.weight"], cfg.rms_norm_eps), first_pos


def sink_attention(q, keys, mask, sink, scale):
    """§3.6: q [S, H, hd], keys = values [N, hd], mask [S, N] (0 / -inf), sink [H] -> o [S, H, hd]."""
    S, H, _ = q.shape
    N = keys.shape[0]
    logits = torch.einsum("shd,nd->hsn", q, keys) * scale                  # [H, S, N]
    logits = logits + mask[None, :, :]
    sink_col = sink.to(q.dtype)[:, None, None].expand(H, S, 1)             # [H, S, 1]
    full = torch.cat([logits, sink_col], dim=-1)                           # [H, S, N+1]
    m = full.amax(dim=-1, keepdim=True)                                    # max over real logits and sink
    e = torch.exp(full - m)
    probs = (e / e.sum(dim=-1, keepdim=True))[:, :, :N]                    # drop the sink column
    return torch.einsum("hsn,nd->shd", probs, keys)                        # [S, H, hd]


def grouped_output_projection(cfg, W, layer, o):
    """§3.7 steps 2-4: o [S, H, hd] (inverse rope already applied) -> [S, D]."""
    p = f"layers.{layer}.attn."
    S, H, hd = o.shape
    G, r = cfg.o_groups, cfg.o_lora_rank
    og = o.reshape(S, G, (H // G) * hd)                                    # group g = heads g*H/G.., head-major
    wa = W[p + "wo_a.weight"].reshape(G, r, (H // G) * hd)                 # [G, r, H/G*hd]
    y = torch.einsum("sgi,gri->sgr", og, wa).reshape(S, G * r)             # [S, G*r]
    return y @ W[p + "wo_b.weight"].t()                                    # [S, D]


def compressed_branch(cfg, W, layer, x, qr, ctx, st, shared):
    """§3.3-3.5 + §4 for a layer with ratio > 0. Returns (compressed KV [T, hd], bias [S, T])."""
    ratio = cfg.compress_ratios[layer]
    is_kv = layer in cfg.kv_source_layer_ids
    latent, entry_pos = None, None
    if is_kv:
        latent, first_pos = compressor_forward(cfg, W, layer, x, st)
        if latent is not None:
            entry_pos = first_pos + ratio * torch.arange(latent.shape[0], dtype=torch.int64, device=x.device)
    if layer in cfg.index_source_layer_ids:
        indexer_forward(cfg, W, layer, x, qr, latent, entry_pos, ctx, st, shared)
    if is_kv:
        if latent is not None:   # rope runs after the indexer consumed the pre-rope latent
            ccos, csin = ctx.rope_at("compress", entry_pos)
            rot = apply_rope(latent, ccos, csin)                           # [G, hd]
            if ctx.qat:
                rot = fake_quant_fp4_block(rot, 16, e4m3_scales=True)
            st.comp_kv = torch.cat([st.comp_kv, rot], dim=0)
            st.entry_count += latent.shape[0]
        shared["compress_kv"] = st.comp_kv                                 # replaces the previous source's
    comp = shared["compress_kv"]                                           # [T, hd]
    T, S = comp.shape[0], x.shape[0]
    bias = shared.get("topk_bias")
    if bias is None or bias.shape[1] != T:                                 # A8 / §3.5 fallback
        bias = torch.full((S, T), NEG_INF, dtype=x.dtype, device=x.device)
    return comp, bias


def attention_forward(cfg, W, layer, x, ctx, st, shared):
    """§3 for one layer; x = attn_norm(collapsed) [S, D] -> [S, D]."""
    p = f"layers.{layer}.attn."
    S = x.shape[0]
    H, hd, eps = cfg.num_attention_heads, cfg.head_dim, cfg.rms_norm_eps
    ratio = cfg.compress_ratios[layer]
    kind = "main" if ratio == 0 else "compress"
    cos, sin = ctx.cos[kind], ctx.sin[kind]
    qr = rms_norm(x @ W[p + "wq_a.weight"].t(), W[p + "q_norm.weight"], eps)   # [S, q_lora]
    q = (qr @ W[p + "wq_b.weight"].t()).reshape(S, H, hd)                      # [S, H, hd], no per-head norm
    q = apply_rope(q, cos, sin)
    kv = rms_norm(x @ W[p + "wkv.weight"].t(), W[p + "kv_norm.weight"], eps)   # [S, hd]
    kv = apply_rope(kv, cos, sin)
    if ctx.qat:
        kv = fake_quant_fp8_block(kv, 32)
    keys, mask = swa_update(cfg, st, kv, ctx.pos)                              # [N, hd], [S, N]
    if ratio > 0:
        comp, bias = compressed_branch(cfg, W, layer, x, qr, ctx, st, shared)
        keys = torch.cat([keys, comp], dim=0)                                  # [N + T, hd]
        mask = torch.cat([mask, bias], dim=1)                                  # [S, N + T]
    o = sink_attention(q, keys, mask, W[p + "attn_sink"], hd ** -0.5)          # [S, H, hd]
    o = apply_rope(o, cos, sin, inverse=True)                                  # -theta at the query position
    return grouped_output_projection(cfg, W, layer, o)


# ============================================================================================ indexer (§4)
def ordered_topk_indices(scores, k):
    """Indices [S, k] of the k best per row, ordered by (-score, index) (A1): a stable ascending sort of -score."""
    order = torch.sort(-scores, dim=-1, stable=True).indices                   # [S, N]
    return order[:, :k]


def select_candidate_blocks(I, clen, topk_blocks, block):
    """§4.3: I [S, T] (-inf = invisible), clen [S] -> bool [S, T] of positions in the kept blocks."""
    S, T = I.shape
    nb = (T + block - 1) // block
    pad = torch.full((S, nb * block - T), NEG_INF, dtype=I.dtype, device=I.device)
    bscore = torch.cat([I, pad], dim=1).reshape(S, nb, block).amax(dim=-1)     # [S, nb]
    last = torch.div(clen - 1, block, rounding_mode="floor")                   # [S]; -1 when clen == 0
    bidx = torch.arange(nb, device=I.device)
    pin = (bidx[None, :] == last[:, None]) & (last[:, None] >= 0)              # newest (partly filled) block
    bscore = bscore.masked_fill(pin, float("inf"))
    sel = ordered_topk_indices(bscore, min(topk_blocks, nb))                   # [S, kb]
    keep_b = torch.zeros((S, nb), dtype=torch.bool, device=I.device)
    keep_b.scatter_(1, sel, bscore.gather(1, sel) > NEG_INF)
    return keep_b.repeat_interleave(block, dim=1)[:, :T]                      # [S, T]


def indexer_forward(cfg, W, layer, x, qr, latent, entry_pos, ctx, st, shared):
    """§4.1-4.4 at an index source: keys (owners), scores, candidates, top-k -> shared['topk_bias'] [S, T]."""
    p = f"layers.{layer}.attn.indexer."
    S = x.shape[0]
    nh, ihd, ratio = cfg.index_n_heads, cfg.index_head_dim, cfg.compress_ratios[layer]
    if layer in cfg.kv_source_layer_ids:   # owns_k
        if latent is not None:
            k = rms_norm(latent @ W[p + "wk.weight"].t(), W[p + "k_norm.weight"], cfg.rms_norm_eps)   # [G, ihd]
            kc, ks = ctx.rope_at("compress", entry_pos)
            k = apply_rope(k, kc, ks)
            if ctx.qat:
                k = fake_quant_fp4_block(k, 32)
            st.idx_k = torch.cat([st.idx_k, k], dim=0)
        shared["index_k"] = st.idx_k       # the running key cache, even when no group completed
    keys = shared.get("index_k")
    if keys is None or keys.shape[0] == 0:
        return
    T = keys.shape[0]
    q = (qr @ W[p + "wq_b.weight"].t()).reshape(S, nh, ihd)                    # [S, nh, ihd]
    q = apply_rope(q, ctx.cos["compress"], ctx.sin["compress"])
    if ctx.qat:
        q = fake_quant_fp4_block(q, 32)
    s = torch.relu(torch.einsum("shd,td->sht", q, keys)) * (ihd ** -0.5)       # [S, nh, T]
    w = (x @ W[p + "weights_proj.weight"].t()) * (nh ** -0.5)                  # [S, nh]
    I = (s * w[:, :, None]).sum(dim=1)                                         # [S, T]
    clen = torch.div(ctx.pos + 1, ratio, rounding_mode="floor")                # [S], this layer's own ratio
    visible = torch.arange(T, device=x.device)[None, :] < clen[:, None]        # [S, T]
    I = I.masked_fill(~visible, NEG_INF)
    cs = cfg.candidate_source_layer_id
    if layer == cs:
        shared["candidates"] = select_candidate_blocks(I, clen, cfg.candidate_topk_blocks, cfg.candidate_block_size)
    elif 0 <= cs < layer and shared.get("candidates") is not None:
        cand = shared["candidates"]
        assert cand.shape == I.shape, "candidate mask and index keys disagree"
        I = I.masked_fill(~cand, NEG_INF)
    sel = ordered_topk_indices(I, min(cfg.index_topk, T))                      # [S, k]
    bias = torch.full((S, T), NEG_INF, dtype=x.dtype, device=x.device)
    picked = I.gather(1, sel)                                                  # [S, k]
    chosen = torch.zeros_like(picked).masked_fill(~(picked > NEG_INF), NEG_INF) # -inf picks = dummy column
    bias.scatter_(1, sel, chosen)
    shared["topk_bias"] = bias


# ============================================================================================ MoE (§5)
def router_scores(cfg, logits):
    if cfg.scoring_func == "sqrtsoftplus":
        return torch.sqrt(F.softplus(logits))                                 # A2
    if cfg.scoring_func == "softmax":
        return torch.softmax(logits, dim=-1)
    if cfg.scoring_func == "sigmoid":
        return torch.sigmoid(logits)
    raise ValueError(f"scoring_func {cfg.scoring_func}")


def expert_forward(cfg, W, prefix, x, weight=None):
    """§5 expert: clamp u to +-limit, g to <= limit; y = silu(g) * u (* routing weight, before w2); w2(y)."""
    g = x @ W[prefix + "w1.weight"].t()                                        # [n, I]
    u = x @ W[prefix + "w3.weight"].t()                                        # [n, I]
    lim = cfg.swiglu_limit
    if lim > 0:
        u = u.clamp(-lim, lim)
        g = g.clamp_max(lim)
    y = F.silu(g) * u
    if weight is not None:
        y = y * weight[:, None]                                                # [n, I]
    return y @ W[prefix + "w2.weight"].t()                                     # [n, D]


def moe_forward(cfg, W, layer, x):
    """§5: x = ffn_norm(collapsed) [S, D] -> [S, D]. Bias steers selection only; weights are the unbiased scores."""
    p = f"layers.{layer}.ffn."
    logits = (x @ W[p + "gate.weight"].t()) / cfg.gate_temp                   # [S, E]
    scores = router_scores(cfg, logits)                                        # [S, E]
    k = cfg.num_experts_per_tok
    idx = ordered_topk_indices(scores + W[p + "gate.bias"], k)                 # [S, k] (A1; bias_vl unused)
    wts = scores.gather(1, idx)                                                # [S, k]
    if cfg.norm_topk_prob and k > 1:
        wts = wts / (wts.sum(dim=-1, keepdim=True) + 1e-20)
    wts = wts * cfg.routed_scaling_factor
    acc = torch.zeros_like(x)                                                  # [S, D]
    for e in range(cfg.n_routed_experts):                                      # ascending expert order
        hit = idx == e                                                         # [S, k]
        tok = hit.any(dim=-1).nonzero(as_tuple=True)[0]                        # [n]
        if tok.numel() == 0:
            continue
        we = (wts * hit.to(wts.dtype)).sum(dim=-1)[tok]                        # [n]
        acc.index_add_(0, tok, expert_forward(cfg, W, f"{p}experts.{e}.", x[tok], we))
    return acc + expert_forward(cfg, W, p + "shared_experts.", x)


# ============================================================================================ model (§6, §7, §11)
def decoder_layer(cfg, W, layer, h, pre_mix, hash_ids, ctx, st, shared):
    """§6 single-pass layer: (streams [S, hc, D], previous site's pre [S, hc]) -> (streams, ffn_pre)."""
    p = f"layers.{layer}."
    eps = cfg.rms_norm_eps
    if layer in cfg.engram_layer_ids:
        h = engram_forward(cfg, W, layer, h, hash_ids[:, cfg.engram_layer_ids.index(layer), :])
    res = h
    attn_pre, attn_post, attn_comb = hc_mixes(cfg, h, W[p + "hc_attn_fn"], W[p + "hc_attn_scale"],
                                              W[p + "hc_attn_base"])
    a_in = hc_collapse(h, pre_mix)                                             # uses the PREVIOUS site's pre
    a = attention_forward(cfg, W, layer, rms_norm(a_in, W[p + "attn_norm.weight"], eps), ctx, st, shared)
    h = hc_expand(a, res, attn_post, attn_comb)
    res = h
    ffn_pre, ffn_post, ffn_comb = hc_mixes(cfg, h, W[p + "hc_ffn_fn"], W[p + "hc_ffn_scale"], W[p + "hc_ffn_base"])
    f_in = hc_collapse(h, attn_pre)
    f = moe_forward(cfg, W, layer, rms_norm(f_in, W[p + "ffn_norm.weight"], eps))
    h = hc_expand(f, res, ffn_post, ffn_comb)
    return h, ffn_pre


class LayerState:
    """§9 per layer: SWA ring (+ positions); at kv sources the group buffer, compressed KV, indexer keys, count."""

    def __init__(self, cfg, device, dtype):
        hd, ihd = cfg.head_dim, cfg.index_head_dim
        self.swa_k = torch.zeros((0, hd), dtype=dtype, device=device)
        self.swa_pos = torch.zeros((0,), dtype=torch.int64, device=device)
        self.buf_kv = torch.zeros((0, hd), dtype=dtype, device=device)
        self.buf_gate = torch.zeros((0, hd), dtype=dtype, device=device)
        self.comp_kv = torch.zeros((0, hd), dtype=dtype, device=device)
        self.idx_k = torch.zeros((0, ihd), dtype=dtype, device=device)
        self.entry_count = 0


class DecodeState:
    """§9 per-sequence state: token count, Engram history of compressed ids (DEAD = -1), per-layer states."""

    def __init__(self, cfg, device, dtype):
        self.n_tokens = 0
        self.history = torch.zeros((0,), dtype=torch.int64, device=device)
        self.layers = [LayerState(cfg, device, dtype) for _ in range(cfg.num_hidden_layers)]


def model_step(cfg, W, state, token_ids, qat=False, hf_numerics=False):
    """One call of the cache path (§11) on S new tokens (int64 [S]); mutates `state`; returns logits [S, vocab]."""
    emb = W["embed.weight"]
    dev, dt = emb.device, emb.dtype
    token_ids = token_ids.to(dev)
    S, hc = token_ids.shape[0], cfg.hc_mult
    pos = torch.arange(state.n_tokens, state.n_tokens + S, dtype=torch.int64, device=dev)   # absolute
    hash_ids = None
    if cfg.engram_layer_ids:
        codes = cfg._token_map.to(dev)[token_ids]                             # [S] compressed ids
        state.history = torch.cat([state.history, codes], dim=0)
        hash_ids = engram_hash_ids(cfg, state.history, pos)                   # [S, nL, n_ids]
    ctx = StepCtx(cfg, pos, qat, hf_numerics, dt)
    x = emb[token_ids]                                                         # [S, D]
    h = x[:, None, :].expand(S, hc, x.shape[1]).clone()                        # [S, hc, D]
    pre_mix = torch.zeros((S, hc), dtype=dt, device=dev)
    pre_mix[:, 0] = 1.0                                                        # one-hot: first collapse = embedding
    shared = {}                                                                # per-forward sharing (§3.8)
    for layer in range(cfg.num_hidden_layers):
        h, pre_mix = decoder_layer(cfg, W, layer, h, pre_mix, hash_ids, ctx, state.layers[layer], shared)
    final = rms_norm(hc_collapse(h, pre_mix), W["norm.weight"], cfg.rms_norm_eps)   # no learned hc_head
    state.n_tokens += S
    return final @ W["head.weight"].t()                                        # [S, vocab]


def forward(cfg, weights, token_ids, qat=False, hf_numerics=False):
    """Full-sequence logits [T, vocab] (cache-path semantics: one chunk from a fresh state)."""
    return model_step(cfg, weights, new_state(cfg, weights), torch.as_tensor(token_ids, dtype=torch.int64),
                      qat, hf_numerics)


def new_state(cfg, weights):
    emb = weights["embed.weight"]
    return DecodeState(cfg, emb.device, emb.dtype)


def decode_step(cfg, weights, state, token_id, qat=False, hf_numerics=False):
    """Incremental decode: one token -> its logits [vocab]; `state` (DecodeState) carries §9's cache."""
    ids = torch.tensor([int(token_id)], dtype=torch.int64)
    return model_step(cfg, weights, state, ids, qat, hf_numerics)[0]


def prefill(cfg, weights, state, token_ids, qat=False, hf_numerics=False):
    """Chunked prefill: any number of tokens into an existing state (equivalent to one-shot, §9)."""
    return model_step(cfg, weights, state, torch.as_tensor(token_ids, dtype=torch.int64), qat, hf_numerics)


# ============================================================================================ weights (§10)
def weight_specs(cfg):
    """(official name, shape, init kind) for every tensor of the backbone, in generation order."""
    D, H, hd, hc = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.hc_mult
    ql, G, r = cfg.q_lora_rank, cfg.o_groups, cfg.o_lora_rank
    nh, ihd, E, I = cfg.index_n_heads, cfg.index_head_dim, cfg.n_routed_experts, cfg.moe_intermediate_size
    nmix = (2 + hc) * hc
    specs = [("embed.weight", [cfg.vocab_size, D], "embed"), ("norm.weight", [D], "norm"),
             ("head.weight", [cfg.vocab_size, D], "linear")]
    for L in range(cfg.num_hidden_layers):
        p = f"layers.{L}."
        specs += [(p + "attn_norm.weight", [D], "norm"), (p + "ffn_norm.weight", [D], "norm")]
        for site in ("attn", "ffn"):
            specs += [(p + f"hc_{site}_fn", [nmix, hc * D], "linear"), (p + f"hc_{site}_base", [nmix], "small"),
                      (p + f"hc_{site}_scale", [3], "hc_scale")]
        a = p + "attn."
        specs += [(a + "wq_a.weight", [ql, D], "linear"), (a + "q_norm.weight", [ql], "norm"),
                  (a + "wq_b.weight", [H * hd, ql], "linear"), (a + "wkv.weight", [hd, D], "linear"),
                  (a + "kv_norm.weight", [hd], "norm"), (a + "wo_a.weight", [G * r, (H // G) * hd], "linear"),
                  (a + "wo_b.weight", [D, G * r], "linear"), (a + "attn_sink", [H], "sink")]
        is_kv, is_ix = L in cfg.kv_source_layer_ids, L in cfg.index_source_layer_ids
        if is_kv:
            specs += [(a + "compressor.wkv.weight", [hd, D], "linear"), (a + "compressor.norm.weight", [hd], "norm")]
            if cfg.compress_ratios[L] > 1:
                specs.append((a + "compressor.wgate.weight", [hd, D], "linear"))
        if is_ix:
            specs += [(a + "indexer.wq_b.weight", [nh * ihd, ql], "linear"),
                      (a + "indexer.weights_proj.weight", [nh, D], "linear")]
            if is_kv:
                specs += [(a + "indexer.wk.weight", [ihd, hd], "linear"), (a + "indexer.k_norm.weight", [ihd], "norm")]
        f = p + "ffn."
        specs += [(f + "gate.weight", [E, D], "linear"), (f + "gate.bias", [E], "small"),
                  (f + "gate.bias_vl", [E], "small")]
        for ex in [f"experts.{e}." for e in range(E)] + ["shared_experts."]:
            specs += [(f + ex + "w1.weight", [I, D], "linear"), (f + ex + "w3.weight", [I, D], "linear"),
                      (f + ex + "w2.weight", [D, I], "linear")]
        if L in cfg.engram_layer_ids:
            li = cfg.engram_layer_ids.index(L)
            n_ids = (cfg.engram_max_ngram_size - 1) * cfg.engram_n_heads
            g = p + "engram."
            specs += [(g + "embed.weight", [cfg.engram_num_embeddings[li], cfg.engram_head_dim], "embed"),
                      (g + "wkv.weight", [(hc + 1) * D, n_ids * cfg.engram_head_dim], "linear"),
                      (g + "q_weight", [hc, D], "norm"), (g + "k_weight", [hc, D], "norm")]
    return specs


def make_weights(cfg, seed=0):
    """Random fp32 weights by official name from one CPU generator (A11). Linear: N(0, 1/fan_in); norm: 1+0.1N."""
    g = torch.Generator().manual_seed(int(seed))
    W = {}
    for name, shape, kind in weight_specs(cfg):
        z = torch.randn(shape, generator=g, dtype=torch.float32)
        if kind == "linear":
            W[name] = z / math.sqrt(shape[-1])
        elif kind == "norm":
            W[name] = 1.0 + 0.1 * z
        elif kind == "small":
            W[name] = 0.1 * z
        elif kind == "hc_scale":
            W[name] = 0.5 + 0.25 * z.abs()
        else:   # embed, sink
            W[name] = z
    return W


def weights_to(W, device, dtype=torch.float32):
    return {k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device)) for k, v in W.items()}


# ============================================================================================ safetensors
_ST_DTYPES = {torch.float32: ("F32", "f", 4), torch.float64: ("F64", "d", 8), torch.int64: ("I64", "q", 8),
              torch.int32: ("I32", "i", 4), torch.uint8: ("U8", "B", 1)}


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    try:   # numpy is only a faster path; safetensors is little-endian, as is every host this runs on
        import numpy  # noqa: F401
        assert sys.byteorder == "little"
        return t.numpy().tobytes()
    except ImportError:
        fmt = _ST_DTYPES[t.dtype][1]
        return struct.pack("<%d%s" % (t.numel(), fmt), *t.flatten().tolist())


def save_safetensors(path, tensors, metadata=None):
    """Minimal writer: u64 LE header length, JSON {name: {dtype, shape, data_offsets}}, then raw LE bytes."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in _ST_DTYPES:
            t = t.to(torch.float32)
        b = _tensor_bytes(t)
        header[name] = {"dtype": _ST_DTYPES[t.dtype][0], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)                                       # align the data to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """Minimal reader (F32/F64/F16/BF16/I64/I32/U8; little-endian host)."""
    dts = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
           "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n).decode("utf-8"))
        data = bytearray(f.read())
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in dts:
            raise NotImplementedError(f"{name}: dtype {info['dtype']} not supported here (A10)")
        a, b = info["data_offsets"]
        dt = dts[info["dtype"]]
        t = torch.frombuffer(data, dtype=dt, count=(b - a) // torch.tensor([], dtype=dt).element_size(), offset=a)
        out[name] = t.clone().reshape(info["shape"])
    return out


def dump_weights(cfg, W, directory):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg.to_json_dict(), f, indent=1)
    save_safetensors(os.path.join(directory, "model.safetensors"), W, {"format": "pt", "source": "v41_reference"})


# ============================================================================================ self-test + CLI
def _max_abs(a, b):
    return (a.double() - b.double()).abs().max().item()


def self_test(cfg_seed, wseed, device):
    ok_all = []

    def report(name, ok, detail):
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
        ok_all.append(bool(ok))

    cfg = small_config(cfg_seed)
    W = weights_to(make_weights(cfg, wseed), device)
    T = 160
    toks = torch.randint(0, cfg.vocab_size, (T,), generator=torch.Generator().manual_seed(1234 + wseed))
    st_full = new_state(cfg, W)
    full = model_step(cfg, W, st_full, toks)                                   # [T, vocab]
    # structure actually exercised at this length (window, compression, top-k truncation, candidate pool)
    t2, t1 = st_full.layers[2].comp_kv.shape[0], st_full.layers[4].comp_kv.shape[0]
    pool = cfg.candidate_topk_blocks * cfg.candidate_block_size
    report("structure", t2 == T // 2 and t1 == T and t2 > cfg.index_topk and pool < t1 and cfg.sliding_window < T,
           f"ratio-2 entries {t2}, ratio-1 entries {t1}, topk {cfg.index_topk}, pool {pool}, "
           f"window {cfg.sliding_window}, finite {bool(torch.isfinite(full).all())}")
    # (a) prefix consistency
    worst = max(_max_abs(forward(cfg, W, toks[:t]), full[:t]) for t in (1, 2, 37, 100))
    report("(a) prefix consistency", worst <= 1e-4, f"max abs {worst:.3e} over prefixes 1,2,37,100 of {T}")
    # (b) incremental decode == full forward
    st = new_state(cfg, W)
    inc = torch.stack([decode_step(cfg, W, st, int(t)) for t in toks])        # [T, vocab]
    d = _max_abs(inc, full)
    report("(b) incremental decode", d <= 1e-4, f"max abs {d:.3e} over {T} tokens (scale {full.abs().max():.2f})")
    st = new_state(cfg, W)
    parts, i = [], 0
    for n in (5, 1, 17, 2, 40, 1):                                             # chunked prefill, odd splits
        parts.append(prefill(cfg, W, st, toks[i:i + n]))
        i += n
    parts.append(prefill(cfg, W, st, toks[i:]))
    d = _max_abs(torch.cat(parts), full)
    report("(b) chunked prefill", d <= 1e-4, f"max abs {d:.3e}")
    # (c) determinism
    report("(c) determinism", torch.equal(forward(cfg, W, toks), full), "bitwise equal on a second run")
    # QAT + hf_numerics: incremental == full, in float64 so that no rounding boundary flips between the two paths
    W64 = weights_to(W, device, torch.float64)
    fq = forward(cfg, W64, toks, qat=True, hf_numerics=True)
    st = new_state(cfg, W64)
    iq = torch.stack([decode_step(cfg, W64, st, int(t), qat=True, hf_numerics=True) for t in toks])
    d, dq = _max_abs(iq, fq), _max_abs(fq, full)
    report("(b) incremental decode, qat+hf_numerics (fp64)", d <= 1e-6 and dq > 1e-3,
           f"max abs {d:.3e}; differs from plain by {dq:.3e}")
    # fake-quant spot checks (§3.9)
    x = torch.tensor([[0.24, 0.26, 0.75, 1.25, 1.26, 1.75, 2.5, 2.6, 3.5, 5.0, 5.1, -0.75, -6.0, 0.0, 4.9, 6.0]],
                     dtype=torch.float64)
    want = [0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 3.0, 4.0, 4.0, 6.0, -1.0, -6.0, 0.0, 4.0, 6.0]
    got = e2m1_round(x.to(torch.float32))[0].tolist()
    e4 = round_e4m3(torch.tensor([1.0625, 1.1875, 300.0, 460.0, 2.0 ** -10, 0.01]))
    report("qat rounding", got == want and e4.tolist() == [1.0, 1.25, 288.0, 448.0, 0.0, 0.009765625],
           f"e2m1 {got}, e4m3 {e4.tolist()}")
    # rope sanity against §1.3 (release config)
    rel = V41Config(rope_scaling={"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                                  "original_max_position_embeddings": 65536})
    at = [0, 1, 15, 16, 20, 24, 25, 31]
    ref = {"compress": [1.0, 6.876560e-1, 3.635539e-3, 2.265625e-3, 2.969778e-4, 1.953125e-5, 5.372313e-6,
                        5.680529e-7],
           "main": [1.0, 7.498942e-1, 1.333521e-2, 1.0e-2, 3.162278e-3, 1.0e-3, 7.498942e-4, 1.333521e-4]}
    worst = max(abs(rel._rope[k][0][i].item() / v - 1) for k in ref for i, v in zip(at, ref[k]))
    report("rope inv_freq vs sheet", worst < 2e-6, f"max rel {worst:.2e}")
    primes, offsets = find_engram_primes(2, 3, 8, 16000000)
    sums = [sum(sum(g) for g in layer) for layer in primes]
    report("engram primes vs sheet", sums == [384006168, 384016682] and offsets[1][23] == 368015793, f"sums {sums}")
    # safetensors round trip + config reload
    with tempfile.TemporaryDirectory() as tmp:
        dump_weights(cfg, make_weights(cfg, wseed), tmp)
        W2 = load_safetensors(os.path.join(tmp, "model.safetensors"))
        cfg2 = config_from_json(os.path.join(tmp, "config.json"))
        same = set(W2) == set(W) and all(torch.equal(W2[k], W[k].cpu()) for k in W)
        d = _max_abs(forward(cfg2, weights_to(W2, device), toks[:40]), forward(cfg, W, toks[:40]))
        report("safetensors round trip", same and d == 0.0, f"{len(W2)} tensors, reloaded-config logits diff {d}")
    n_fail = ok_all.count(False)
    print(f"self-test: {len(ok_all) - n_fail}/{len(ok_all)} passed")
    return 0 if n_fail == 0 else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description="DeepSeek-V4.1-Flash text reference forward (PyTorch)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--config", help="config JSON (text config or {'text_config': ...})")
    src.add_argument("--small", type=int, metavar="SEED", help="small_config(SEED)")
    ap.add_argument("--weights-seed", type=int, default=0)
    ap.add_argument("--weights", help="model.safetensors (or its directory) instead of random weights")
    tk = ap.add_mutually_exclusive_group()
    tk.add_argument("--tokens", help="comma-separated token ids")
    tk.add_argument("--random-tokens", type=int, metavar="N")
    ap.add_argument("--token-seed", type=int, default=0)
    ap.add_argument("--out", help="result JSON")
    ap.add_argument("--dump-weights", metavar="DIR", help="write config.json + model.safetensors")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--qat", action="store_true", help="fake-quant of §3.9 (default off)")
    ap.add_argument("--hf-numerics", action="store_true", help="bf16-rounded cos/sin as in HF")
    ap.add_argument("--decode", action="store_true", help="produce the logits by incremental decode_step calls")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test(args.small if args.small is not None else 1, args.weights_seed, args.device)
    cfg = config_from_json(args.config) if args.config else small_config(args.small or 0)
    if args.weights:
        path = args.weights
        if os.path.isdir(path):
            path = os.path.join(path, "model.safetensors")
        W = load_safetensors(path)
    else:
        W = make_weights(cfg, args.weights_seed)
    if args.dump_weights:
        dump_weights(cfg, W, args.dump_weights)
        print(f"wrote {args.dump_weights}/config.json and model.safetensors ({len(W)} tensors)")
    if args.tokens:
        toks = [int(t) for t in args.tokens.split(",") if t.strip()]
    elif args.random_tokens:
        g = torch.Generator().manual_seed(args.token_seed)
        toks = torch.randint(0, cfg.vocab_size, (args.random_tokens,), generator=g).tolist()
    else:
        return 0
    W = weights_to(W, args.device)
    with torch.no_grad():
        if args.decode:
            st = new_state(cfg, W)
            logits = torch.stack([decode_step(cfg, W, st, t, args.qat, args.hf_numerics) for t in toks])
        else:
            logits = forward(cfg, W, toks, args.qat, args.hf_numerics)
    logits = logits.float().cpu()
    print(f"tokens {len(toks)}, logits {list(logits.shape)}, argmax of last row {int(logits[-1].argmax())}")
    if args.out:
        res = {"source": "v41_reference", "tokens": toks, "logits": logits.tolist(), "config": cfg.to_json_dict(),
               "flags": {"qat": args.qat, "hf_numerics": args.hf_numerics, "decode": args.decode,
                         "device": args.device, "dtype": "float32",
                         "weights": args.weights or f"random seed {args.weights_seed}"}}
        with open(args.out, "w") as f:
            json.dump(res, f)
    return 0


if __name__ == "__main__":
    with torch.no_grad():
        sys.exit(main())
