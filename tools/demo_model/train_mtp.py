#!/usr/bin/env python3
"""Train an MTP draft layer (docs/mtp.md) for the committed demo model, export it for Strata, and verify the export.

Runs on the GPU machine (torch, transformers with DeepseekV4ForCausalLM, tokenizers, safetensors; no network);
run_mtp_on_gpu.sh is the one command that calls it (docs/demo_model.md, "The MTP head").

The main model (models/demo) is frozen: it is rebuilt from its exported tensors by export.model_from_official (the
FP8 embedding as codes x scales, every other tensor as stored: what Strata computes). transformers has no MTP
module, so the layer is written here in plain PyTorch, DeepSeek-V4's MTPBlock as docs/mtp.md gives it:

    e = enorm(embed(t[p+1]))                       # the shared (FP8) embedding, frozen
    h = hnorm(streams[p])                          # each of the hc_mult residual streams of the main model's
                                                   # last layer, before its HyperHead (a forward hook on hc_head)
    x = e_proj(e) (added to every stream) + h_proj(h)
    x = mHC(attention, window-only)(x); x = mHC(MoE, top-k of score + bias, no hash)(x)
    logits = embed^T · norm(HyperHead_mtp(x))      # the layer's own hc_head_* and norm, the shared head

Row p drafts token p + 2. The decoder layer starts as a copy of the main model's layers: attention, mHC sites and
norms from the last window-only layer (layer 0 of the demo schedule), the MoE from the last top-k MoE layer
(layer 0's MoE is hash-routed; the MTP layer routes by score), the HyperHead and final norm from the main
model's; e_proj = h_proj = identity, enorm = hnorm = 1. Training: cross entropy of token p + 2 on every row whose
target is a completion token (the tokens the model generates), the corpus of train.py (corpus.py, with the
committed model's training-split options), AdamW, bf16 autocast, a wall-clock budget; the router's correction
bias is balanced as train.py does. --distill W mixes in W x KL(main model's distribution for p + 2 || MTP).

Reported (the JSON report, --out/mtp_report.json), on the export-exact layer (matrices rounded to BF16 as stored),
fp32 with TF32 off:
  * greedy acceptance: on the main model's own greedy completions of heldout_eval.jsonl (the CI set), the fraction
    of draft positions (rows p = prompt_len - 1 ... len - 3: after the main model produced token p + 1, the MTP
    drafts p + 2) where the MTP argmax equals the main model's next greedy token: what greedy speculative decoding
    with one draft token accepts. Overall and per kind;
  * teacher-forced on heldout.jsonl (2,000 held-out lines, every mode): agreement of the MTP argmax at row p with
    the main model's argmax for p + 2 (its row p + 1), MTP top-1 accuracy against the data, the main model's own
    top-1 for comparison, and the MTP loss.

Export (--out/model_update/): mtp.safetensors (the mtp.0.* tensors, official names, matrices BF16 and norms / mHC /
sink / gate bias F32 like the main model's), model.safetensors.index.json (every tensor -> its file, so Strata's
loader reads both files; the main model.safetensors stays byte-identical), and config.json (models/demo's with
num_nextn_predict_layers 1). Copy the three into models/demo/.

Verification (--out/mtp_verify.json): the update is assembled with models/demo's files into a checkpoint folder
and read back through tests/gpu/mtp_reference.py (an independent torch implementation of the MTP formula reading
safetensors by official name, through the index): its main HyperHead on the hooked streams must give the main
model's logits, and its MTP logits the training module's, within fp32 tolerance, on held-out sequences that also
cross the 128-token window; the exported tensors must equal the module's values bit for bit.
--out/mtp_strata_check.json holds token sequences and the expected draft logits (argmax, top ids, logits at
fixed ids) for `check_strata.py mtp` to compare with `strata model mtp-logits` on the CPU machine.
"""
import argparse
import hashlib
import importlib.util
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import model_config as mc  # noqa: E402
import render  # noqa: E402
import train as T  # noqa: E402  (load_data, make_batches, Phase, log, INIT_CONFIG_KEYS)
from export import model_from_official  # noqa: E402
from greedy_eval import PAD_ID, greedy, set_exact  # noqa: E402

log = T.log
Phase = T.Phase
MTP_PREFIX = "mtp.0."


# ----------------------------------------------------------------------------------------------------------
# The frozen main model
# ----------------------------------------------------------------------------------------------------------


def load_main(model_dir, device):
    """models/demo rebuilt exactly (fp32, FP8 embedding dequantized), frozen, with a hook that keeps the last
    layer's hc_mult streams as they enter the HyperHead."""
    from safetensors.torch import load_file
    from transformers import DeepseekV4Config

    with open(os.path.join(model_dir, "config.json")) as f:
        saved = json.load(f)
    if saved.get("num_nextn_predict_layers", 0) != 0:
        sys.exit(f"{model_dir}/config.json already has num_nextn_predict_layers "
                 f"{saved['num_nextn_predict_layers']}; train_mtp.py starts from the main model alone")
    cfg = mc.demo_config(saved["hidden_size"], saved["num_hidden_layers"], saved["moe_intermediate_size"],
                         saved["n_routed_experts"], hash_layers=saved["mlp_layer_types"].count("hash_moe"))
    differ = {k: (saved.get(k), cfg[k]) for k in T.INIT_CONFIG_KEYS if saved.get(k) != cfg[k]}
    if differ:
        sys.exit(f"{model_dir}/config.json differs from the demo shape (saved, rebuilt): {differ}")
    config = DeepseekV4Config(**cfg)
    config._attn_implementation = "eager"
    official = load_file(os.path.join(model_dir, "model.safetensors"))
    model = model_from_official(official, config, cfg, device)
    for p in model.parameters():
        p.requires_grad_(False)
    return saved, cfg, official, MainModel(model)


