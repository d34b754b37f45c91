#!/usr/bin/env python3
"""Train Strata's demo DeepSeek-V4 model on the synthetic chat corpus, export it, and verify the export.

Runs on the GPU machine (torch, transformers with DeepseekV4ForCausalLM, tokenizers, safetensors; no network).
run_on_gpu.sh is the one command that calls it; see docs/demo_model.md.

Phases (each prints a "== phase" line and its time):
  1. tokenize   corpus lines -> (prompt ids, completion ids) through render.py (reference encoder + the request
                mapping Strata's chat encoding implements + HF tokenizers), in parallel processes;
  2. model      DeepseekV4ForCausalLM from model_config.demo_config (sliding / CSA / HCA attention, a hash-MoE
                layer then top-k MoE, hc_mult 4, tied embeddings), tid2eid drawn at random (transformers leaves
                it zero), size checked against the budget;
  3. preflight  on the untrained model, before spending the training budget: the hidden-state logits path
                equals model(...).logits; export -> rebuild -> export is exact; save_pretrained's own tensor
                names and values agree with the official export under Strata's name aliases;
  4. train      AdamW, fp32 master weights, bf16 autocast, loss on completion tokens only (each example's mean,
                averaged over examples), length-bucketed batches, a wall-clock budget; with --embed-dtype fp8
                the tied embedding is trained through a fake FP8 quantizer (straight-through), so the exported
                FP8 table is exactly the one the model learned with; top-k routers get DeepSeek's bias-based load
                balancing; every --eval-every-s seconds a held-out loss and greedy exact-match are logged;
  5. export     official DeepSeek names (embed.weight [+ embed.scale], layers.N.attn.*, layers.N.ffn.experts.E.w1,
                hc_head_fn, ...): matrices BF16, norms / mHC / sinks / position biases / gate bias F32, tid2eid I32,
                no head.weight (tied); config.json keeps only keys Strata accepts; tokenizer files alongside;
  6. evaluate   the export-exact model (rebuilt from the exported tensors, fp32, TF32 off, i.e. what Strata
                computes) answers every line of heldout_eval.jsonl greedily; the reference parser reads each
                completion; expected_greedy.jsonl keeps prompt ids and completion ids for check_strata.py;
  7. verify     save_pretrained -> from_pretrained reproduces those greedy tokens; transformers' own loader is
                also tried on the official-name export (with the embedding dequantized) and reported.

Outputs (--out): model/ (config.json, model.safetensors, tokenizer files), summary.json, train_log.jsonl,
expected_greedy.jsonl. Exit status 0 only when the export verified.

MTP: not trained (transformers has no MTP module; num_nextn_predict_layers = 0). Deferred.
"""
import argparse
import json
import math
import multiprocessing
import os
import random
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

EOS_ID, PAD_ID = 1, 1
T0 = float(os.environ.get("DEMO_START", time.time()))  # run_on_gpu.sh passes its start, so deadlines count it


def log(*parts):
    print(f"[{time.time() - T0:7.1f}s]", *parts, flush=True)


class Phase:
    """Prints the phase, its duration, and keeps the timings for summary.json."""
    timings = {}

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        self.start = time.time()
        log(f"== {self.name}")

    def __exit__(self, *exc):
        Phase.timings[self.name] = round(time.time() - self.start, 1)
        log(f"== {self.name} done in {Phase.timings[self.name]:.1f}s")


# ----------------------------------------------------------------------------------------------------------
# 1. Data
# ----------------------------------------------------------------------------------------------------------

_WORKER = {}


def _init_worker(encoder, chat_reference):
    _WORKER["renderer"] = render.Renderer(encoder, chat_reference)


def _render_chunk(lines):
    r = _WORKER["renderer"]
    return [r.pieces(line["request"], line.get("reply")) for line in lines]


def render_all(lines, args):
    """Pieces for every line, rendered in parallel (the reference encoder is pure Python)."""
    chunks = [lines[i:i + 2000] for i in range(0, len(lines), 2000)]
    procs = max(1, min(16, (os.cpu_count() or 2) - 1))
    with multiprocessing.get_context("fork").Pool(procs, _init_worker, (args.encoder, args.chat_reference)) as pool:
        return [p for chunk in pool.map(_render_chunk, chunks) for p in chunk]


