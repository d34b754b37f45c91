"""The demo model's shape, its official tensor list, and the official <-> transformers name mapping.

Stdlib only, so the size budget and the name mapping can be checked on a machine without torch
(test_demo_model.py does, against the committed transformers fixtures). train.py imports this module.

Sources, so the two sides cannot drift apart silently:
  * the official tensor list and shapes mirror src/model/deepseek_v4/random_init.cpp (model_params);
  * the rename table mirrors src/model/checkpoint_names.cpp (itself a copy of transformers 5.17
    conversion_mapping.py "deepseek_v4", official -> transformers), applied in the same order.
"""
import math

SWA = "sliding_attention"
CSA = "compressed_sparse_attention"
HCA = "heavily_compressed_attention"

VOCAB_SIZE = 129280  # the official DeepSeek-V4 vocabulary size (tokenizer ids end at 128846; the rest is padding)
FP8_BLOCK = 128

# Layer schedules by depth. Each covers all three attention types; the first MoE layer routes by token hash.
# 4 layers is the schedule of the a_hc4 parity fixture (tests/reference/parity.py), the best-tested one.
LAYER_SCHEDULES = {
    4: [SWA, CSA, HCA, CSA],
    5: [SWA, CSA, HCA, CSA, SWA],
    6: [SWA, CSA, HCA, CSA, HCA, CSA],
}


def demo_config(hidden_size=192, num_layers=4, moe_intermediate_size=128, n_routed_experts=8, hash_layers=1):
    """DeepseekV4Config keyword arguments for the demo model.

    Small everywhere except the vocabulary (it is the real DeepSeek one). tie_word_embeddings keeps one
    vocab x hidden matrix in the checkpoint; num_nextn_predict_layers = 0 because transformers has no MTP
    module (train_mtp.py adds one MTP layer to the export afterwards; mtp_tensors lists its tensors).
    """
    if num_layers not in LAYER_SCHEDULES:
        raise ValueError(f"num_layers must be one of {sorted(LAYER_SCHEDULES)}, got {num_layers}")
    if not 1 <= hash_layers < num_layers:
        raise ValueError(f"hash_layers must be in [1, {num_layers - 1}], got {hash_layers}")
    return dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=hidden_size,
        moe_intermediate_size=moe_intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=64,
        q_lora_rank=96,
        num_experts_per_tok=2,
        n_routed_experts=n_routed_experts,
        n_shared_experts=1,
        o_groups=2,
        o_lora_rank=64,
        index_n_heads=8,
        index_head_dim=32,
        index_topk=16,
        partial_rotary_factor=0.25,
        sliding_window=128,
        compress_rates={CSA: 4, HCA: 128},
        layer_types=list(LAYER_SCHEDULES[num_layers]),
        mlp_layer_types=["hash_moe"] * hash_layers + ["moe"] * (num_layers - hash_layers),
        hc_mult=4,
        hc_sinkhorn_iters=20,
        rope_parameters={"rope_type": "yarn", "factor": 16, "original_max_position_embeddings": 256,
                         "beta_fast": 32, "beta_slow": 1},
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        num_nextn_predict_layers=0,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=None,
    )


# ----------------------------------------------------------------------------------------------------------
# Official tensor list
# ----------------------------------------------------------------------------------------------------------

