#!/usr/bin/env bash
# Fails when a number that README.md or docs/*.md quote from a results file differs from that file (issue 23).
#
# The convention. A paragraph (a run of non-blank lines, a table included) that quotes numbers from a results file
# carries a claims block, an HTML comment (invisible when rendered, greppable in the source):
#
#   <!-- claims bench/results/serve_cuda_small_h200_c256.json
#     18,818 = results.output_token_throughput
#     12.54 = results.tpot_ms.median
#     1.87 = cuda_flash4_h200_bf16.json:decode.ms_per_token
#     18.6 = transformers_peer_flash4_h200.json:decode[batch=1,context=4096].ms_per_step_median / cuda_flash4_h200_bf16.json:decode.ms_per_token
#     0 = ../../tests/gpu/results/h200_gpu_checks.txt:/^PASS: (\d+) failing/
#   -->
#
# Each line is `SHOWN = EXPR`:
# - SHOWN is the number exactly as the paragraph prints it (thousands commas, a trailing `k` for thousands,
#   `e`-notation allowed). It must occur in the paragraph as a whole number (so the block cannot drift from the
#   text), and the value of EXPR rounded to SHOWN's precision must equal it.
# - EXPR is terms joined by ` * `, ` / `, ` + ` or ` - ` (spaces around; left to right, no precedence); a term is
#   a number or `[FILE:]PATH`. FILE is relative to the block's file's folder (default: the block's file). PATH
#   into JSON: keys joined by `.` (a key may hold spaces), `[3]` indexes a
#   list, `[batch=1,context=4096]` picks the list element with those fields. PATH `/REGEX/` on any file: the first
#   capture group of the first match (multi-line mode); `/REGEX/max` or `/REGEX/min`: over every group of every
#   match (the worst row of a text table).
# A paragraph whose numbers are not from a file says so: `<!-- claims: none (why) -->`.
#
# Every paragraph of README.md and docs/*.md outside code blocks that names a results file (a path with `results/`,
# a file that exists in bench/results/ or a `_tail.json` shorthand) needs a claims block; headings are exempt. A
# number quoted without a results file named beside it is not seen by this check: name the file.
# Runs in well under a second (python3 only), early in scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import json, math, os, re, sys

ROOT = os.getcwd()
NUM = r"[0-9][0-9,]*(?:\.[0-9]+)?(?:e-?[0-9]+)?k?"
errors = []
checked = 0
cache = {}

def load(path):
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            cache[path] = (text, json.loads(text) if path.endswith(".json") else None)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})")
    return cache[path]

def parse_number(shown):
    s = shown.replace(",", "")
    mult = 1.0
    if s.endswith("k"):
        s, mult = s[:-1], 1000.0
    mant = s.split("e")[0]
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    exp = int(s.split("e")[1]) if "e" in s else 0
    return float(s) * mult, mult, decimals, exp

def json_path(doc, path, where):
    node = doc
    for seg in re.findall(r"[^.\[\]]+|\[[^\]]*\]", path):
        if seg.startswith("["):
            inner = seg[1:-1]
            if not isinstance(node, list):
                raise ValueError(f"{where}: {seg} on a non-list")
            if re.fullmatch(r"-?[0-9]+", inner):
                node = node[int(inner)]
                continue
            conds = [c.split("=", 1) for c in inner.split(",")]
            hits = [e for e in node if isinstance(e, dict)
                    and all(str(e.get(k.strip())) == v.strip() for k, v in conds)]
            if len(hits) != 1:
                raise ValueError(f"{where}: {seg} matches {len(hits)} elements, not 1")
            node = hits[0]
        else:
            if not isinstance(node, dict) or seg not in node:
                raise ValueError(f"{where}: no key '{seg}'")
            node = node[seg]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise ValueError(f"{where}: {path} is not a number ({node!r})")
    return float(node)

def term_value(term, default_file, where):
    if re.fullmatch(r"-?[0-9.]+(?:e-?[0-9]+)?", term):
        return float(term)
    file, path = default_file, term
    m = re.match(r"([^:/][^:]*\.(?:json|jsonl|txt|log)):(.*)$", term)
    if m:
        file = os.path.normpath(os.path.join(os.path.dirname(default_file), m.group(1)))
        path = m.group(2)
    if not os.path.exists(file):
        raise ValueError(f"{where}: {os.path.relpath(file, ROOT)} does not exist")
    text, doc = load(file)
    rx = re.fullmatch(r"/(.+)/(max|min)?", path, re.S)
    if rx:
        pattern, agg = rx.groups()
        if agg:
            # Every capture group of every match (a table's columns), reduced.
            found = [float(g) for m in re.finditer(pattern, text, re.M) for g in m.groups()]
            if not found:
                raise ValueError(f"{where}: /{pattern}/ not found in {os.path.relpath(file, ROOT)}")
            return max(found) if agg == "max" else min(found)
        rm = re.search(pattern, text, re.M)
        if not rm:
            raise ValueError(f"{where}: /{pattern}/ not found in {os.path.relpath(file, ROOT)}")
        return float(rm.group(1))
    if doc is None:
        raise ValueError(f"{where}: {os.path.relpath(file, ROOT)} is not JSON; use /REGEX/")
    return json_path(doc, path, f"{where} ({os.path.relpath(file, ROOT)})")