class MainModel:
    def __init__(self, model):
        self.model = model
        self._streams = None
        model.model.hc_head.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self._streams = args[0]

    @property
    def head(self):
        return self.model.lm_head.weight  # tied: the dequantized FP8 embedding

    @torch.no_grad()
    def __call__(self, ids):
        """(streams [B, S, hc, d] before the HyperHead, final normed hidden [B, S, d])."""
        self._streams = None
        hidden = self.model.model(input_ids=ids, use_cache=False).last_hidden_state
        streams, self._streams = self._streams, None
        if streams is None or streams.dim() != 4:
            raise RuntimeError("the hc_head hook did not see the last layer's [B, S, hc, d] streams")
        return streams.float(), hidden


# ----------------------------------------------------------------------------------------------------------
# The MTP layer
# ----------------------------------------------------------------------------------------------------------


def rms_norm(x, weight, eps):
    x = x.float()
    y = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    return y * weight if weight is not None else y


def rope(x, cos, sin):
    """DeepSeek's interleaved RoPE on the trailing 2 * cos.shape[-1] channels of x [B, S, H, hd]; cos/sin [S, rd/2]."""
    rd = 2 * cos.shape[-1]
    nope, r = x[..., :-rd], x[..., -rd:].float().unflatten(-1, (-1, 2))
    a, b = r[..., 0], r[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)
    return torch.cat([nope, out.to(x.dtype)], dim=-1)


