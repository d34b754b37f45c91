#!/usr/bin/env python3
"""Two runs of official_reference.py on the same prompt and tokens: how far apart they are, measured as
tests/official_oracle_test.cpp measures Strata against the oracle (so the numbers compare).

    python3 tests/gpu/compare_official.py REFERENCE.json OTHER.json   (OTHER written with --full-logits and
                                                                       --force-tokens REFERENCE.json)

Logits: per step the largest |a − b| over the reference's sampled and top logits, relative to its largest |logit|.
Streams: per layer and step the largest |a − b| over the 32 recorded values of stream 0, relative to their largest.
Also: the steps whose argmax differ, and whether layer 0 is equal bit for bit. Prints one JSON object.
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ref, other = (json.load(open(p)) for p in sys.argv[1:3])
    if ref["prompt"] != other["prompt"] or ref["generated"] != other["generated"]:
        sys.exit("compare_official: the runs saw different tokens (pass --force-tokens REFERENCE.json)")
    if any("logits" not in row for row in other["rows"]):
        sys.exit("compare_official: OTHER has no full logits (run it with --full-logits)")
    stride = ref["sample_stride"]
    logit_errors, argmax_differs = [], []
    for step, (a, b) in enumerate(zip(ref["rows"], other["rows"])):
        full = b["logits"]
        pairs = [(v, full[i * stride]) for i, v in enumerate(a["sample"])] + [(v, full[i]) for i, v in a["top"]]
        scale = max(abs(v) for v, _ in pairs)
        logit_errors.append(max(abs(v - w) for v, w in pairs) / scale)
        if a["argmax"] != b["argmax"]:
            argmax_differs.append(step)
    stream_errors, layer0_exact = {}, True
    for (layer, pos, a), (layer_b, pos_b, b) in zip(ref["streams"], other["streams"]):
        assert (layer, pos) == (layer_b, pos_b)
        scale = max(abs(v) for v in a)
        err = max(abs(v - w) for v, w in zip(a, b)) / scale
        stream_errors[layer] = max(stream_errors.get(layer, 0.0), err)
        layer0_exact &= layer != 0 or a == b
    print(json.dumps({"reference": sys.argv[1], "other": sys.argv[2], "other_mhc_sums": other.get("mhc_sums"),
                      "worst_logit_error": max(logit_errors), "logit_error_per_step": logit_errors,
                      "worst_stream_error_per_layer": stream_errors, "layer0_bit_exact": layer0_exact,
                      "argmax_differs_at_steps": argmax_differs}, indent=1))


if __name__ == "__main__":
    main()
