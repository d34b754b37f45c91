#!/usr/bin/env python3
"""Check Strata against the demo model's training-side references (stdlib only; runs on the CPU machine).

  prompts   For corpus requests, `strata chat-template --pieces` must equal what render.py trained on (text and
            control pieces). Needs no model: run it whenever the chat encoding or the corpus changes.

  greedy    For every line of expected_greedy.jsonl (written by train.py from the export-exact fp32 model):
              1. `strata chat-template --model DIR --request R --ids` == prompt_ids (HF tokenizers in training
                 vs Strata's tokenizer and chat encoding),
              2. `strata generate --model DIR --prompt-ids ... --temperature 0` == completion_ids
                 (transformers' fp32 forward on the exported weights vs Strata's).
            Prints every mismatch, the accuracy the matching lines imply, and exits 1 on any mismatch.

  mtp       For every sequence of mtp_strata_check.json (written by train_mtp.py from the export-exact fp32 MTP
            layer), `strata model mtp-logits --model DIR --tokens ...` must give the same draft argmax on every row
            (rows whose expected top two are closer than the tolerance excepted) and, at the top ids and the probe
            ids, logits within --rtol of the row's largest |logit| (at least 1). Exits 1 on any mismatch.

usage:
  python3 tools/demo_model/check_strata.py prompts --strata build/strata --in CORPUS.jsonl [--limit N]
  python3 tools/demo_model/check_strata.py greedy --strata build/strata --model DIR --expected FILE [--limit N]
  python3 tools/demo_model/check_strata.py mtp --strata build/strata --model DIR --expected mtp_strata_check.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import render  # noqa: E402


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}): {r.stderr.decode(errors='replace')[:500]}")
    return r.stdout.decode()


def request_file(request, tmp):
    path = os.path.join(tmp, "request.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(request, f, ensure_ascii=False)
    return path


def check_prompts(args):
    renderer = render.Renderer(args.encoder, args.chat_reference)
    lines = render.read_jsonl(args.inp)[: args.limit or None]
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, line in enumerate(lines):
            mine = renderer.pieces(line["request"])[0]
            got = json.loads(run([args.strata, "chat-template", "--request", request_file(line["request"], tmp), "--pieces"]))
            theirs = [(p["text"], p["control"]) for p in got]
            if theirs != mine:
                bad += 1
                print(f"line {n}: strata pieces differ\n  strata: {theirs}\n  render: {mine}")
    print(f"prompts: {len(lines) - bad}/{len(lines)} identical")
    return bad == 0


def check_greedy(args):
    records = render.read_jsonl(args.expected)[: args.limit or None]
    prompt_bad = gen_bad = 0
    correct = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in records:
            ids = [int(x) for x in run([args.strata, "chat-template", "--model", args.model, "--request",
                                        request_file(r["request"], tmp), "--ids"]).strip().split(",")]
            if ids != r["prompt_ids"]:
                prompt_bad += 1
                first = next((i for i, (a, b) in enumerate(zip(ids, r["prompt_ids"])) if a != b), min(len(ids), len(r["prompt_ids"])))
                print(f"{r['id']}: prompt ids differ at {first}: strata {ids[first:first + 8]} training {r['prompt_ids'][first:first + 8]}")
                continue
            want = r["completion_ids"]
            out = run([args.strata, "generate", "--model", args.model, "--prompt-ids", ",".join(map(str, ids)),
                       "--max-tokens", str(len(want)), "--temperature", "0"]).strip()
            got = [int(x) for x in out.split(",")] if out else []
            if got != want:
                gen_bad += 1
                print(f"{r['id']}: generated {got} expected {want}")
                continue
            c = correct.setdefault(r["kind"], [0, 0])
            c[0] += bool(r["correct"])
            c[1] += 1
    summary = {k: f"{a}/{n}" for k, (a, n) in correct.items()}
    print(f"greedy: {len(records)} lines; prompt-id mismatches {prompt_bad}; generation mismatches {gen_bad}; "
          f"correct answers among identical lines: {summary}")
    return prompt_bad == 0 and gen_bad == 0


def check_mtp(args, rtol):
    with open(args.expected) as f:
        expected = json.load(f)
    probe = expected["probe_ids"]
    bad_rows = worst = 0.0
    rows_total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, seq in enumerate(expected["sequences"]):
            out = os.path.join(tmp, "mtp.json")
            run([args.strata, "model", "mtp-logits", "--model", args.model, "--tokens", ",".join(map(str, seq["tokens"])),
                 "--out", out])
            with open(out) as f:
                got = json.load(f)["mtp_logits"]
            if len(got) != seq["rows"]:
                print(f"sequence {n}: strata gave {len(got)} rows, expected {seq['rows']}")
                bad_rows += seq["rows"]
                continue
            for r, row in enumerate(got):
                scale = max(1.0, seq["row_max_abs"][r])
                ids = seq["top_ids"][r] + probe
                want = seq["top_logits"][r] + seq["probe_logits"][r]
                diff = max(abs(row[i] - w) for i, w in zip(ids, want)) / scale
                worst = max(worst, diff)
                arg = max(range(len(row)), key=row.__getitem__)
                tie = len(seq["top_logits"][r]) > 1 and seq["top_logits"][r][0] - seq["top_logits"][r][1] <= rtol * scale
                if diff > rtol or (arg != seq["argmax"][r] and not tie):
                    bad_rows += 1
                    print(f"sequence {n} row {r}: strata argmax {arg} expected {seq['argmax'][r]}; "
                          f"worst logit difference {diff:.3g} of the row's scale")
            rows_total += seq["rows"]
            del got
    print(f"mtp: {len(expected['sequences'])} sequences, {rows_total} draft rows; rows off {int(bad_rows)}; "
          f"worst logit difference {worst:.3g} of the row's scale (rtol {rtol})")
    return bad_rows == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["prompts", "greedy", "mtp"])
    ap.add_argument("--strata", default=os.path.join(render.REPO, "build", "strata"))
    ap.add_argument("--in", dest="inp", help="corpus JSONL (prompts)")
    ap.add_argument("--model", help="exported model folder (greedy, mtp)")
    ap.add_argument("--expected", help="expected_greedy.jsonl from train.py (greedy); mtp_strata_check.json from train_mtp.py (mtp)")
    ap.add_argument("--encoder", default=render.DEFAULT_ENCODER)
    ap.add_argument("--chat-reference", default=render.DEFAULT_CHAT_REFERENCE)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-3, help="mtp: logit tolerance relative to the row's scale")
    args = ap.parse_args()
    if args.command == "mtp":
        if not (args.model and args.expected):
            sys.exit("mtp needs --model and --expected")
        ok = check_mtp(args, args.rtol)
    elif args.command == "prompts":
        if not args.inp:
            sys.exit("prompts needs --in")
        ok = check_prompts(args)
    else:
        if not (args.model and args.expected):
            sys.exit("greedy needs --model and --expected")
        ok = check_greedy(args)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
