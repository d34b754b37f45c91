"""A byte-level BPE tokenizer for the 1-layer tiny serving benchmarks (bench/run_serve_cpu.sh,
bench/run_router_cpu.sh): its 512 ids all fit the tiny preset's vocabulary and all decode to ASCII text, so that
every token a random-weight model samples is streamed as one chunk of text (as with a real model)."""
import itertools
import json


def write_ascii_tokenizer(model):
    # A byte-level BPE tokenizer whose 512 ids all fit the preset's vocabulary and all decode to ASCII text, so
    # that every token a random-weight model samples is streamed as one chunk of text (as with a real model):
    # ids 0-94 the printable ASCII characters, 95-509 two-letter merges, 510/511 BOS/EOS.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    char = {b: chr(c) for b, c in zip(bs, cs)}  # the ByteLevel alphabet: each byte as one printable character
    vocab = {char[b]: i for i, b in enumerate(range(32, 127))}
    merges = []
    for x, y in itertools.product("etaoinshrdlucmfwypvbgkjqxz", repeat=2):
        if len(vocab) == 510:
            break
        vocab[x + y] = len(vocab)
        merges.append(f"{x} {y}")
    special = dict(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    spec = {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [dict(id=510, content="<｜begin▁of▁sentence｜>", **special),
                             dict(id=511, content="<｜end▁of▁sentence｜>", **special)],
            "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": merges}}
    json.dump(spec, open(f"{model}/tokenizer.json", "w"), ensure_ascii=False)
    json.dump({"add_bos_token": False, "bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
              open(f"{model}/tokenizer_config.json", "w"), ensure_ascii=False)