def load_data(args, tokenizer):
    """Corpus splits with their ids attached (line["ids"] = {"prompt", "completion"}).

    All splits are rendered in one process pool before the tokenizer is first used: forking after HF tokenizers
    has started its thread pool is what its fork warning is about.
    """
    splits = {}
    for split in ("train", "heldout", "heldout_eval"):
        lines = render.read_jsonl(os.path.join(args.corpus, f"{split}.jsonl"))
        splits[split] = lines[: args.train_lines] if split == "train" and args.train_lines else lines
    everything = [line for lines in splits.values() for line in lines]
    rendered = render_all(everything, args)
    tokenizer.prime([t for p, c in rendered for t, control in p + (c or []) if not control])
    for line, (p, c) in zip(everything, rendered):
        line["ids"] = {"prompt": tokenizer.ids(p), "completion": None if c is None else tokenizer.ids(c)}
    data = {}
    for split, lines in splits.items():
        if split != "heldout_eval":
            lines = [l for l in lines if len(l["ids"]["prompt"]) + len(l["ids"]["completion"]) <= args.max_len]
        lengths = [len(l["ids"]["prompt"]) + len(l["ids"]["completion"] or []) for l in lines]
        log(f"{split}: {len(lines)} lines, tokens per line mean {sum(lengths) / len(lengths):.0f} max {max(lengths)}")
        data[split] = lines
    log(f"{len(tokenizer.cache)} distinct text pieces")
    return data