class MtpLayer(nn.Module):
    """DeepSeek-V4's MTPBlock over the main model's last-layer streams. Parameters hold the official tensors of
    mc.mtp_tensors under their names (dots as "__"), except the routed experts, stacked as w1/w2/w3 [E, ...] and
    sliced on export; ffn.gate.bias is a buffer moved by load balancing, not by gradients."""

    def __init__(self, c, init, embed):
        super().__init__()
        self.c = c
        self.d, self.hc = c["hidden_size"], c["hc_mult"]
        self.heads, self.hd = c["num_attention_heads"], c["head_dim"]
        self.eps, self.hc_eps = c.get("rms_norm_eps", 1e-6), c.get("hc_eps", 1e-6)
        self.iters = c.get("hc_sinkhorn_iters", 20)
        self.window = c["sliding_window"]
        self.experts, self.top_k = c["n_routed_experts"], c["num_experts_per_tok"]
        self.scale_routed = c.get("routed_scaling_factor", 1.5)
        self.limit = c.get("swiglu_limit", 10.0)
        self.scoring = c.get("scoring_func", "sqrtsoftplus")
        main_rope = (c.get("rope_parameters") or {}).get("main", {})
        if main_rope.get("rope_type", "default") != "default":
            raise ValueError("the window layers' RoPE must be the default one (docs/mtp.md)")
        self.theta = main_rope.get("rope_theta", c.get("rope_theta", 10000.0))
        self.rd = int(self.hd * main_rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)))
        self.embed = embed  # [V, d], frozen, shared with the main model (not a parameter of this layer)
        self.tensors = mc.mtp_tensors(c)
        inter = c["moe_intermediate_size"]
        stack = {w: [] for w in ("w1", "w2", "w3")}
        for name, shape, kind in self.tensors:
            short = name[len(MTP_PREFIX):]
            t = init[short].detach().float().clone()
            if list(t.shape) != shape:
                raise ValueError(f"init {short}: shape {list(t.shape)}, expected {shape}")
            if short.startswith("ffn.experts."):
                stack[short.split(".")[3]].append(t)
            elif short == "ffn.gate.bias":
                self.register_buffer("gate_bias", t)
            else:
                self.register_parameter(short.replace(".", "__"), nn.Parameter(t))
        for w, ts in stack.items():
            assert len(ts) == self.experts
            self.register_parameter("experts_" + w, nn.Parameter(torch.stack(ts)))
        assert self.experts_w1.shape == (self.experts, inter, self.d)
        self.loads = None  # expert counts for balancing, when not None

    def t(self, short):
        if short == "ffn.gate.bias":
            return self.gate_bias
        return getattr(self, short.replace(".", "__"))

    def official(self):
        """{official name: tensor} in the stored dtypes (matrices BF16, everything else F32), on the CPU."""
        out = {}
        for name, shape, kind in self.tensors:
            short = name[len(MTP_PREFIX):]
            if short.startswith("ffn.experts."):
                _, _, e, w, _ = short.split(".")
                t = getattr(self, "experts_" + w)[int(e)]
            else:
                t = self.t(short)
            t = t.detach()
            out[name] = (t.to(torch.bfloat16) if kind == "matrix" else t.float()).contiguous().cpu()
            assert list(out[name].shape) == shape, name
        return out

    @torch.no_grad()
    def round_to_export(self):
        """Round the matrices to BF16 in place: the layer then computes exactly what the export holds."""
        for name, _, kind in self.tensors:
            if kind != "matrix":
                continue
            short = name[len(MTP_PREFIX):]
            if short.startswith("ffn.experts."):
                continue
            p = self.t(short)
            p.copy_(p.to(torch.bfloat16).float())
        for w in ("w1", "w2", "w3"):
            p = getattr(self, "experts_" + w)
            p.copy_(p.to(torch.bfloat16).float())

    # mHC -------------------------------------------------------------------------------------------------
    def hc_pre(self, x, site):
        """Collapse the streams (pre weights) and give post [.., hc] and comb [.., hc, hc] (Sinkhorn), in fp32."""
        hc = self.hc
        fn, base, scale = self.t(f"hc_{site}_fn"), self.t(f"hc_{site}_base"), self.t(f"hc_{site}_scale")
        with torch.autocast("cuda", enabled=False):
            x = x.float()
            flat = rms_norm(x.flatten(-2), None, self.eps)
            mixes = F.linear(flat, fn.float())
            pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + self.hc_eps
            post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
            comb = (mixes[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
            comb = comb.softmax(-1) + self.hc_eps
            comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
            for _ in range(self.iters - 1):
                comb = comb / (comb.sum(-1, keepdim=True) + self.hc_eps)
                comb = comb / (comb.sum(-2, keepdim=True) + self.hc_eps)
            collapsed = (pre.unsqueeze(-1) * x).sum(-2)
        return collapsed, post, comb

    @staticmethod
    def hc_post(out, x, post, comb):
        # new stream k = post[k] * out + sum_j comb[j, k] * stream j
        return post.unsqueeze(-1) * out.float().unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), x.float())

    def hyper_head(self, x):
        with torch.autocast("cuda", enabled=False):
            x = x.float()
            flat = rms_norm(x.flatten(-2), None, self.eps)
            mixes = F.linear(flat, self.t("hc_head_fn").float())
            pre = torch.sigmoid(mixes * self.t("hc_head_scale") + self.t("hc_head_base")) + self.hc_eps
            return (pre.unsqueeze(-1) * x).sum(-2)

    # attention -------------------------------------------------------------------------------------------
    def attention(self, x):
        """Window-only shared-KV MQA with sinks over positions 0 .. S-1 of each (right-padded) row."""
        B, S, _ = x.shape
        H, hd, G, R = self.heads, self.hd, self.c["o_groups"], self.c["o_lora_rank"]
        pos = torch.arange(S, device=x.device, dtype=torch.float32)
        inv = 1.0 / (self.theta ** (torch.arange(0, self.rd, 2, dtype=torch.float32, device=x.device) / self.rd))
        angle = pos[:, None] * inv[None, :]
        cos, sin = angle.cos(), angle.sin()
        qr = rms_norm(F.linear(x, self.t("attn.wq_a.weight")), self.t("attn.q_norm.weight"), self.eps)
        q = F.linear(qr, self.t("attn.wq_b.weight")).view(B, S, H, hd)
        q = rope(rms_norm(q, None, self.eps), cos, sin)
        kv = rms_norm(F.linear(x, self.t("attn.wkv.weight")), self.t("attn.kv_norm.weight"), self.eps)
        kv = rope(kv.unsqueeze(2), cos, sin).squeeze(2)  # [B, S, hd], K = V
        scores = torch.einsum("bshd,btd->bhst", q, kv).float() * hd ** -0.5
        i = torch.arange(S, device=x.device)
        visible = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.window)
        scores = scores.masked_fill(~visible, float("-inf"))
        sink = self.t("attn.attn_sink").float().view(1, H, 1, 1).expand(B, H, S, 1)
        probs = torch.cat([scores, sink], dim=-1).softmax(-1)[..., :S]  # the sink takes mass, gives no value
        o = torch.einsum("bhst,btd->bshd", probs.to(kv.dtype), kv)
        o = rope(o, cos, -sin)  # undo the rotation V picked up (K = V)
        wo_a = self.t("attn.wo_a.weight").view(G, R, H * hd // G)
        low = torch.einsum("bsgk,grk->bsgr", o.reshape(B, S, G, H * hd // G).to(wo_a.dtype), wo_a)
        return F.linear(low.flatten(-2), self.t("attn.wo_b.weight"))

    # MoE -------------------------------------------------------------------------------------------------
    def expert(self, x, w1, w2, w3):
        gate = F.linear(x, w1).float().clamp(max=self.limit)
        up = F.linear(x, w3).float().clamp(-self.limit, self.limit)
        return F.linear((F.silu(gate) * up).to(x.dtype), w2).float()

    def moe(self, x, valid=None):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        logits = F.linear(flat, self.t("ffn.gate.weight")).float()
        if self.scoring == "sqrtsoftplus":
            scores = F.softplus(logits).sqrt()
        elif self.scoring == "sigmoid":
            scores = torch.sigmoid(logits)
        else:
            scores = logits.softmax(-1)
        idx = (scores + self.gate_bias).topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, idx)
        if self.scoring != "softmax":
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        weights = weights * self.scale_routed
        if self.loads is not None:
            chosen = idx if valid is None else idx[valid.reshape(-1)]
            self.loads += torch.bincount(chosen.reshape(-1), minlength=self.experts).float()
        y = torch.zeros(flat.shape, dtype=torch.float32, device=flat.device)
        for e in range(self.experts):
            rows, slot = torch.where(idx == e)
            if rows.numel() == 0:
                continue
            out = self.expert(flat[rows], self.experts_w1[e], self.experts_w2[e], self.experts_w3[e])
            y = y.index_add(0, rows, out * weights[rows, slot, None])
        if self.c.get("n_shared_experts", 1) > 0:
            y = y + self.expert(flat, self.t("ffn.shared_experts.w1.weight"), self.t("ffn.shared_experts.w2.weight"),
                                self.t("ffn.shared_experts.w3.weight"))
        return y.view(shape)

    @torch.no_grad()
    def balance(self, gamma):
        """DeepSeek's auxiliary-loss-free balancing of the correction bias (as train.RouterBalancer)."""
        if self.loads is None or self.loads.sum() == 0:
            return 1.0
        load = self.loads / self.loads.sum()
        self.gate_bias += gamma * torch.sign(load.mean() - load)
        self.loads.zero_()
        return float(load.max() / load.mean())

    # the block -------------------------------------------------------------------------------------------
    def forward(self, streams, next_ids, valid=None):
        """streams [B, S, hc, d] (main model, positions 0 .. S-1), next_ids [B, S] (tokens 1 .. S) -> the MTP
        layer's output streams [B, S, hc, d] (before its HyperHead)."""
        e = rms_norm(self.embed[next_ids], self.t("enorm.weight"), self.eps)
        h = rms_norm(streams, self.t("hnorm.weight"), self.eps)
        x = F.linear(e, self.t("e_proj.weight")).float().unsqueeze(-2) + F.linear(h, self.t("h_proj.weight")).float()
        y, post, comb = self.hc_pre(x, "attn")
        x = self.hc_post(self.attention(rms_norm(y, self.t("attn_norm.weight"), self.eps)), x, post, comb)
        y, post, comb = self.hc_pre(x, "ffn")
        x = self.hc_post(self.moe(rms_norm(y, self.t("ffn_norm.weight"), self.eps), valid), x, post, comb)
        return x

    def logits(self, out_streams):
        """[N, hc, d] output streams -> [N, V] draft logits (own HyperHead and norm, the shared head)."""
        y = rms_norm(self.hyper_head(out_streams), self.t("norm.weight"), self.eps)
        return F.linear(y, self.embed)


def initial_tensors(official, c, attn_layer, moe_layer):
    """{short name: tensor} to start the MTP layer from (see the module docstring)."""
    d = c["hidden_size"]
    init = {}
    for name, shape, kind in mc.mtp_tensors(c):
        short = name[len(MTP_PREFIX):]
        if short in ("e_proj.weight", "h_proj.weight"):
            init[short] = torch.eye(d)
        elif short in ("enorm.weight", "hnorm.weight"):
            init[short] = torch.ones(d)
        elif short == "norm.weight" or short.startswith("hc_head_"):
            init[short] = official[short].float()
        elif short.startswith("ffn."):
            src = f"layers.{moe_layer}.{short}"
            init[short] = official[src].float() if src in official else torch.zeros(shape)  # gate.bias of a hash layer
        else:
            init[short] = official[f"layers.{attn_layer}.{short}"].float()
    return init


# ----------------------------------------------------------------------------------------------------------
# Data and the MTP objective
# ----------------------------------------------------------------------------------------------------------


def seq_of(line):
    return line["ids"]["prompt"] + line["ids"]["completion"]


def collate(seqs, prompt_lens, device, first_offset=-2):
    """Right-padded ids and the MTP rows: row p (main streams at p, token p + 1) drafts token p + 2, for every p
    with prompt_len + first_offset <= p <= len - 3. first_offset -2 covers every completion token as a target;
    -1 only the drafts a decoder makes (after the main model produced token p + 1 of the completion)."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    valid = torch.zeros((len(seqs), width - 1), dtype=torch.bool)
    rows, cols, owner = [], [], []
    for b, (s, p) in enumerate(zip(seqs, prompt_lens)):
        ids[b, : len(s)] = torch.tensor(s)
        valid[b, : len(s) - 1] = True
        for q in range(max(0, p + first_offset), len(s) - 2):
            rows.append(b)
            cols.append(q)
    t = lambda x: torch.tensor(x, dtype=torch.long, device=device)  # noqa: E731
    rows, cols = t(rows), t(cols)
    ids = ids.to(device)
    return ids, valid.to(device), rows, cols, ids[rows, cols + 2]


def mtp_step(main, mtp, seqs, prompt_lens, device, autocast, first_offset=-2):
    """Main model (frozen) then the MTP layer: (mtp logits [N, V], targets [N], main logits for p + 2 [N, V])."""
    ids, valid, rows, cols, targets = collate(seqs, prompt_lens, device, first_offset)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        streams, hidden = main(ids)
        with torch.no_grad():
            main_logits = F.linear(hidden[rows, cols + 1], main.head).float()
        out = mtp(streams[:, :-1], ids[:, 1:], valid)
        logits = mtp.logits(out[rows, cols]).float()
    return logits, targets, main_logits, rows, cols


def distill_loss(logits, main_logits):
    return F.kl_div(logits.log_softmax(-1), main_logits.log_softmax(-1), log_target=True, reduction="batchmean")


@torch.no_grad()
def teacher_forced_eval(main, mtp, lines, device, autocast, batch=96):
    """Agreement with the main model's argmax for p + 2, top-1 vs the data, the main model's top-1, MTP loss;
    over all completion targets and over the decoder's draft rows only."""
    mtp.eval()
    acc = {k: [0, 0, 0, 0] for k in ("all", "draft_rows")}  # agree, mtp correct, main correct, rows
    loss_sum, loss_n = 0.0, 0
    for i in range(0, len(lines), batch):
        chunk = lines[i:i + batch]
        seqs, plens = [seq_of(l) for l in chunk], [len(l["ids"]["prompt"]) for l in chunk]
        logits, targets, main_logits, rows, cols = mtp_step(main, mtp, seqs, plens, device, autocast)
        loss_sum += float(F.cross_entropy(logits, targets, reduction="sum"))
        loss_n += int(targets.numel())
        a, m = logits.argmax(-1), main_logits.argmax(-1)
        plen = torch.tensor(plens, device=device)[rows]
        for key, sel in (("all", torch.ones_like(targets, dtype=torch.bool)), ("draft_rows", cols >= plen - 1)):
            acc[key][0] += int((a == m)[sel].sum())
            acc[key][1] += int((a == targets)[sel].sum())
            acc[key][2] += int((m == targets)[sel].sum())
            acc[key][3] += int(sel.sum())
    mtp.train()
    out = {"lines": len(lines), "mtp_loss": round(loss_sum / max(loss_n, 1), 5)}
    for key, (agree, correct, main_correct, n) in acc.items():
        out[key] = {"rows": n, "acceptance_vs_main_argmax": round(agree / max(n, 1), 5),
                    "mtp_top1_vs_data": round(correct / max(n, 1), 5),
                    "main_top1_vs_data": round(main_correct / max(n, 1), 5)}
    return out


@torch.no_grad()
def greedy_acceptance(main, mtp, eval_lines, device):
    """On the main model's own greedy completions: does the MTP draft (row p, p >= prompt_len - 1) equal the
    main model's greedy token p + 2? Returns (summary, the greedy sequences)."""
    prompts = [l["ids"]["prompt"] for l in eval_lines]
    max_new = [int(l["request"].get("max_tokens", 64)) for l in eval_lines]
    completions = greedy(main.model, prompts, max_new)
    seqs = [p + c for p, c in zip(prompts, completions)]
    per_kind, total = {}, [0, 0, 0]  # agree, rows, main consistency
    mtp.eval()
    for i in range(0, len(seqs), 64):
        chunk = list(range(i, min(i + 64, len(seqs))))
        logits, targets, main_logits, rows, cols = mtp_step(
            main, mtp, [seqs[j] for j in chunk], [len(prompts[j]) for j in chunk], device, False, first_offset=-1)
        agree = (logits.argmax(-1) == targets).tolist()
        consistent = (main_logits.argmax(-1) == targets).tolist()
        for r, a, c in zip(rows.tolist(), agree, consistent):
            k = per_kind.setdefault(eval_lines[chunk[r]]["kind"], [0, 0])
            k[0] += a
            k[1] += 1
            total[0] += a
            total[1] += 1
            total[2] += c
    mtp.train()
    acc = total[0] / max(total[1], 1)
    summary = {"lines": len(eval_lines), "draft_rows": total[1], "accepted": total[0],
               "acceptance": round(acc, 5),
               "tokens_per_main_step_with_one_draft": round(1 + acc, 4),
               "main_teacher_forced_equals_its_greedy": round(total[2] / max(total[1], 1), 5),
               "by_kind": {k: {"rows": n, "acceptance": round(a / max(n, 1), 5)} for k, (a, n) in per_kind.items()}}
    return summary, seqs


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------


def lr_at(step, progress, args):
    warm = min(1.0, (step + 1) / args.warmup_steps)
    return args.lr * warm * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def train(main, mtp, data, args, device, budget_s, log_file):
    rng = random.Random(args.seed)
    lines = data["train"]
    examples = [(len(seq_of(l)),) for l in lines]
    params = [p for p in mtp.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.98), eps=1e-8, weight_decay=args.weight_decay)
    held_sample = rng.sample(data["heldout"], min(args.eval_sample, len(data["heldout"])))
    history, batches, step, ema = [], [], 0, None
    rec = teacher_forced_eval(main, mtp, held_sample, device, True)
    rec.update(eval_step=0, time_s=0.0)
    history.append(rec)
    log_file.write(json.dumps(rec) + "\n")
    log(f"eval @ step 0 (initialisation): loss {rec['mtp_loss']:.4f}  acceptance {rec['draft_rows']['acceptance_vs_main_argmax']:.4f}")
    start = time.time()
    next_eval = args.eval_every_s
    mtp.train()
    mtp.loads = torch.zeros(mtp.experts, device=device)
    while True:
        elapsed = time.time() - start
        if elapsed >= budget_s:
            break
        if not batches:
            batches = T.make_batches(examples, rng, args.token_budget, args.max_batch)
        batch = [lines[i] for i in batches.pop()]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, elapsed / budget_s, args)
        seqs, plens = [seq_of(l) for l in batch], [len(l["ids"]["prompt"]) for l in batch]
        logits, targets, main_logits, _, _ = mtp_step(main, mtp, seqs, plens, device, True)
        loss = F.cross_entropy(logits, targets)
        if args.distill > 0:
            loss = (1 - args.distill) * loss + args.distill * distill_loss(logits, main_logits)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, args.clip))
        opt.step()
        imbalance = mtp.balance(args.bias_update)
        value = float(loss.detach())
        if not math.isfinite(value):
            raise RuntimeError(f"loss is {value} at step {step}")
        ema = value if ema is None else 0.98 * ema + 0.02 * value
        step += 1
        if step % args.log_every == 0:
            rec = {"step": step, "time_s": round(elapsed, 1), "loss": round(value, 4), "loss_ema": round(ema, 4),
                   "lr": opt.param_groups[0]["lr"], "grad_norm": round(grad_norm, 3), "batch": len(batch),
                   "targets": int(targets.numel()), "router_max_over_mean": round(imbalance, 2)}
            log_file.write(json.dumps(rec) + "\n")
            log(f"step {step:5d}  loss {value:.4f}  ema {ema:.4f}  lr {rec['lr']:.2e}  |g| {grad_norm:.2f}  "
                f"batch {len(batch)}  router max/mean {imbalance:.2f}  {step / max(elapsed, 1e-9):.1f} steps/s")
        if elapsed >= next_eval:
            next_eval += args.eval_every_s
            mtp.loads = None
            rec = teacher_forced_eval(main, mtp, held_sample, device, True)
            mtp.loads = torch.zeros(mtp.experts, device=device)
            rec.update(eval_step=step, time_s=round(elapsed, 1))
            history.append(rec)
            log_file.write(json.dumps(rec) + "\n")
            log_file.flush()
            log(f"eval @ step {step}: loss {rec['mtp_loss']:.4f}  acceptance (draft rows) "
                f"{rec['draft_rows']['acceptance_vs_main_argmax']:.4f}  top-1 vs data {rec['draft_rows']['mtp_top1_vs_data']:.4f}")
    mtp.loads = None
    log(f"trained {step} steps in {time.time() - start:.0f}s")
    return step, history


