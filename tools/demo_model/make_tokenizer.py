#!/usr/bin/env python3
"""The demo model's tokenizer: the DeepSeek-V3 tokenizer.json plus the tokens DeepSeek-V4 added (stdlib only).

Why: the V4 chat format needs "<think>", "</think>" and "｜DSML｜" as single tokens, and the V3 vocabulary (the
one scripts/fetch_test_data.sh downloads into .deps/tokenizer-deepseek_v3) does not have them. V4 kept V3's
vocabulary and merges and appended 32 added tokens at ids 128815-128846 (before its vision tokens near the end
of the 129280-row embedding, which the demo does not need). The ids below are the V4 tokenizer's: public tests
of the real file pin <think> = 128821, </think> = 128822, ｜DSML｜ = 128825, <｜latest_reminder｜> = 128828,
<｜action｜> .. <｜domain｜> = 128829-128832, <｜title｜> = 128836, <｜read_url｜> = 128845; the other spellings
and their order are those listed in tests/text/chat_encoding_test.cpp (V4 additions, ids 128815-128846).

The new tokens are written like V3's chat markers (<｜User｜>, <｜Assistant｜>): "special": false, so a decoder
that skips special tokens still yields "</think>" and "｜DSML｜" for the output parser. BOS / EOS / pad keep their
V3 entries. tokenizer.json is written compactly (4.3 MB instead of 7.8 MB); the content is V3's otherwise.

usage: python3 tools/demo_model/make_tokenizer.py [--v3 .deps/tokenizer-deepseek_v3] --out DIR
"""
import argparse
import hashlib
import json
import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_V3 = os.path.join(REPO, ".deps", "tokenizer-deepseek_v3")

FIRST_V4_ID = 128815
V4_ADDED_TOKENS = [  # ids FIRST_V4_ID, FIRST_V4_ID + 1, ...
    "<｜begin▁of▁repo▁name｜>", "<｜end▁of▁repo▁name｜>", "<｜begin▁of▁file▁name｜>", "<｜end▁of▁file▁name｜>",
    "<｜begin▁of▁file｜>", "<｜end▁of▁file｜>", "<think>", "</think>", "<｜place▁holder▁for▁copy｜>",
    "<｜place▁holder▁for▁pointer▁replace｜>", "｜DSML｜", "<｜begin▁sys｜>", "<｜end▁sys｜>", "<｜latest_reminder｜>",
    "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜task｜>", "<｜political｜>", "<｜entity｜>",
    "<｜title｜>", "<｜safety｜>", "<｜answer｜>", "<｜search｜>", "<dsml:", "</dsml:", "<｜search▁begin｜>",
    "<｜search▁end｜>", "<｜extracted_url｜>", "<｜read_url｜>", "<｜end_of_query｜>",
]
PINNED_IDS = {"<think>": 128821, "</think>": 128822, "｜DSML｜": 128825, "<｜latest_reminder｜>": 128828,
              "<｜action｜>": 128829, "<｜query｜>": 128830, "<｜authority｜>": 128831, "<｜domain｜>": 128832,
              "<｜title｜>": 128836, "<｜read_url｜>": 128845}


def v4_tokenizer(v3):
    """V3's tokenizer.json dict with the V4 added tokens appended (checked against the pinned ids)."""
    added = v3["added_tokens"]
    last = max(t["id"] for t in added)
    if last != FIRST_V4_ID - 1:
        raise SystemExit(f"expected the V3 tokenizer's last added id to be {FIRST_V4_ID - 1}, found {last}")
    present = {t["content"] for t in added}
    for i, content in enumerate(V4_ADDED_TOKENS):
        if content in present:
            raise SystemExit(f"{content!r} is already in the base tokenizer: not the DeepSeek-V3 tokenizer.json")
        added.append({"id": FIRST_V4_ID + i, "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": True, "special": False})
    ids = {t["content"]: t["id"] for t in added}
    for content, want in PINNED_IDS.items():
        assert ids[content] == want, f"{content}: id {ids[content]}, the V4 tokenizer has {want}"
    return v3


def v4_tokenizer_config(v3_config):
    """V3's tokenizer_config.json minus its V3 chat template (V4 prompts come from the V4 encoder, not Jinja).

    tokenizer_class becomes PreTrainedTokenizerFast: it loads tokenizer.json as written, whereas
    LlamaTokenizerFast may rebuild the pre-tokenizer in recent transformers.
    """
    config = {k: v for k, v in v3_config.items() if k != "chat_template"}
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_max_length"] = 1048576
    return config


def write_json(path, value, compact):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(value, f, ensure_ascii=False, indent=2)
            f.write("\n")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make(v3_dir, out_dir):
    """Writes tokenizer.json and tokenizer_config.json into out_dir; returns the tokenizer's size (ids)."""
    with open(os.path.join(v3_dir, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = v4_tokenizer(json.load(f))
    with open(os.path.join(v3_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        config = v4_tokenizer_config(json.load(f))
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "tokenizer.json"), tokenizer, compact=True)
    write_json(os.path.join(out_dir, "tokenizer_config.json"), config, compact=False)
    return max(t["id"] for t in tokenizer["added_tokens"]) + 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v3", default=DEFAULT_V3, help="folder with the DeepSeek-V3 tokenizer.json")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.v3, "tokenizer.json")):
        raise SystemExit(f"{args.v3}/tokenizer.json missing: run scripts/fetch_test_data.sh first")
    size = make(args.v3, args.out)
    path = os.path.join(args.out, "tokenizer.json")
    print(f"wrote {args.out}/tokenizer.json ({os.path.getsize(path)} bytes, {size} ids, sha256 {sha256(path)}) "
          f"and tokenizer_config.json")


if __name__ == "__main__":
    main()