# Kinds decide the stored dtype: "matrix" -> BF16, "float" -> F32 (norms, mHC, sinks, position biases, gate
# bias: tiny, and kept exact), "embed" -> BF16 or FP8, "index" -> integer (tid2eid).
def official_tensors(cfg):
    """[(official name, shape, kind)] for a tied-embedding V4 checkpoint, in random_init.cpp's order."""
    d, hc, heads, hd = cfg["hidden_size"], cfg["hc_mult"], cfg["num_attention_heads"], cfg["head_dim"]
    mix = (2 + hc) * hc
    q_lora, inter, experts = cfg["q_lora_rank"], cfg["moe_intermediate_size"], cfg["n_routed_experts"]
    rates = cfg.get("compress_rates", {CSA: 4, HCA: 128})
    out = []
    add = lambda name, shape, kind: out.append((name, list(shape), kind))  # noqa: E731
    add("embed.weight", (cfg["vocab_size"], d), "embed")
    if not cfg.get("tie_word_embeddings", False):
        add("head.weight", (cfg["vocab_size"], d), "matrix")
    add("norm.weight", (d,), "float")
    add("hc_head_fn", (hc, hc * d), "float")
    add("hc_head_base", (hc,), "float")
    add("hc_head_scale", (1,), "float")
    for layer in range(cfg["num_hidden_layers"]):
        p = f"layers.{layer}"
        for site in ("attn", "ffn"):
            add(f"{p}.hc_{site}_fn", (mix, hc * d), "float")
            add(f"{p}.hc_{site}_base", (mix,), "float")
            add(f"{p}.hc_{site}_scale", (3,), "float")
        add(f"{p}.attn_norm.weight", (d,), "float")
        add(f"{p}.ffn_norm.weight", (d,), "float")
        a = f"{p}.attn"
        add(f"{a}.wq_a.weight", (q_lora, d), "matrix")
        add(f"{a}.q_norm.weight", (q_lora,), "float")
        add(f"{a}.wq_b.weight", (heads * hd, q_lora), "matrix")
        add(f"{a}.wkv.weight", (hd, d), "matrix")
        add(f"{a}.kv_norm.weight", (hd,), "float")
        add(f"{a}.wo_a.weight", (cfg["o_groups"] * cfg["o_lora_rank"], heads * hd // cfg["o_groups"]), "matrix")
        add(f"{a}.wo_b.weight", (d, cfg["o_groups"] * cfg["o_lora_rank"]), "matrix")
        add(f"{a}.attn_sink", (heads,), "float")
        layer_type = cfg["layer_types"][layer]

        def compressor(prefix, rate, dim, overlap):
            width = 2 * dim if overlap else dim
            add(f"{prefix}.wkv.weight", (width, d), "matrix")
            add(f"{prefix}.wgate.weight", (width, d), "matrix")
            add(f"{prefix}.ape", (rate, width), "float")
            add(f"{prefix}.norm.weight", (dim,), "float")

        if layer_type != SWA:
            compressor(f"{a}.compressor", rates[layer_type], hd, layer_type == CSA)
        if layer_type == CSA:
            ih, ihd = cfg["index_n_heads"], cfg["index_head_dim"]
            add(f"{a}.indexer.wq_b.weight", (ih * ihd, q_lora), "matrix")
            add(f"{a}.indexer.weights_proj.weight", (ih, d), "matrix")
            compressor(f"{a}.indexer.compressor", rates[CSA], ihd, True)
        f = f"{p}.ffn"
        add(f"{f}.gate.weight", (experts, d), "matrix")
        if cfg["mlp_layer_types"][layer] == "hash_moe":
            add(f"{f}.gate.tid2eid", (cfg["vocab_size"], cfg["num_experts_per_tok"]), "index")
        else:
            add(f"{f}.gate.bias", (experts,), "float")
        for e in range(experts):
            add(f"{f}.experts.{e}.w1.weight", (inter, d), "matrix")
            add(f"{f}.experts.{e}.w2.weight", (d, inter), "matrix")
            add(f"{f}.experts.{e}.w3.weight", (inter, d), "matrix")
        add(f"{f}.shared_experts.w1.weight", (inter, d), "matrix")
        add(f"{f}.shared_experts.w2.weight", (d, inter), "matrix")
        add(f"{f}.shared_experts.w3.weight", (inter, d), "matrix")
    return out


def mtp_tensors(cfg, i=0):
    """[(official name, shape, kind)] of MTP layer i (docs/mtp.md), in random_init.cpp's order: the input
    projections, norms and the layer's own HyperHead, then a window-only, top-k MoE layer under "mtp.<i>." (the
    tensors load_layer reads for a sliding-attention, score-routed layer). The embedding and head are the main
    model's (shared), so none are listed."""
    d, hc = cfg["hidden_size"], cfg["hc_mult"]
    p = f"mtp.{i}"
    out = [(f"{p}.e_proj.weight", [d, d], "matrix"), (f"{p}.h_proj.weight", [d, d], "matrix")]
    out += [(f"{p}.{n}.weight", [d], "float") for n in ("enorm", "hnorm", "norm")]
    out += [(f"{p}.hc_head_fn", [hc, hc * d], "float"), (f"{p}.hc_head_base", [hc], "float"),
            (f"{p}.hc_head_scale", [1], "float")]
    one = dict(cfg, num_hidden_layers=1, layer_types=[SWA], mlp_layer_types=["moe"])
    for name, shape, kind in official_tensors(one):
        if name.startswith("layers.0."):
            out.append((p + name[len("layers.0"):], shape, kind))
    return out


def fp8_scale_shape(shape):
    """Shape of the 128x128 block-scale tensor of an FP8 [rows, cols] matrix."""
    return [math.ceil(shape[0] / FP8_BLOCK), math.ceil(shape[1] / FP8_BLOCK)]


def checkpoint_bytes(cfg, embed_dtype="fp8", index_bytes=4):
    """Bytes of tensor data in the exported safetensors (headers add a few KB)."""
    total = 0
    for _, shape, kind in official_tensors(cfg):
        n = math.prod(shape)
        if kind == "embed":
            total += n * (1 if embed_dtype == "fp8" else 2)
            if embed_dtype == "fp8":
                total += 4 * math.prod(fp8_scale_shape(shape))
        elif kind == "matrix":
            total += 2 * n
        elif kind == "float":
            total += 4 * n
        else:
            total += index_bytes * n
    return total


def parameter_count(cfg):
    """Trainable parameters (tid2eid is a fixed routing table, not a parameter)."""
    return sum(math.prod(shape) for _, shape, kind in official_tensors(cfg) if kind != "index")


# ----------------------------------------------------------------------------------------------------------
# Names: official <-> transformers (port of src/model/checkpoint_names.cpp)
# ----------------------------------------------------------------------------------------------------------

ANYWHERE, SUFFIX, WHOLE = "anywhere", "suffix", "whole"
RENAMES = [
    (ANYWHERE, ".attn.", ".self_attn."),
    (ANYWHERE, ".ffn.", ".mlp."),
    (ANYWHERE, ".indexer.compressor.", ".compressor.indexer."),
    (WHOLE, "embed.weight", "embed_tokens.weight"),
    (WHOLE, "head.weight", "lm_head.weight"),
    (WHOLE, "hc_head_fn", "hc_head.hc_fn"),
    (WHOLE, "hc_head_base", "hc_head.hc_base"),
    (WHOLE, "hc_head_scale", "hc_head.hc_scale"),
    (ANYWHERE, ".attn_norm.", ".input_layernorm."),
    (ANYWHERE, ".ffn_norm.", ".post_attention_layernorm."),
    (SUFFIX, ".hc_attn_fn", ".attn_hc.fn"),
    (SUFFIX, ".hc_attn_base", ".attn_hc.base"),
    (SUFFIX, ".hc_attn_scale", ".attn_hc.scale"),
    (SUFFIX, ".hc_ffn_fn", ".ffn_hc.fn"),
    (SUFFIX, ".hc_ffn_base", ".ffn_hc.base"),
    (SUFFIX, ".hc_ffn_scale", ".ffn_hc.scale"),
    (SUFFIX, ".attn_sink", ".sinks"),
    (ANYWHERE, ".indexer.weights_proj.", ".compressor.indexer.scorer.weights_proj."),
    (ANYWHERE, ".indexer.wq_b.", ".compressor.indexer.q_b_proj."),
    (ANYWHERE, ".norm.", ".kv_norm."),
    (SUFFIX, ".ape", ".position_bias"),
    (ANYWHERE, ".wq_a.", ".q_a_proj."),
    (ANYWHERE, ".self_attn.wq_b.", ".self_attn.q_b_proj."),
    (ANYWHERE, ".wkv.", ".kv_proj."),
    (ANYWHERE, ".wgate.", ".gate_proj."),
    (ANYWHERE, ".wo_a.", ".o_a_proj."),
    (ANYWHERE, ".wo_b.", ".o_b_proj."),
    (ANYWHERE, ".q_norm.", ".q_a_norm."),
    (SUFFIX, ".gate.bias", ".gate.e_score_correction_bias"),
    (ANYWHERE, ".shared_experts.w1.", ".shared_experts.gate_proj."),
    (ANYWHERE, ".shared_experts.w2.", ".shared_experts.down_proj."),
    (ANYWHERE, ".shared_experts.w3.", ".shared_experts.up_proj."),
]


def _rename(match, old, new, name):
    """One rule, exactly as checkpoint_names.cpp applies it (Anywhere resumes after the replacement)."""
    if match == WHOLE:
        return new if name == old else name
    if match == SUFFIX:
        return name[: -len(old)] + new if name.endswith(old) else name
    at = name.find(old)
    while at != -1:
        name = name[:at] + new + name[at + len(old):]
        at = name.find(old, at + len(new))
    return name


def transformers_name(official):
    """The module-path name transformers uses in memory, without the "model." prefix."""
    name = official
    for match, old, new in RENAMES:
        name = _rename(match, old, new, name)
    return name


def state_dict_name(official):
    """Key in DeepseekV4ForCausalLM.state_dict() (routed experts excepted: transformers stacks them)."""
    hf = transformers_name(official)
    return hf if hf == "lm_head.weight" else "model." + hf


def saved_name(official):
    """The name save_pretrained writes (transformers reverses its conversion on save, to half-official names)."""
    name = state_dict_name(official)
    for match, old, new in reversed(RENAMES):
        name = _rename(match, new, old, name)
    return name


def name_aliases(official):
    """Every name Strata's loader accepts for `official`, in its order of preference."""
    hf = transformers_name(official)
    out = []
    for n in (official, saved_name(official), hf, "model." + hf, "model." + official):
        if n not in out:
            out.append(n)
    return out


def routed_expert_slot(official):
    """(layer, expert, which) for "layers.L.ffn.experts.E.wK.weight", else None.

    transformers keeps routed experts stacked: mlp.experts.gate_up_proj [E, 2I, D] (w1 = gate rows first, then
    w3 = up rows) and mlp.experts.down_proj [E, D, I] (w2).
    """
    parts = official.split(".")
    if len(parts) == 7 and parts[0] == "layers" and parts[2:4] == ["ffn", "experts"] and parts[6] == "weight":
        return int(parts[1]), int(parts[4]), parts[5]
    return None


def stacked_expert_names(layer):
    """state_dict keys of one layer's stacked routed experts."""
    base = f"model.layers.{layer}.mlp.experts"
    return f"{base}.gate_up_proj", f"{base}.down_proj"


# ----------------------------------------------------------------------------------------------------------
# config.json
# ----------------------------------------------------------------------------------------------------------


def strata_config_keys(config_cpp):
    """Top-level config.json keys Strata's parser accepts (kV4Fields + kIgnoredExtraKeys in config_keys.cpp).

    Read from the source so a key Strata would reject ("unknown key for model_type deepseek_v4") is caught at
    export time, not when the lead first loads the checkpoint.
    """
    import re

    with open(config_cpp, encoding="utf-8") as f:
        src = f.read()
    keys = set()
    for array in ("kV4Fields", "kIgnoredExtraKeys"):
        m = re.search(array + r"\[\]\s*=\s*\{(.*?)\};", src, re.S)
        if not m:
            raise ValueError(f"{config_cpp}: cannot find {array}")
        body = re.sub(r"//[^\n]*", "", m.group(1))
        keys.update(re.findall(r'"([^"]+)"', body))
    return keys


def strata_config(transformers_config, accepted_keys=None):
    """The config.json to ship: transformers' own (to_dict / save_pretrained), with the export's facts pinned.

    Returns (config, dropped keys). Keys Strata does not accept are dropped (and reported) rather than written.
    """
    config = dict(transformers_config)
    config.update(model_type="deepseek_v4", architectures=["DeepseekV4ForCausalLM"], tie_word_embeddings=True,
                  num_nextn_predict_layers=0, dtype="bfloat16")
    config.pop("torch_dtype", None)
    dropped = []
    if accepted_keys is not None:
        dropped = sorted(k for k in config if k not in accepted_keys)
        for k in dropped:
            del config[k]
    return config, dropped