def make_batches(examples, rng, token_budget, max_batch):
    """Length-bucketed batches: shuffle, sort within large windows, cut by padded-token budget, shuffle again."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    window = max_batch * 64
    batches = []
    for start in range(0, len(order), window):
        chunk = sorted(order[start:start + window], key=lambda i: examples[i][0])
        batch, longest = [], 0
        for i in chunk:
            n = examples[i][0]
            if batch and (max(longest, n) * (len(batch) + 1) > token_budget or len(batch) >= max_batch):
                batches.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, n)
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def collate(lines, device):
    """Right-padded ids plus where each completion token is predicted from.

    Right padding needs no attention mask: attention is causal (sliding, and the compressors only expose an
    entry once its whole window lies before the query), so pads after a sequence never reach its positions.
    """
    seqs = [l["ids"]["prompt"] + l["ids"]["completion"] for l in lines]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
    rows, cols, targets, owner = [], [], [], []
    for b, (line, seq) in enumerate(zip(lines, seqs)):
        ids[b, : len(seq)] = torch.tensor(seq)
        p = len(line["ids"]["prompt"])
        for j, tok in enumerate(line["ids"]["completion"]):
            rows.append(b)
            cols.append(p + j - 1)
            targets.append(tok)
            owner.append(b)
    t = lambda x: torch.tensor(x, dtype=torch.long, device=device)  # noqa: E731
    return ids.to(device), t(rows), t(cols), t(targets), t(owner)


# ----------------------------------------------------------------------------------------------------------
# 2. Model
# ----------------------------------------------------------------------------------------------------------


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


def head_weight(model):
    emb = model.model.embed_tokens
    return emb.quantized_weight() if isinstance(emb, FakeQuantEmbedding) else model.lm_head.weight


def build_model(cfg_kwargs, args, device):
    from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

    config = DeepseekV4Config(**cfg_kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(args.seed)
    model = DeepseekV4ForCausalLM(config).float()
    model.config._attn_implementation = "eager"
    gen = torch.Generator().manual_seed(args.seed + 1)
    for layer in model.model.layers:
        gate = layer.mlp.gate
        if hasattr(gate, "tid2eid"):  # k distinct experts per token id
            order = torch.rand(gate.tid2eid.shape[0], config.n_routed_experts, generator=gen).argsort(dim=1)
            gate.tid2eid.copy_(order[:, : gate.tid2eid.shape[1]].to(gate.tid2eid.dtype))
    if args.embed_dtype == "fp8":
        old = model.model.embed_tokens
        new = FakeQuantEmbedding(old.num_embeddings, old.embedding_dim)
        new.weight = old.weight  # the same Parameter, still tied to lm_head
        model.model.embed_tokens = new
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, whatever the transformers version did
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return config, model.to(device)


def hidden_states(model, ids):
    return model.model(input_ids=ids, use_cache=False).last_hidden_state


def selected_logits(model, ids, rows, cols):
    """Logits only where they are needed (a full [B, T, 129280] tensor would dwarf the rest of the model)."""
    h = hidden_states(model, ids)
    return h[rows, cols] @ head_weight(model).t()


class RouterBalancer:
    """DeepSeek's auxiliary-loss-free balancing: after each step, nudge every top-k router's correction bias
    towards under-used experts (bias += gamma * sign(mean load - load))."""

    def __init__(self, model, gamma):
        self.gamma, self.active, self.counts = gamma, False, {}
        for layer in model.model.layers:
            gate = layer.mlp.gate
            if hasattr(gate, "e_score_correction_bias"):
                self.counts[gate] = torch.zeros(gate.e_score_correction_bias.shape[0], device=gate.weight.device)
                gate.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output):
        if self.active:
            indices = output[2].reshape(-1)
            self.counts[module] += torch.bincount(indices, minlength=self.counts[module].shape[0]).float()

    @torch.no_grad()
    def step(self):
        imbalance = []
        for gate, counts in self.counts.items():
            if counts.sum() > 0:
                load = counts / counts.sum()
                gate.e_score_correction_bias += self.gamma * torch.sign(load.mean() - load)
                imbalance.append(float(load.max() / load.mean()))
            counts.zero_()
        return max(imbalance) if imbalance else 1.0


# ----------------------------------------------------------------------------------------------------------
# 5. Export: transformers state -> official tensors, and back
# ----------------------------------------------------------------------------------------------------------


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
            t = {"w1": sd[gate_up][e, :inter], "w3": sd[gate_up][e, inter:], "w2": sd[down][e]}[which]
        else:
            key = mc.state_dict_name(name)
            used.add(key)
            t = sd[key]
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
    config_cpp = os.path.join(REPO, "src", "model", "config.cpp")
    accepted = mc.strata_config_keys(config_cpp) if os.path.exists(config_cpp) else None
    cfg, dropped = mc.strata_config(config.to_dict(), accepted)
    if dropped:
        log(f"config.json: dropped keys Strata does not accept: {dropped}")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return dropped


# ----------------------------------------------------------------------------------------------------------
# Greedy decoding and answer checks
# ----------------------------------------------------------------------------------------------------------


@torch.no_grad()
def greedy(model, prompts, max_new, batch_size=64, autocast=False):
    """Greedy completions (lists of ids, ending with EOS when one was produced) without a KV cache.

    Each step reruns the right-padded batch: exact, simple, and what a whole-prompt prefill computes.
    """
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out = [None] * len(prompts)
    device = next(model.parameters()).device
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        limit = max(max_new[i] for i in idx)
        width = max(len(prompts[i]) for i in idx) + limit
        ids = torch.full((len(idx), width), PAD_ID, dtype=torch.long, device=device)
        lens = torch.tensor([len(prompts[i]) for i in idx], device=device)
        for b, i in enumerate(idx):
            ids[b, : len(prompts[i])] = torch.tensor(prompts[i], device=device)
        gen = [[] for _ in idx]
        alive = torch.ones(len(idx), dtype=torch.bool, device=device)
        for step in range(limit):
            rows = torch.arange(len(idx), device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                logits = selected_logits(model, ids[:, : int(lens.max())], rows, lens - 1)
            tok = logits.float().argmax(dim=-1)
            for b in range(len(idx)):
                if alive[b]:
                    gen[b].append(int(tok[b]))
            ids[rows[alive], lens[alive]] = tok[alive]
            lens = lens + alive.long()
            finished = (tok == EOS_ID) | torch.tensor([len(g) >= max_new[i] for g, i in zip(gen, idx)], device=device)
            alive = alive & ~finished
            if not alive.any():
                break
        for b, i in enumerate(idx):
            out[i] = gen[b]
    return out


def check_answer(line, parsed):
    """Does a parsed completion meet the eval line's expectation?"""
    expect = line["expect"]
    if "tool_call" in expect:
        calls = parsed["tool_calls"]
        if not calls:
            return False
        want = expect["tool_call"]
        return calls[0]["function"]["name"] == want["name"] and json.loads(calls[0]["function"]["arguments"]) == want["arguments"]
    if "content_json" in expect:
        try:
            return json.loads(parsed["content"]) == expect["content_json"]
        except ValueError:
            return False
    ok = parsed["content"] == expect["content"]
    if expect.get("reasoning_nonempty"):
        ok = ok and bool(parsed["reasoning_content"].strip())
    return ok


