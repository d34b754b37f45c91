"""Greedy decoding without a KV cache, and the answer checks of heldout_eval.jsonl lines.

Used for the periodic checks during training (the live model, bf16 autocast) and for the final numbers (the
model rebuilt from the exported tensors, fp32 with TF32 off: what Strata computes on the CPU).
"""
import json

import torch

from export import FakeQuantEmbedding

EOS_ID, PAD_ID = 1, 1  # <｜end▁of▁sentence｜>; padding sits after the sequence, so its value never matters


def set_exact(exact):
    """fp32 everywhere for reference numbers (TF32 off); TF32 allowed while training."""
    torch.backends.cuda.matmul.allow_tf32 = not exact
    torch.backends.cudnn.allow_tf32 = not exact
    torch.set_float32_matmul_precision("highest" if exact else "high")


def hidden_states(model, ids):
    return model.model(input_ids=ids, use_cache=False).last_hidden_state


def selected_logits(model, ids, rows, cols):
    """Logits only where they are needed (a full [B, T, 129280] tensor would dwarf the rest of the model)."""
    h = hidden_states(model, ids)
    return h[rows, cols] @ head_weight(model).t()


def head_weight(model):
    emb = model.model.embed_tokens
    return emb.quantized_weight() if isinstance(emb, FakeQuantEmbedding) else model.lm_head.weight


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
            ids[rows[alive], lens[alive]] = tok[alive]
            lens = lens + alive.long()
            still = alive.tolist()
            for b, (t, i) in enumerate(zip(tok.tolist(), idx)):
                if still[b]:
                    gen[b].append(t)
                    still[b] = t != EOS_ID and len(gen[b]) < max_new[i]
            alive = torch.tensor(still, device=device)
            if not any(still):
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
