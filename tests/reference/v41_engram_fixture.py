#!/usr/bin/env python3
"""Writes tests/fixtures/v41/engram.json from the PyTorch reference (tests/gpu/v41_reference.py): the Engram row ids
of a token history under the release's layout (layers 1 and 14, primes from 16,000,000, NumPy's multipliers), and
one injection on small random shapes, in fp32. Run with a Python that has torch and numpy (Debian's python3-torch):
    python3 tests/reference/v41_engram_fixture.py [--check]
--check recomputes and compares with the committed file instead of writing it."""
import json, os, sys, types

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "gpu"))
import v41_reference as ref  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "v41", "engram.json")


def layout(layer_ids, vocab_size, max_ngram, heads, compressed_vocab, pad_code):
    primes, offsets = ref.find_engram_primes(len(layer_ids), max_ngram - 1, heads, vocab_size)
    mult = ref.compute_hash_multipliers(layer_ids, compressed_vocab, max_ngram)
    return types.SimpleNamespace(engram_max_ngram_size=max_ngram, engram_n_heads=heads, engram_layer_ids=layer_ids,
                                 _pad_code=pad_code, _mult=mult, _primes=primes, _offsets=offsets, rms_norm_eps=1e-20)


def build():
    # The release: a history with a dead (padding) token at position 6.
    rel = layout([1, 14], 16000000, 4, 8, 99092, 2)
    history = [17, 5, 99091, 3, 3, 1200, ref.DEAD, 44, 0, 2, 65000, 7]
    hist = torch.tensor(history, dtype=torch.int64)
    ids = ref.engram_hash_ids(rel, hist, torch.arange(len(history), dtype=torch.int64))  # [S, 2, 24]
    # An injection on small shapes: hc 4, d 16, n-grams of 2 and 3 tokens, 3 heads, rows of 8 channels.
    small = layout([2], 50, 3, 3, 40, 2)
    g = torch.Generator().manual_seed(41)
    rows = sum(sum(r) for r in small._primes[0])
    hc, d, hd, n_ids = 4, 16, 8, 6
    W = {"layers.2.engram.embed.weight": torch.randn(rows, hd, generator=g),
         "layers.2.engram.wkv.weight": torch.randn((hc + 1) * d, n_ids * hd, generator=g) * 0.2,
         "layers.2.engram.q_weight": torch.randn(hc, d, generator=g),
         "layers.2.engram.k_weight": torch.randn(hc, d, generator=g)}
    tokens = torch.tensor([3, 9, 27, 1, 39, 0, 12, 12, 5, 30], dtype=torch.int64)
    sids = ref.engram_hash_ids(small, tokens, torch.arange(len(tokens), dtype=torch.int64))[:, 0, :]  # [S, 6]
    h = torch.randn(len(tokens), hc, d, generator=g)
    out = ref.engram_forward(small, W, 2, h, sids)
    rows_of = ref.engram_lookup(W, "layers.2.engram.", sids).reshape(len(tokens), n_ids * hd)
    f = lambda t: [float(x) for x in t.reshape(-1).tolist()]  # noqa: E731
    return {"note": "tests/reference/v41_engram_fixture.py (tests/gpu/v41_reference.py, torch " + torch.__version__ + ")",
            "release": {"history": history, "pad_code": 2, "multipliers": rel._mult,
                        "rows": [sum(sum(r) for r in p) for p in rel._primes],
                        "ids": [[[int(v) for v in layer] for layer in pos] for pos in ids.tolist()]},
            "inject": {"layer": 2, "vocab_size": 50, "max_ngram": 3, "heads": 3, "compressed_vocab": 40, "pad_code": 2,
                       "tokens": tokens.tolist(), "ids": sids.tolist(), "hc": hc, "d": d, "head_dim": hd, "eps": 1e-20,
                       "streams": f(h), "rows_of": f(rows_of), "wkv": f(W["layers.2.engram.wkv.weight"]),
                       "qk": f(W["layers.2.engram.q_weight"] * W["layers.2.engram.k_weight"]), "expected": f(out)}}


if __name__ == "__main__":
    got = build()
    if "--check" in sys.argv:
        want = json.load(open(OUT))
        ok = got["release"] == want["release"] and got["inject"]["ids"] == want["inject"]["ids"]
        worst = max(abs(a - b) for a, b in zip(got["inject"]["expected"], want["inject"]["expected"]))
        print(f"release ids equal: {ok}; injection max abs diff {worst:.3g}")
        sys.exit(0 if ok and worst < 1e-5 else 1)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    json.dump(got, open(OUT, "w"))
    print("wrote", OUT)