def evaluate(model, lines, tokenizer, renderer, autocast):
    """Greedy answers for eval lines; returns per-line records and accuracy by kind."""
    prompts = [l["ids"]["prompt"] for l in lines]
    max_new = [int(l["request"].get("max_tokens", 64)) for l in lines]
    completions = greedy(model, prompts, max_new, autocast=autocast)
    records, by_kind = [], {}
    for line, comp in zip(lines, completions):
        text = tokenizer.decode(comp)
        try:
            parsed = renderer.parse(text, line["request"])
            correct, error = check_answer(line, parsed), None
        except Exception as e:  # the reference parser raises on malformed output
            parsed, correct, error = None, False, f"{type(e).__name__}: {e}"
        records.append({"id": line["id"], "kind": line["kind"], "task": line["task"], "request": line["request"],
                        "prompt_ids": line["ids"]["prompt"], "completion_ids": comp, "text": text,
                        "parsed": parsed, "parse_error": error, "expect": line["expect"], "correct": correct})
        k = by_kind.setdefault(line["kind"], [0, 0])
        k[0] += correct
        k[1] += 1
    return records, {k: round(c / n, 4) for k, (c, n) in by_kind.items()}, {k: f"{c}/{n}" for k, (c, n) in by_kind.items()}


# ----------------------------------------------------------------------------------------------------------
# 3. Preflight and 7. verification
# ----------------------------------------------------------------------------------------------------------


def set_exact(exact):
    """fp32 everywhere for reference numbers (TF32 off); TF32 allowed while training."""
    torch.backends.cuda.matmul.allow_tf32 = not exact
    torch.backends.cudnn.allow_tf32 = not exact
    torch.set_float32_matmul_precision("highest" if exact else "high")


@torch.no_grad()
def preflight(model, config, cfg, args, sample, device):
    """Cheap checks of everything the export relies on, on the untrained model, before training starts."""
    set_exact(True)
    model.eval()
    ids, rows, cols, _, _ = collate(sample, device)
    # (a) the selective logits path equals transformers' own forward (plain embedding: compare on a rebuilt model)
    official = export_official(model, cfg, args.embed_dtype)
    rebuilt = model_from_official(official, config, cfg, device)
    full = rebuilt(input_ids=ids, use_cache=False).logits[rows, cols]
    mine = selected_logits(rebuilt, ids, rows, cols)
    rel = float((full - mine).abs().max() / full.abs().max())
    log(f"preflight: selective logits vs model(...).logits: max rel diff {rel:.2e}")
    assert rel < 1e-5, "the hidden-state logits path disagrees with DeepseekV4ForCausalLM.forward"
    # (b) export -> rebuild -> export is the identity (FP8 scales may move by an ulp when re-derived)
    again = export_official(rebuilt, cfg, args.embed_dtype)
    assert set(again) == set(official)
    for name, t in official.items():
        if t.dtype == torch.float8_e4m3fn:
            assert torch.equal(t.view(torch.uint8), again[name].view(torch.uint8)), name
        elif name == "embed.scale":
            assert torch.allclose(t, again[name], rtol=1e-6, atol=0), name
        else:
            assert torch.equal(t, again[name]), name
    # (c) the live (fake-quant) model and the rebuilt export compute the same logits
    live = selected_logits(model, ids, rows, cols)
    rel = float((live - mine).abs().max() / mine.abs().max())
    log(f"preflight: live model vs rebuilt export: max rel diff {rel:.2e} (bf16 rounding of matrices)")
    # (d) transformers' save_pretrained names/values match the official export under Strata's aliases
    problems = compare_with_save_pretrained(rebuilt, official, cfg)
    assert not problems, f"save_pretrained disagrees with the official export: {problems[:5]}"
    log("preflight: save_pretrained tensors match the official export under Strata's name aliases")
    del rebuilt
    model.train()
    set_exact(False)


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