# ----------------------------------------------------------------------------------------------------------
# Export and verification
# ----------------------------------------------------------------------------------------------------------


def safetensors_names(path):
    import struct

    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def export_update(mtp, model_dir, update_dir):
    """mtp.safetensors + model.safetensors.index.json + config.json (num_nextn_predict_layers 1)."""
    from safetensors.torch import save_file

    os.makedirs(update_dir, exist_ok=True)
    tensors = mtp.official()
    save_file(tensors, os.path.join(update_dir, "mtp.safetensors"),
              metadata={"format": "pt", "producer": "strata tools/demo_model/train_mtp.py"})
    main = safetensors_names(os.path.join(model_dir, "model.safetensors"))
    clash = set(main) & set(tensors)
    if clash:
        raise RuntimeError(f"model.safetensors already holds {sorted(clash)[:3]}")
    weight_map = {name: "model.safetensors" for name in sorted(main)}
    weight_map.update({name: "mtp.safetensors" for name in sorted(tensors)})
    total = os.path.getsize(os.path.join(model_dir, "model.safetensors")) + \
        os.path.getsize(os.path.join(update_dir, "mtp.safetensors"))
    with open(os.path.join(update_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")
    with open(os.path.join(model_dir, "config.json")) as f:
        text = f.read()
    cfg = json.loads(text)
    cfg["num_nextn_predict_layers"] = 1
    new = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines()) if a != b]
    if len(text.splitlines()) != len(new.splitlines()) or len(changed) != 1:
        raise RuntimeError(f"config.json would change in more than the one key: {changed[:3]}")
    with open(os.path.join(update_dir, "config.json"), "w") as f:
        f.write(new)
    files = {f: os.path.getsize(os.path.join(update_dir, f)) for f in sorted(os.listdir(update_dir))}
    return tensors, files


