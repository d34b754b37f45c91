#!/usr/bin/env python3
"""The demo model's reduced draft vocabulary (docs/mtp.md, "A reduced draft vocabulary"): the token ids of
training conversations, most frequent first, written as models/demo/draft_vocab.json ({"ids": [...]}).

Each of LINES training-split lines of corpus.py (the committed model's corpus options do not matter here: any
training line has the kinds of replies the model writes) is rendered with its reply as the last assistant turn by
`strata chat-template` and encoded by `strata tokenize --parse-special`; every id seen is counted, and the model's
EOS ids are always kept. Usage (repo root, after scripts/setup.sh):
    python3 tools/demo_model/draft_vocab.py [--lines 3000] [--strata build/strata] [--out models/demo/draft_vocab.json]
"""
import argparse, collections, json, os, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

ap = argparse.ArgumentParser()
ap.add_argument("--lines", type=int, default=3000)
ap.add_argument("--strata", default="build/strata")
ap.add_argument("--model", default="models/demo")
ap.add_argument("--out", default="models/demo/draft_vocab.json")
args = ap.parse_args()

work = tempfile.mkdtemp()
subprocess.run([sys.executable, "tools/demo_model/corpus.py", "--out", work, "--train-lines", str(args.lines),
                "--heldout-lines", "1"], check=True, stdout=subprocess.DEVNULL)
lines = [json.loads(l) for l in open(f"{work}/train.jsonl")]


def render(i):
    body = dict(lines[i]["request"])
    body["messages"] = body["messages"] + [lines[i]["reply"]]
    path = f"{work}/req{i}.json"
    json.dump(body, open(path, "w"))
    return subprocess.run([args.strata, "chat-template", "--request", path], check=True, capture_output=True,
                          text=True).stdout


with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
    texts = list(pool.map(render, range(len(lines))))
with open(f"{work}/texts.jsonl", "w") as f:
    for t in texts:
        f.write(json.dumps(t) + "\n")
out = subprocess.run([args.strata, "tokenize", "--model", args.model, "--parse-special", "--jsonl",
                      f"{work}/texts.jsonl"], check=True, capture_output=True, text=True).stdout
counts = collections.Counter()
for line in out.splitlines():
    counts.update(json.loads(line))
cfg = json.load(open(f"{args.model}/config.json"))
eos = cfg["eos_token_id"] if isinstance(cfg["eos_token_id"], list) else [cfg["eos_token_id"]]
ids = [i for i, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
ids += [e for e in eos if e not in counts]
json.dump({"note": f"token ids of {len(lines)} training conversations of tools/demo_model/corpus.py, most frequent "
                   "first, plus the EOS ids (tools/demo_model/draft_vocab.py)", "ids": ids}, open(args.out, "w"))
print(f"draft_vocab: {len(ids)} ids from {sum(counts.values())} tokens of {len(lines)} conversations -> {args.out}")