def verify_reload(model_dir, exact_records, official, config, cfg, device, n):
    """(1) save_pretrained -> from_pretrained; (2) transformers' loader on official names. Same greedy tokens?"""
    from safetensors.torch import save_file
    from transformers import DeepseekV4ForCausalLM

    lines = exact_records[:n]
    prompts = [r["prompt_ids"] for r in lines]
    max_new = [len(r["completion_ids"]) for r in lines]
    want = [r["completion_ids"] for r in lines]
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_from_official(official, config, cfg, "cpu").save_pretrained(tmp)
        reloaded = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32).to(device).eval()
        got = greedy(reloaded, prompts, max_new)
        result["save_pretrained_reload_same_tokens"] = got == want
        log(f"verify: save_pretrained -> from_pretrained greedy tokens identical on {n} prompts: {got == want}")
        del reloaded
    with tempfile.TemporaryDirectory() as tmp:
        plain = dict(official)
        if "embed.scale" in plain:
            plain["embed.weight"] = fp8_dequantize(plain.pop("embed.weight"), plain.pop("embed.scale"))
        save_file({k: v.contiguous() for k, v in plain.items()}, os.path.join(tmp, "model.safetensors"),
                  metadata={"format": "pt"})
        with open(os.path.join(model_dir, "config.json")) as f, open(os.path.join(tmp, "config.json"), "w") as g:
            g.write(f.read())
        try:
            loaded = DeepseekV4ForCausalLM.from_pretrained(tmp, dtype=torch.float32).to(device).eval()
            got = greedy(loaded, prompts, max_new)
            result["official_names_transformers_load_same_tokens"] = got == want
            log(f"verify: transformers from_pretrained on the official names: same greedy tokens: {got == want}")
        except Exception as e:  # informative only: Strata, not transformers, is the consumer of this layout
            result["official_names_transformers_load_same_tokens"] = f"not loadable: {type(e).__name__}: {e}"[:300]
            log(f"verify: transformers cannot load official names directly ({type(e).__name__}); informative only")
    return result


# ----------------------------------------------------------------------------------------------------------
# 4. Training
# ----------------------------------------------------------------------------------------------------------


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and not name.endswith(("attn_hc.fn", "ffn_hc.fn", "hc_fn")) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_at(step, progress, args):
    warm = min(1.0, (step + 1) / args.warmup_steps)
    return args.lr * warm * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def loss_on(model, lines, device):
    ids, rows, cols, targets, owner = collate(lines, device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = selected_logits(model, ids, rows, cols)
    per_token = F.cross_entropy(logits.float(), targets, reduction="none")
    n = len(lines)
    sums = torch.zeros(n, device=device).index_add_(0, owner, per_token)
    counts = torch.zeros(n, device=device).index_add_(0, owner, torch.ones_like(per_token))
    return (sums / counts).mean(), int(targets.numel())


@torch.no_grad()
def heldout_loss(model, lines, device, batch=128):
    total, n = 0.0, 0
    for i in range(0, len(lines), batch):
        chunk = lines[i:i + batch]
        loss, _ = loss_on(model, chunk, device)
        total += float(loss) * len(chunk)
        n += len(chunk)
    return total / max(n, 1)


def train(model, data, args, tokenizer, renderer, device, budget_s, log_file):
    rng = random.Random(args.seed)
    train_lines = data["train"]
    examples = [(len(l["ids"]["prompt"]) + len(l["ids"]["completion"]),) for l in train_lines]
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.98), eps=1e-8)
    balancer = RouterBalancer(model, args.bias_update)
    held_sample = rng.sample(data["heldout"], min(512, len(data["heldout"])))
    eval_sample = eval_subset(data["heldout_eval"], args.eval_lines)
    start, step, batches, ema, history = time.time(), 0, [], None, []
    next_eval = args.eval_every_s
    model.train()
    while True:
        elapsed = time.time() - start
        if elapsed >= budget_s:
            break
        if not batches:
            batches = make_batches(examples, rng, args.token_budget, args.max_batch)
        batch = [train_lines[i] for i in batches.pop()]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, elapsed / budget_s, args)
        balancer.active = True
        loss, n_targets = loss_on(model, batch, device)
        balancer.active = False
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip))
        opt.step()
        imbalance = balancer.step()
        value = float(loss)
        if not math.isfinite(value):
            raise RuntimeError(f"loss is {value} at step {step}")
        ema = value if ema is None else 0.98 * ema + 0.02 * value
        step += 1
        if step % args.log_every == 0:
            rec = {"step": step, "time_s": round(elapsed, 1), "loss": round(value, 4), "loss_ema": round(ema, 4),
                   "lr": opt.param_groups[0]["lr"], "grad_norm": round(grad_norm, 3), "batch": len(batch),
                   "targets": n_targets, "router_max_over_mean": round(imbalance, 2)}
            log_file.write(json.dumps(rec) + "\n")
            log(f"step {step:5d}  loss {value:.4f}  ema {ema:.4f}  lr {rec['lr']:.2e}  |g| {grad_norm:.2f}  "
                f"batch {len(batch)}  router max/mean {imbalance:.2f}")
        if elapsed >= next_eval:
            next_eval += args.eval_every_s
            rec = periodic_eval(model, held_sample, eval_sample, tokenizer, renderer, device, step, elapsed)
            history.append(rec)
            log_file.write(json.dumps(rec) + "\n")
            log_file.flush()
    log(f"trained {step} steps in {time.time() - start:.0f}s")
    return step, history