def load_mtp_reference():
    path = os.path.join(REPO, "tests", "gpu", "mtp_reference.py")
    spec = importlib.util.spec_from_file_location("mtp_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rel_diff(got, want):
    """Worst row of max |got - want| / max(1, max |want|)."""
    diff = (got - want).abs().amax(-1)
    scale = want.abs().amax(-1).clamp(min=1.0)
    return float((diff / scale).max())


@torch.no_grad()
def verify(main, mtp, model_dir, update_dir, exported, seqs, device, rtol):
    """Read the exported checkpoint back through tests/gpu/mtp_reference.py and compare (see the docstring)."""
    from safetensors.torch import load_file

    result = {"sequences": [len(s) for s in seqs], "rtol": rtol}
    back = load_file(os.path.join(update_dir, "mtp.safetensors"))
    mine = mtp.official()
    same = set(back) == set(mine) == set(exported) and all(
        back[k].dtype == mine[k].dtype and torch.equal(back[k], mine[k]) for k in mine)
    result["exported_tensors_equal_module"] = same
    ref_mod = load_mtp_reference()
    with tempfile.TemporaryDirectory() as tmp:
        for f in os.listdir(model_dir):
            if f.endswith((".json", ".safetensors")) and f != "config.json":
                shutil.copyfile(os.path.join(model_dir, f), os.path.join(tmp, f))
        for f in os.listdir(update_dir):
            shutil.copyfile(os.path.join(update_dir, f), os.path.join(tmp, f))
        ck = ref_mod.Checkpoint(tmp, str(device))
        ref = ref_mod.MtpReference(ck, 0, torch.float32)
        head_rel, mtp_rel, argmax_agree, rows = 0.0, 0.0, 0, 0
        for s in seqs:
            ids = torch.tensor([s], device=device)
            streams, hidden = main(ids)
            main_logits = F.linear(hidden[0], main.head)
            head_rel = max(head_rel, rel_diff(ref.main_head(streams[0]), main_logits))
            mtp.eval()
            out = mtp(streams[:, :-1], ids[:, 1:])
            mine_logits = mtp.logits(out[0])
            n = len(s) - 1
            theirs = ref.forward(streams[0, :n], ids[0, 1:], torch.arange(n, device=device))
            mtp_rel = max(mtp_rel, rel_diff(theirs, mine_logits))
            argmax_agree += int((theirs.argmax(-1) == mine_logits.argmax(-1)).sum())
            rows += n
    result.update(main_head_on_hooked_streams_rel=head_rel, mtp_reference_vs_module_rel=mtp_rel,
                  argmax_agree=f"{argmax_agree}/{rows}")
    # argmax agreement is reported, not required: two fp32 implementations may split an exact tie differently
    result["pass"] = bool(same and head_rel <= rtol and mtp_rel <= rtol)
    return result


@torch.no_grad()
def strata_check(main, mtp, seqs, device, n_probe=32, top=8, seed=0):
    """Expected draft logits for `check_strata.py mtp` (stdlib): per row, the argmax, the top ids and values, and
    the logits at fixed probe ids."""
    gen = torch.Generator().manual_seed(seed)
    probe = torch.randint(0, mtp.embed.shape[0], (n_probe,), generator=gen).tolist()
    out = []
    for s in seqs:
        ids = torch.tensor([s], device=device)
        streams, _ = main(ids)
        logits = mtp.logits(mtp(streams[:, :-1], ids[:, 1:])[0])
        vals, idx = logits.topk(top, dim=-1)
        out.append({"tokens": s, "rows": len(s) - 1, "argmax": logits.argmax(-1).tolist(), "top_ids": idx.tolist(),
                    "top_logits": vals.tolist(), "probe_logits": logits[:, probe].tolist(),
                    "row_max_abs": logits.abs().amax(-1).tolist()})
    return {"probe_ids": probe, "sequences": out}


def pick_check_sequences(seqs, lines, n_short=6):
    """The shortest sequence of each kind plus the shortest one past the 128-token window."""
    chosen, kinds = [], set()
    for s, l in sorted(zip(seqs, lines), key=lambda x: len(x[0])):
        if l["kind"] not in kinds and len(chosen) < n_short:
            kinds.add(l["kind"])
            chosen.append(s)
    longer = [s for s in seqs if len(s) > 140]
    if longer:
        chosen.append(min(longer, key=len))
    return chosen


# ----------------------------------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="folder with train.jsonl, heldout.jsonl, heldout_eval.jsonl")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "demo"),
                    help="the main model's checkpoint folder (config.json, model.safetensors, tokenizer.json)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--encoder", default=render.DEFAULT_ENCODER)
    ap.add_argument("--chat-reference", default=render.DEFAULT_CHAT_REFERENCE)
    ap.add_argument("--minutes", type=float, default=4.0, help="training wall-clock budget (at most)")
    ap.add_argument("--deadline-minutes", type=float, default=5.6,
                    help="finish everything this long after DEMO_START")
    ap.add_argument("--reserve-s", type=float, default=70, help="time kept for evaluation, export, verification")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--attn-from", type=int, default=None,
                    help="main layer the MTP attention, mHC sites and norms start from (default: the last window-only layer)")
    ap.add_argument("--moe-from", type=int, default=None,
                    help="main layer the MTP MoE starts from (default: the last top-k MoE layer)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bias-update", type=float, default=1e-3, help="router bias step (aux-loss-free balancing)")
    ap.add_argument("--distill", type=float, default=0.0,
                    help="weight of KL(main model's p+2 distribution || MTP) in the loss (0: the MTP loss alone)")
    ap.add_argument("--token-budget", type=int, default=49152, help="padded tokens per batch")
    ap.add_argument("--max-batch", type=int, default=512)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--train-lines", type=int, default=0, help="use only the first N training lines (0: all)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every-s", type=float, default=60)
    ap.add_argument("--eval-sample", type=int, default=384, help="held-out lines in the periodic check")
    ap.add_argument("--rtol", type=float, default=1e-4, help="verification tolerance (fp32)")
    return ap.parse_args()


