#!/usr/bin/env python3
"""Writes tests/fixtures/v41/configs.json: config.json inputs and what the PyTorch reference (tests/gpu/v41_reference.py)
derives from them — the layer schedule, the RoPE inverse frequencies of both kinds, the Engram tables' rows — for
Strata's parse_v41_config to match (tests/v41_config_test.cpp). Run with a Python that has torch:
    python3 tests/reference/v41_config_fixture.py"""
import json, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "gpu"))
import v41_reference as ref  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "v41", "configs.json")
RELEASE_ROPE = {"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                "original_max_position_embeddings": 65536}
CASES = {
    # The release's text_config as published (research notes §4; the rest are the defaults).
    "release": {"model_type": "deepseek_v41", "text_config": {
        "num_hidden_layers": 40, "num_nextn_predict_layers": 3, "rope_scaling": RELEASE_ROPE,
        "engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682]}},
    # Derived schedules away from the release.
    "layers12": {"num_hidden_layers": 12, "num_nextn_predict_layers": 1, "rope_scaling": RELEASE_ROPE},
    "explicit": {"num_hidden_layers": 8, "num_nextn_predict_layers": 2, "compress_ratios": [0, 2, 2, 1, 1, 1, 1, 1, 0],
                 "index_source_layer_ids": [1, 3, 6], "candidate_source_layer_id": 3, "rope_theta": 50000.0,
                 "compress_rope_theta": 80000.0, "max_position_embeddings": 4096,
                 "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": 16, "beta_slow": 2,
                                  "original_max_position_embeddings": 1024}},
    "no_yarn": {"num_hidden_layers": 5, "num_nextn_predict_layers": 0},
}


def derive(case):
    d = case["text_config"] if "text_config" in case else case
    kw = dict(d)
    if kw.get("engram_layer_ids"):
        kw["engram_token_map"] = list(range(99092)) + [0] * (129280 - 99092)
    cfg = ref.V41Config(**kw)
    rope = {kind: [float(v) for v in cfg._rope[kind][0].tolist()] for kind in ("main", "compress")}
    return {"compress_ratios": cfg.compress_ratios, "kv_source_layer_ids": cfg.kv_source_layer_ids,
            "index_source_layer_ids": cfg.index_source_layer_ids,
            "candidate_source_layer_id": cfg.candidate_source_layer_id,
            "dspark_target_layer_ids": cfg.dspark_target_layer_ids,
            "engram_num_embeddings": cfg.engram_num_embeddings, "inv_freq": rope}


if __name__ == "__main__":
    out = {name: {"config": case, "derived": derive(case)} for name, case in CASES.items()}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    json.dump(out, open(OUT, "w"), indent=1)
    print("wrote", OUT)