def eval_subset(lines, n):
    """A fixed mix for the periodic greedy check: mostly plain answers, a few of each other kind."""
    by_kind = {}
    for l in lines:
        by_kind.setdefault(l["kind"], []).append(l)
    quota = {"answer": n // 2}
    others = [k for k in by_kind if k != "answer"]
    for k in others:
        quota[k] = max(1, (n - quota["answer"]) // max(1, len(others)))
    return [l for k, ls in by_kind.items() for l in ls[: quota.get(k, 0)]]


def periodic_eval(model, held_sample, eval_sample, tokenizer, renderer, device, step, elapsed):
    model.eval()
    t = time.time()
    loss = heldout_loss(model, held_sample, device)
    _, acc, counts = evaluate(model, eval_sample, tokenizer, renderer, autocast=True)
    model.train()
    log(f"eval @ step {step}: held-out loss {loss:.4f}  greedy exact {counts}  ({time.time() - t:.1f}s)")
    return {"eval_step": step, "time_s": round(elapsed, 1), "heldout_loss": round(loss, 4), "accuracy": acc}


# ----------------------------------------------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="folder with train.jsonl, heldout.jsonl, heldout_eval.jsonl")
    ap.add_argument("--tokenizer-dir", required=True, help="folder with the demo tokenizer.json (make_tokenizer.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--encoder", default=render.DEFAULT_ENCODER)
    ap.add_argument("--chat-reference", default=render.DEFAULT_CHAT_REFERENCE)
    ap.add_argument("--minutes", type=float, default=6.0, help="training wall-clock budget")
    ap.add_argument("--deadline-minutes", type=float, default=9.3,
                    help="finish everything this long after DEMO_START (the device runs a command 10 minutes)")
    ap.add_argument("--reserve-s", type=float, default=100, help="time kept for export, evaluation, verification")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4, choices=sorted(mc.LAYER_SCHEDULES))
    ap.add_argument("--moe-inter", type=int, default=96)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--embed-dtype", choices=["fp8", "bf16"], default="fp8")
    ap.add_argument("--max-mb", type=float, default=40.0, help="budget for the model folder (weights + tokenizer)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup-steps", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bias-update", type=float, default=1e-3, help="router bias step (aux-loss-free balancing)")
    ap.add_argument("--token-budget", type=int, default=49152, help="padded tokens per batch")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--train-lines", type=int, default=0, help="use only the first N training lines (0: all)")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every-s", type=float, default=75)
    ap.add_argument("--eval-lines", type=int, default=48, help="greedy-checked lines per periodic eval")
    ap.add_argument("--verify-lines", type=int, default=32, help="prompts compared in the reload checks")
    return ap.parse_args()


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("train.py needs a CUDA device")
    device = torch.device("cuda")
    os.makedirs(args.out, exist_ok=True)
    model_dir = os.path.join(args.out, "model")
    import transformers

    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name(0)}")
    summary = {"args": vars(args), "torch": torch.__version__, "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name(0)}
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    renderer = render.Renderer(args.encoder, args.chat_reference)
    tokenizer = render.PieceTokenizer(os.path.join(args.tokenizer_dir, "tokenizer.json"))

    with Phase("tokenize"):
        data = load_data(args, tokenizer)

    with Phase("model"):
        cfg = mc.demo_config(args.hidden, args.layers, args.moe_inter, args.experts)
        weights_mb = mc.checkpoint_bytes(cfg, args.embed_dtype) / 1e6
        tok_mb = sum(os.path.getsize(os.path.join(args.tokenizer_dir, f)) for f in ("tokenizer.json", "tokenizer_config.json")) / 1e6
        log(f"config: hidden {args.hidden}, layers {cfg['layer_types']}, mlp {cfg['mlp_layer_types']}, "
            f"{mc.parameter_count(cfg) / 1e6:.2f} M parameters; checkpoint ~{weights_mb:.1f} MB + tokenizer {tok_mb:.1f} MB")
        if weights_mb + tok_mb > args.max_mb:
            sys.exit(f"model folder would be {weights_mb + tok_mb:.1f} MB > --max-mb {args.max_mb}")
        config, model = build_model(cfg, args, device)
        summary.update(config=cfg, parameters=mc.parameter_count(cfg))

    with Phase("preflight"):
        short = [l for l in data["train"] if l["mode"] != "tool_call"][:6]
        long = [l for l in data["train"] if l["mode"] == "tool_call"][:2]  # > 128 tokens: compressors at work
        preflight(model, config, cfg, args, short + long, device)

    budget = min(args.minutes * 60, T0 + args.deadline_minutes * 60 - args.reserve_s - time.time())
    if budget < 30:
        sys.exit(f"only {budget:.0f}s left for training before the deadline")
    with Phase(f"train ({budget:.0f}s budget)"), open(os.path.join(args.out, "train_log.jsonl"), "w") as lf:
        steps, history = train(model, data, args, tokenizer, renderer, device, budget, lf)
    summary.update(steps=steps, eval_history=history)

    with Phase("export"):
        model.eval()
        official = export_official(model, cfg, args.embed_dtype)
        path = save_official(official, model_dir)
        summary["config_keys_dropped"] = write_config(config, model_dir)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            if os.path.abspath(args.tokenizer_dir) != os.path.abspath(model_dir):
                with open(os.path.join(args.tokenizer_dir, f), "rb") as src, open(os.path.join(model_dir, f), "wb") as dst:
                    dst.write(src.read())
        sizes = {f: os.path.getsize(os.path.join(model_dir, f)) for f in sorted(os.listdir(model_dir))}
        summary["files"] = sizes
        summary["model_dir_mb"] = round(sum(sizes.values()) / 1e6, 2)
        log(f"wrote {path}; model folder {summary['model_dir_mb']} MB: {sizes}")
        del model
        torch.cuda.empty_cache()

    with Phase("evaluate (export-exact, fp32)"):
        set_exact(True)
        exact = model_from_official(official, config, cfg, device)
        records, acc, counts = evaluate(exact, data["heldout_eval"], tokenizer, renderer, autocast=False)
        with open(os.path.join(args.out, "expected_greedy.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        summary.update(final_accuracy=acc, final_counts=counts)
        by_task = {}
        for r in records:
            if r["kind"] == "answer":
                t = by_task.setdefault(r["task"], [0, 0])
                t[0] += r["correct"]
                t[1] += 1
        summary["answer_accuracy_by_task"] = {k: f"{c}/{n}" for k, (c, n) in by_task.items()}
        log(f"final greedy exact match: {counts}; plain answers by task: {summary['answer_accuracy_by_task']}")
        for r in [r for r in records if not r["correct"]][:12]:
            log(f"  wrong {r['id']} ({r['task']}): expected {r['expect']} got {r['text']!r}")
        del exact
        torch.cuda.empty_cache()

    with Phase("verify"):
        summary["verify"] = verify_reload(model_dir, records, official, config, cfg, device, args.verify_lines)

    summary["timings_s"] = Phase.timings
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    ok = summary["verify"]["save_pretrained_reload_same_tokens"] is True
    log(f"SUMMARY: steps {steps}; plain-answer accuracy {counts.get('answer')} ({acc.get('answer')}); "
        f"all kinds {counts}; model folder {summary['model_dir_mb']} MB; verify {summary['verify']}")
    log("RESULT: " + ("OK" if ok else "EXPORT NOT VERIFIED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