def main():
    args = parse_args()
    os.makedirs(args.out, exist_ok=True)
    report = {"args": vars(args)}
    try:
        ok = run(args, report)
    except BaseException as e:
        report["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        report["timings_s"] = Phase.timings
        with open(os.path.join(args.out, "mtp_report.json"), "w") as f:
            json.dump(report, f, indent=2, default=str)
    log("RESULT: " + ("OK" if ok else "EXPORT NOT VERIFIED"))
    sys.exit(0 if ok else 1)


def run(args, report):
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    args.tokenizer_dir = args.model
    tokenizer = render.PieceTokenizer(os.path.join(args.model, "tokenizer.json"))
    with open(os.path.join(args.model, "tokenizer.json"), "rb") as f:
        report["tokenizer_sha256"] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(args.model, "model.safetensors"), "rb") as f:
        report["main_model_sha256"] = hashlib.sha256(f.read()).hexdigest()

    with Phase("tokenize"):  # first: its worker processes are forked before CUDA is initialised
        data = T.load_data(args, tokenizer)

    if not torch.cuda.is_available():
        sys.exit("train_mtp.py needs a CUDA device")
    device = torch.device("cuda")
    import transformers

    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name(0)}")
    report.update(torch=torch.__version__, transformers=transformers.__version__, device=torch.cuda.get_device_name(0))

    with Phase("model"):
        saved, cfg, official, main_model = load_main(args.model, device)
        types, mlps = saved["layer_types"], saved["mlp_layer_types"]
        attn_from = args.attn_from if args.attn_from is not None else max(
            i for i, t in enumerate(types) if t == mc.SWA)
        moe_from = args.moe_from if args.moe_from is not None else max(
            i for i, t in enumerate(mlps) if t == "moe")
        init = initial_tensors(official, saved, attn_from, moe_from)
        mtp = MtpLayer(saved, init, main_model.head.detach()).to(device)
        n_params = sum(p.numel() for p in mtp.parameters())
        report.update(init={"attention_mhc_norms_from_layer": attn_from, "moe_from_layer": moe_from,
                            "e_proj_h_proj": "identity", "hyper_head_and_norm": "the main model's"},
                      mtp_parameters=n_params, mtp_export_bytes=sum(
                          math.prod(s) * (2 if k == "matrix" else 4) for _, s, k in mc.mtp_tensors(saved)))
        log(f"main model {args.model} frozen; MTP layer: {n_params / 1e6:.2f} M parameters, attention/mHC/norms "
            f"from layer {attn_from} ({types[attn_from]}), MoE from layer {moe_from} ({mlps[moe_from]})")

    with Phase("preflight"):
        # The hook's streams are the pre-HyperHead ones: the main HyperHead + norm + head on them give the logits.
        set_exact(True)
        sample = data["heldout"][:4]
        s = sample[0]["ids"]["prompt"] + sample[0]["ids"]["completion"]
        ids = torch.tensor([s], device=device)
        streams, hidden = main_model(ids)
        inner = main_model.model.model
        again = inner.norm(inner.hc_head(streams))
        rel = float((again - hidden).abs().max() / hidden.abs().max())
        log(f"preflight: main norm(hc_head(hooked streams)) vs last_hidden_state: max rel diff {rel:.2e}")
        assert rel < 1e-5, "the hooked streams are not the HyperHead's input"
        rec = teacher_forced_eval(main_model, mtp, sample, device, False)
        log(f"preflight: untrained MTP on 4 held-out lines: {rec}")
        set_exact(False)

    budget = min(args.minutes * 60, T.T0 + args.deadline_minutes * 60 - args.reserve_s - time.time())
    if budget < 20:
        sys.exit(f"only {budget:.0f}s left for training before the deadline")
    with Phase(f"train ({budget:.0f}s budget)"), open(os.path.join(args.out, "mtp_train_log.jsonl"), "w") as lf:
        steps, history = train(main_model, mtp, data, args, device, budget, lf)
    report.update(steps=steps, eval_history=history)

    with Phase("evaluate (export-exact, fp32)"):
        mtp.round_to_export()
        mtp.eval()
        set_exact(True)
        report["heldout_teacher_forced"] = teacher_forced_eval(main_model, mtp, data["heldout"], device, False)
        log(f"held-out (teacher-forced, {len(data['heldout'])} lines): {report['heldout_teacher_forced']}")
        report["greedy_acceptance_ci_set"], greedy_seqs = greedy_acceptance(main_model, mtp, data["heldout_eval"], device)
        g = report["greedy_acceptance_ci_set"]
        log(f"greedy acceptance on the main model's greedy completions of heldout_eval.jsonl: {g['accepted']}/"
            f"{g['draft_rows']} = {g['acceptance']:.4f} (main teacher-forced = its greedy on "
            f"{g['main_teacher_forced_equals_its_greedy']:.4f} of rows); by kind {g['by_kind']}")

    with Phase("export"):
        update_dir = os.path.join(args.out, "model_update")
        exported, files = export_update(mtp, args.model, update_dir)
        report["export"] = {"dir": update_dir, "files": files, "tensors": len(exported)}
        log(f"wrote {update_dir}: {files}")

    with Phase("verify"):
        check = pick_check_sequences(greedy_seqs, data["heldout_eval"])
        report["verify"] = verify(main_model, mtp, args.model, update_dir, exported, check, device, args.rtol)
        log(f"verify: {report['verify']}")
        with open(os.path.join(args.out, "mtp_verify.json"), "w") as f:
            json.dump(report["verify"], f, indent=2)
        # Strata's dump holds every row's full logits as JSON text: the shortest sequence, and the first 160
        # tokens of the longest check (past the 128-token window, causal, so a prefix is a sequence of its own).
        longest = max(check, key=len)
        strata_seqs = [min(check, key=len)] + ([longest[:160]] if len(longest) > 160 else [])
        with open(os.path.join(args.out, "mtp_strata_check.json"), "w") as f:
            json.dump(strata_check(main_model, mtp, strata_seqs, device), f)
        log(f"mtp_strata_check.json: sequences of {[len(s) for s in strata_seqs]} tokens")

    tf, g = report["heldout_teacher_forced"]["draft_rows"], report["greedy_acceptance_ci_set"]
    log(f"SUMMARY: {steps} steps; greedy acceptance {g['acceptance']:.4f} ({g['accepted']}/{g['draft_rows']}); "
        f"teacher-forced held-out acceptance {tf['acceptance_vs_main_argmax']:.4f}, MTP top-1 vs data "
        f"{tf['mtp_top1_vs_data']:.4f} (main {tf['main_top1_vs_data']:.4f}); verify pass {report['verify']['pass']}")
    return report["verify"]["pass"]


if __name__ == "__main__":
    main()
