#!/usr/bin/env python3
"""Tokenizer parity and speed: `strata tokenize` against HF tokenizers, on the committed corpus.

Run on the GPU machine (Python 3.12, tokenizers 0.23.x, no network), from the repository root, after building:

    python3 tests/reference/tokenizer_parity.py --strata build/strata --tokenizer-dir .deps/tokenizer-deepseek_v3 \\
        --bench-out bench/results/tokenizer_encode_h200.json

What it does:
  1. reads tests/fixtures/tokenizer/corpus.jsonl (one JSON string per line; tools/build_tokenizer_corpus.py);
  2. encodes every line with HF tokenizers in both modes:
       parse-special: Tokenizer.from_file(tokenizer.json).encode(text, add_special_tokens=False)
       plain:         the same file with every added token marked "special": true and
                      tokenizer.encode_special_tokens = True, so every added-token spelling ("<｜User｜>",
                      "<｜begin▁of▁sentence｜>", ...) is plain text. Cross-checked against a second way (the file with
                      its added_tokens removed); the two must agree;
  3. compares HF's ids with the committed expected ids (tests/fixtures/tokenizer/expected_*.jsonl) — or writes
     them with --write-expected;
  4. runs `strata tokenize --model DIR --jsonl corpus.jsonl [--parse-special]` and compares with HF, printing PASS or
     FAIL per mode and the first mismatches (line, token position, ids and tokens around it, the text);
  5. times encode single-threaded (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false, set before tokenizers is
     imported): HF `encode` per line and `encode_batch` (noted separately), and `strata tokenize --bench`, and
     writes a JSON with both under --bench-out.

--also DIR (repeatable) checks parity on more tokenizer directories (e.g. the V4 test tokenizer that
`strata model init --tokenizer-from` writes), without expected files or timing.

Exit status: 0 when every comparison passed, 1 otherwise.
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"  # must precede the tokenizers import to bind its thread pool
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import datetime
import hashlib
import json
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "tokenizer")
EXPECTED_SPECIAL = "expected_parse_special.jsonl"  # one JSON array per corpus line
EXPECTED_PLAIN = "expected_plain.jsonl"  # one JSON array per corpus line, or null when equal to parse-special
EXPECTED_META = "expected_meta.json"


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_corpus(path):
    texts = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            value = json.loads(line)
            if not isinstance(value, str):
                raise SystemExit(f"{path} line {n}: expected a JSON string")
            texts.append(value)
    return texts


def hf_tokenizers(tokenizer_json):
    """(parse-special tokenizer, plain tokenizer, plain-by-removal tokenizer) from one tokenizer.json."""
    from tokenizers import Tokenizer

    special = Tokenizer.from_file(tokenizer_json)
    with open(tokenizer_json, encoding="utf-8") as f:
        spec = json.load(f)
    marked = json.loads(json.dumps(spec))
    for token in marked.get("added_tokens") or []:
        token["special"] = True
    plain = Tokenizer.from_str(json.dumps(marked))
    if not hasattr(plain, "encode_special_tokens"):
        raise SystemExit("this tokenizers version has no Tokenizer.encode_special_tokens (need >= 0.15)")
    plain.encode_special_tokens = True
    removed = json.loads(json.dumps(spec))
    removed["added_tokens"] = []
    plain_removed = Tokenizer.from_str(json.dumps(removed))
    return special, plain, plain_removed


def hf_ids(tok, texts):
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


def write_expected(special_ids, plain_ids, meta, folder=FIXTURES):
    """The expected-id files, compact JSON, one line per corpus line (plain: null where equal to parse-special)."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, EXPECTED_SPECIAL), "w", encoding="utf-8", newline="\n") as f:
        for ids in special_ids:
            f.write(json.dumps(ids, separators=(",", ":")) + "\n")
    with open(os.path.join(folder, EXPECTED_PLAIN), "w", encoding="utf-8", newline="\n") as f:
        for s, p in zip(special_ids, plain_ids):
            f.write(("null" if s == p else json.dumps(p, separators=(",", ":"))) + "\n")
    with open(os.path.join(folder, EXPECTED_META), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")


def read_expected(folder=FIXTURES):
    special, plain = [], []
    with open(os.path.join(folder, EXPECTED_SPECIAL), encoding="utf-8") as f:
        special = [json.loads(line) for line in f]
    with open(os.path.join(folder, EXPECTED_PLAIN), encoding="utf-8") as f:
        plain = [json.loads(line) for line in f]
    plain = [s if p is None else p for s, p in zip(special, plain)]
    return special, plain


def run_strata(strata, model_dir, corpus, parse_special):
    cmd = [strata, "tokenize", "--model", model_dir, "--jsonl", corpus] + (["--parse-special"] if parse_special else [])
    r = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8")
    if r.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
        return None
    return [json.loads(line) for line in r.stdout.splitlines()]


def compare(name, ours, ref, texts, tok=None, show=5):
    """Prints PASS/FAIL with the first mismatches; returns True on PASS."""
    if ours is None:
        print(f"FAIL {name}: no output")
        return False
    if len(ours) != len(ref):
        print(f"FAIL {name}: {len(ours)} lines of ids, expected {len(ref)}")
        return False
    bad = [i for i in range(len(ref)) if ours[i] != ref[i]]
    n_tokens = sum(len(x) for x in ref)
    if not bad:
        print(f"PASS {name}: {len(ref)}/{len(ref)} lines identical ({n_tokens} tokens)")
        return True
    print(f"FAIL {name}: {len(ref) - len(bad)}/{len(ref)} lines identical; first mismatches:")
    for i in bad[:show]:
        a, b = ours[i], ref[i]
        k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
        lo = max(0, k - 3)
        print(f"  line {i + 1}, token {k}: ours {a[lo:k + 5]} vs reference {b[lo:k + 5]}")
        if tok is not None:
            print(f"    reference tokens: {[tok.id_to_token(t) for t in b[lo:k + 5]]}")
            print(f"    ours:             {[tok.id_to_token(t) for t in a[lo:k + 5]]}")
        print(f"    text: {texts[i][:160]!r}{'...' if len(texts[i]) > 160 else ''}")
    return False


def time_median(fn, repeats):
    fn()  # warm-up (fills HF's BPE cache, as strata's bench does for its own)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def strata_bench(strata, model_dir, corpus, parse_special, repeats):
    cmd = [strata, "tokenize", "--model", model_dir, "--jsonl", corpus, "--bench", "--repeats", str(repeats)]
    if parse_special:
        cmd.append("--parse-special")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit():
    """The commit, "-dirty" when tracked files differ from it (scripts/provenance.sh: STRATA_COMMIT without .git)."""
    try:
        return subprocess.run(["bash", os.path.join(REPO, "scripts", "provenance.sh"), "--commit"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strata", default=os.path.join(REPO, "build", "strata"), help="the strata binary")
    ap.add_argument("--tokenizer-dir", default=os.path.join(REPO, ".deps", "tokenizer-deepseek_v3"),
                    help="directory with tokenizer.json + tokenizer_config.json (the one the expected ids are for)")
    ap.add_argument("--corpus", default=os.path.join(FIXTURES, "corpus.jsonl"))
    ap.add_argument("--write-expected", action="store_true", help="write HF's ids as the committed expected files")
    ap.add_argument("--also", action="append", default=[], metavar="DIR", help="more tokenizer dirs to check (parity only)")
    ap.add_argument("--bench-out", help="write the speed comparison JSON here (e.g. bench/results/tokenizer_encode_h200.json)")
    ap.add_argument("--repeats", type=int, default=5, help="timed passes for the speed comparison (default 5)")
    ap.add_argument("--commit", default=None, help="git commit to record in the bench JSON (default: git rev-parse HEAD)")
    a = ap.parse_args()

    import tokenizers

    tokenizer_json = os.path.join(a.tokenizer_dir, "tokenizer.json")
    texts = read_corpus(a.corpus)
    n_bytes = sum(len(t.encode("utf-8")) for t in texts)
    print(f"corpus: {len(texts)} texts, {n_bytes} bytes ({a.corpus}); tokenizers {tokenizers.__version__}")

    ok = True
    special_tok, plain_tok, removed_tok = hf_tokenizers(tokenizer_json)
    ref_special = hf_ids(special_tok, texts)
    ref_plain = hf_ids(plain_tok, texts)
    ok &= compare("HF plain mode, encode_special_tokens vs added_tokens removed", hf_ids(removed_tok, texts), ref_plain,
                  texts, special_tok)

    if a.write_expected:
        meta = {
            "producer": f"HF tokenizers {tokenizers.__version__} (tests/reference/tokenizer_parity.py --write-expected)",
            "tokenizer_json_sha256": sha256_file(tokenizer_json),
            "corpus_sha256": sha256_file(a.corpus),
            "texts": len(texts),
            "parse_special_tokens": sum(len(x) for x in ref_special),
            "plain_tokens": sum(len(x) for x in ref_plain),
        }
        write_expected(ref_special, ref_plain, meta)
        print(f"wrote {EXPECTED_SPECIAL}, {EXPECTED_PLAIN}, {EXPECTED_META} under {FIXTURES}")
    else:
        try:
            exp_special, exp_plain = read_expected()
            ok &= compare("committed expected ids (parse-special) vs HF here", exp_special, ref_special, texts, special_tok)
            ok &= compare("committed expected ids (plain) vs HF here", exp_plain, ref_plain, texts, special_tok)
        except FileNotFoundError as e:
            print(f"FAIL: no committed expected ids ({e}); run with --write-expected")
            ok = False

    model_dirs = [a.tokenizer_dir] + a.also
    for d in model_dirs:
        if d != a.tokenizer_dir:
            s_tok, p_tok, _ = hf_tokenizers(os.path.join(d, "tokenizer.json"))
            r_special, r_plain = hf_ids(s_tok, texts), hf_ids(p_tok, texts)
        else:
            s_tok, r_special, r_plain = special_tok, ref_special, ref_plain
        ok &= compare(f"strata vs HF, parse-special, {d}", run_strata(a.strata, d, a.corpus, True), r_special, texts, s_tok)
        ok &= compare(f"strata vs HF, plain, {d}", run_strata(a.strata, d, a.corpus, False), r_plain, texts, s_tok)

    if a.bench_out:
        hf_line, hf_line_all = time_median(lambda: [special_tok.encode(t, add_special_tokens=False) for t in texts], a.repeats)
        hf_batch, hf_batch_all = time_median(lambda: special_tok.encode_batch(texts, add_special_tokens=False), a.repeats)
        hf_plain_line, _ = time_median(lambda: [plain_tok.encode(t, add_special_tokens=False) for t in texts], a.repeats)
        st_special = strata_bench(a.strata, a.tokenizer_dir, a.corpus, True, a.repeats)
        st_plain = strata_bench(a.strata, a.tokenizer_dir, a.corpus, False, a.repeats)
        mb = n_bytes / 1e6
        report = {
            "benchmark": "tokenizer encode throughput, single thread",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": a.commit or git_commit(),
            "device": {"cpu": cpu_name(), "machine": platform.machine(), "python": platform.python_version()},
            "corpus": {"path": os.path.relpath(a.corpus, REPO), "texts": len(texts), "bytes": n_bytes,
                       "sha256": sha256_file(a.corpus)},
            "tokenizer": {"dir": a.tokenizer_dir, "sha256": sha256_file(tokenizer_json)},
            "hf_tokenizers": {
                "version": tokenizers.__version__,
                "env": {"RAYON_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"},
                "encode_per_text_parse_special_mb_per_s": mb / hf_line,
                "encode_per_text_plain_mb_per_s": mb / hf_plain_line,
                "encode_batch_parse_special_mb_per_s": mb / hf_batch,
                "seconds_per_text_all": hf_line_all,
                "seconds_batch_all": hf_batch_all,
            },
            "strata": {"parse_special": st_special, "plain": st_plain},
            "speedup_vs_hf_encode_per_text": {
                "parse_special": st_special["mb_per_s"] / (mb / hf_line),
                "plain": st_plain["mb_per_s"] / (mb / hf_plain_line),
            },
            "parity_passed": bool(ok),
        }
        os.makedirs(os.path.dirname(os.path.abspath(a.bench_out)), exist_ok=True)
        with open(a.bench_out, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        print(f"speed (MB/s, one thread): HF encode per text {mb / hf_line:.2f} (plain {mb / hf_plain_line:.2f}), "
              f"HF encode_batch {mb / hf_batch:.2f}; strata parse-special {st_special['mb_per_s']:.2f}, "
              f"plain {st_plain['mb_per_s']:.2f} -> {a.bench_out}")

    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
