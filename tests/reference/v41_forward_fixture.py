#!/usr/bin/env python3
"""Writes tests/fixtures/v41/small/: config.json + model.safetensors (fp32) of the reference's small_config(0)
(every V4.1 layer kind: SWA-only, ratio-2 source/consumer, ratio-1 source/consumer, reindex layer, top-k reuse,
Engram) with weights seed 0, and expected.json holding the reference forward's logits (cache path, qat=False,
hf_numerics=False) of a fixed 48-token list. Run with Debian's /usr/bin/python3 (torch + numpy)."""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpu"))
import v41_reference as ref  # noqa: E402

OUT = os.path.join(HERE, "..", "fixtures", "v41", "small")


def main():
    cfg = ref.small_config(0)
    W = ref.make_weights(cfg, 0)
    ref.dump_weights(cfg, W, OUT)
    g = torch.Generator().manual_seed(41)
    tokens = torch.randint(0, cfg.vocab_size, (48,), generator=g).tolist()
    with torch.no_grad():
        logits = ref.forward(cfg, W, tokens).float()
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"source": "tests/gpu/v41_reference.py forward (qat=False, hf_numerics=False), small_config(0), "
                             "weights seed 0", "tokens": tokens,
                   "logits": [[float("%.8g" % v) for v in row] for row in logits.tolist()]}, f)
    print(f"wrote {OUT}: {len(W)} tensors, logits {list(logits.shape)}, multipliers {cfg._mult}")


if __name__ == "__main__":
    main()
