"""The demo model's CI eval set as `strata generate --input` requests, and replies read back for comparison.

Shared by bench/run_speculative_cpu.sh and tests/cli/speculative_demo.sh (stdlib only):
  python3 tools/demo_model/eval_requests.py OUT.jsonl [EVERY]   writes every EVERY-th request of
      models/demo/heldout_eval.jsonl (default 1: all), greedy, custom_id = the line's id.
  replies(path) (import): custom_id -> choices of a results file, tool call ids removed (they are random).
"""
import json
import sys


def write_requests(out_path, every=1, eval_path="models/demo/heldout_eval.jsonl"):
    with open(out_path, "w") as f:
        for i, line in enumerate(open(eval_path)):
            if i % every:
                continue
            d = json.loads(line)
            f.write(json.dumps(dict(d["request"], custom_id=d["id"], temperature=0)) + "\n")


def replies(path):
    got = {}
    for line in open(path):
        r = json.loads(line)
        choices = r["response"]["body"]["choices"]
        for c in choices:
            for t in c["message"].get("tool_calls") or []:
                t.pop("id", None)
        got[r["custom_id"]] = choices
    return got


if __name__ == "__main__":
    write_requests(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
