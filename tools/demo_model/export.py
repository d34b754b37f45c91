"""The demo checkpoint's format: DeepSeek's block FP8, and transformers' state dict <-> official tensors.

Official names and shapes come from model_config.official_tensors (a copy of random_init.cpp's list); the name
mapping is model_config.state_dict_name (a copy of checkpoint_names.cpp). Stored dtypes: the tied embedding FP8
(e4m3 codes + an F32 128x128 block-scale tensor "embed.scale", value = code x scale) or BF16; other matrices
BF16; norms, mHC parameters, sinks, position biases and the router correction bias F32; tid2eid I32.
"""
import json
import os
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

import model_config as mc

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def fp8_blockwise(w, block=mc.FP8_BLOCK):
    """DeepSeek block FP8: e4m3 codes and one F32 scale per 128x128 block (value = code * scale)."""
    rows, cols = w.shape
    rb, cb = -(-rows // block), -(-cols // block)
    padded = F.pad(w.float(), (0, cb * block - cols, 0, rb * block - rows))
    blocks = padded.view(rb, block, cb, block)
    amax = blocks.abs().amax(dim=(1, 3))
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    codes = (blocks / scale[:, None, :, None]).to(torch.float8_e4m3fn)
    return codes.view(rb * block, cb * block)[:rows, :cols].contiguous(), scale.contiguous()


def fp8_dequantize(codes, scale, block=mc.FP8_BLOCK):
    rows, cols = codes.shape
    full = scale.repeat_interleave(block, 0)[:rows].repeat_interleave(block, 1)[:, :cols]
    return codes.float() * full


class FakeQuantEmbedding(nn.Embedding):
    """nn.Embedding whose lookups (and the logits, see head_weight) use the FP8-rounded table.

    Straight-through: the forward sees dequant(quant(W)), gradients reach W unchanged. The parameter keeps the
    name "weight", so state_dict names do not change and lm_head stays tied to it.
    """

    def quantized_weight(self):
        codes, scale = fp8_blockwise(self.weight.detach())
        return self.weight + (fp8_dequantize(codes, scale) - self.weight).detach()

    def forward(self, ids):
        return F.embedding(ids, self.quantized_weight())


def lookup(sd, key, official):
    """sd[key], or an error that shows the nearest names (a transformers version with other module names)."""
    if key not in sd:
        import difflib

        near = difflib.get_close_matches(key, list(sd), n=3, cutoff=0.5)
        raise RuntimeError(f"export: '{official}' should be state-dict entry '{key}', which does not exist; "
                           f"nearest: {near}. Update RENAMES in model_config.py (and checkpoint_names.cpp).")
    return sd[key]


def export_official(model, cfg, embed_dtype):
    """{official name: tensor} in the stored dtypes. Every state-dict entry must be used exactly once."""
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    used, out = set(), {}
    inter = cfg["moe_intermediate_size"]
    for name, shape, kind in mc.official_tensors(cfg):
        slot = mc.routed_expert_slot(name)
        if slot:
            layer, e, which = slot
            gate_up, down = mc.stacked_expert_names(layer)
            used.update((gate_up, down))
            stacked = lookup(sd, down if which == "w2" else gate_up, name)
            t = {"w1": stacked[e, :inter], "w3": stacked[e, inter:], "w2": stacked[e]}[which]
        else:
            key = mc.state_dict_name(name)
            used.add(key)
            t = lookup(sd, key, name)
        if list(t.shape) != shape:
            raise RuntimeError(f"export: {name} has shape {list(t.shape)}, expected {shape}")
        if kind == "embed" and embed_dtype == "fp8":
            out[name], out["embed.scale"] = fp8_blockwise(t)
        elif kind in ("embed", "matrix"):
            out[name] = t.to(torch.bfloat16).contiguous()
        elif kind == "float":
            out[name] = t.float().contiguous()
        else:
            out[name] = t.to(torch.int32).contiguous()
    leftover = set(sd) - used - {"lm_head.weight"}
    if leftover:
        raise RuntimeError(f"export: state-dict entries with no official name: {sorted(leftover)[:10]}")
    return {k: v.cpu() for k, v in out.items()}


def official_to_state_dict(official, cfg):
    """Inverse of export_official (values as float32 / int64, the embedding dequantized)."""
    sd, inter, experts = {}, cfg["moe_intermediate_size"], cfg["n_routed_experts"]
    for name, shape, kind in mc.official_tensors(cfg):
        t = official[name]
        if kind == "embed" and t.dtype == torch.float8_e4m3fn:
            t = fp8_dequantize(t, official["embed.scale"])
        t = t.long() if kind == "index" else t.float()
        slot = mc.routed_expert_slot(name)
        if slot:
            layer, e, which = slot
            gate_up, down = mc.stacked_expert_names(layer)
            sd.setdefault(gate_up, torch.zeros(experts, 2 * inter, cfg["hidden_size"]))
            sd.setdefault(down, torch.zeros(experts, cfg["hidden_size"], inter))
            if which == "w1":
                sd[gate_up][e, :inter] = t
            elif which == "w3":
                sd[gate_up][e, inter:] = t
            else:
                sd[down][e] = t
        else:
            sd[mc.state_dict_name(name)] = t
    return sd


def model_from_official(official, config, cfg, device):
    """A plain fp32 DeepseekV4ForCausalLM holding exactly the exported values: what Strata will compute."""
    from transformers import DeepseekV4ForCausalLM

    model = DeepseekV4ForCausalLM(config).float()
    model.config._attn_implementation = "eager"
    missing, unexpected = model.load_state_dict(official_to_state_dict(official, cfg), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"rebuild from export: missing {missing}, unexpected {unexpected}")
    model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(device).eval()


def save_official(official, out_dir):
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model.safetensors")
    save_file(official, path, metadata={"format": "pt", "producer": "strata tools/demo_model/train.py"})
    return path


def write_config(config, out_dir):
    """config.json from transformers' own serialisation, keeping only keys Strata accepts (reported)."""
    config_cpp = os.path.join(REPO, "src", "model", "config_keys.cpp")
    accepted = mc.strata_config_keys(config_cpp) if os.path.exists(config_cpp) else None
    cfg, dropped = mc.strata_config(config.to_dict(), accepted)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return dropped


def compare_with_save_pretrained(model, official, cfg):
    """Every official tensor must be found in save_pretrained's file under one of Strata's aliases, with the
    same values, and the file must hold nothing else (Strata rejects unexpected tensors)."""
    from safetensors import safe_open

    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        saved = {}
        for f in os.listdir(tmp):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(tmp, f), "pt") as st:
                    saved.update({k: st.get_tensor(k) for k in st.keys()})
    claimed = set()
    for name, shape, kind in mc.official_tensors(cfg):
        hit = next((a for a in mc.name_aliases(name) if a in saved), None)
        if hit is None:
            problems.append(f"{name}: none of {mc.name_aliases(name)} in save_pretrained output")
            continue
        claimed.add(hit)
        want = official[name]
        if want.dtype == torch.float8_e4m3fn:
            want = fp8_dequantize(want, official["embed.scale"])
        got = saved[hit]
        same = torch.equal(got.long(), want.long()) if kind == "index" else torch.equal(got.float(), want.float())
        if list(got.shape) != shape or not same:
            problems.append(f"{name}: values differ from save_pretrained's '{hit}'")
    extra = sorted(set(saved) - claimed - {"head.weight", "lm_head.weight"})
    if extra:
        problems.append(f"save_pretrained wrote tensors with no official name: {extra[:5]}")
    return problems