def evaluate(expr, default_file, where):
    # Split on operators that stand between spaces, so paths and regexes keep their own characters.
    parts = re.split(r"\s+([-+*/])\s+", expr.strip())
    value = term_value(parts[0], default_file, where)
    for op, term in zip(parts[1::2], parts[2::2]):
        v = term_value(term, default_file, where)
        value = {"*": value * v, "/": value / v if v else math.nan, "+": value + v, "-": value - v}[op]
    return value

def matches(shown, value):
    want, mult, decimals, exp = parse_number(shown)
    if math.isnan(value) or math.isinf(value):
        return False
    # Round to the precision shown: half a unit in its last printed digit.
    unit = 10.0 ** (exp - decimals) * mult
    return abs(value - want) <= 0.5 * unit * (1 + 1e-9)

def paragraphs(lines):
    """Yields (first line number, text) of each run of non-blank lines outside fenced code blocks."""
    block, start, fence = [], 0, False
    for i, line in enumerate(lines + [""], 1):
        if line.startswith("```"):
            fence = not fence
            if block:
                yield start, "\n".join(block)
            block = []
            continue
        if fence:
            continue
        if line.strip() == "":
            if block:
                yield start, "\n".join(block)
            block = []
        else:
            if not block:
                start = i
            block.append(line)

results_names = set(os.listdir("bench/results")) if os.path.isdir("bench/results") else set()
names_results = re.compile(r"[\w./{}-]*results/[\w./{},*-]+|(?<![\w.])_[\w]+\.json|[\w-]+\.json")

def check_doc(doc, strict):
    global checked
    lines = open(doc, encoding="utf-8").read().split("\n")
    for start, para in paragraphs(lines):
        blocks = re.findall(r"<!--\s*claims(.*?)-->", para, re.S)
        visible = re.sub(r"<!--.*?-->", "", para, flags=re.S)
        # A heading names its section's file and date, not a measurement: the paragraphs under it are checked.
        if strict and not blocks and not re.fullmatch(r"#+ [^\n]*", para):
            cites = [n for n in names_results.findall(visible)
                     if "results/" in n or n.startswith("_") or os.path.basename(n) in results_names]
            if cites:
                errors.append(f"{doc}:{start}: names {cites[0]} but has no <!-- claims … --> block")
        for body in blocks:
            body = body.strip()
            if body.startswith(":") and body[1:].strip().startswith("none"):
                continue
            head, *rows = [r.strip() for r in body.split("\n")]
            default_file = os.path.join(ROOT, head) if head else ""
            for row in rows:
                if not row:
                    continue
                where = f"{doc}:{start}"
                m = re.fullmatch(rf"({NUM})\s*=\s*(.+)", row)
                if not m:
                    errors.append(f"{where}: claims line not `SHOWN = EXPR`: {row}")
                    continue
                shown, expr = m.groups()
                if not re.search(rf"(?<![\w.,]){re.escape(shown)}(?![\w]|[.,][0-9])", visible):
                    errors.append(f"{where}: {shown} is not in the paragraph's text")
                    continue
                try:
                    value = evaluate(expr, default_file, where)
                except (ValueError, IndexError, ZeroDivisionError, OSError) as e:
                    errors.append(str(e))
                    continue
                checked += 1
                if not matches(shown, value):
                    errors.append(f"{where}: text says {shown}, {expr.strip()} is {value:.6g}")

docs = sys.argv[1:] or ["README.md"] + sorted(
    os.path.join("docs", d) for d in os.listdir("docs") if d.endswith(".md"))
for d in docs:
    check_doc(d, strict=True)
for e in errors:
    print("check_claims:", e, file=sys.stderr)
if errors:
    print(f"check_claims: FAIL ({len(errors)} problem(s), {checked} number(s) checked)", file=sys.stderr)
    sys.exit(1)
print(f"check_claims: {checked} quoted number(s) match their files")
PY
