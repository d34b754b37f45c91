#!/usr/bin/env python3
"""The free-phrasing evaluation set (issue 19): freeform_eval.txt (written by hand) -> freeform_eval.jsonl.

    python3 tools/demo_model/freeform_eval.py [--out models/demo/freeform_eval.jsonl] [--check]

Each line of freeform_eval.txt is a question as a person might type it; this script adds what the reply must hold,
in the record format of corpus.py's heldout_eval.jsonl (what strata_demo_eval scores): arithmetic is computed here,
capitals and unit facts come from corpus.py's tables (the model's whole world), the tool schemas are corpus.py's
TOOLS (the ones the model was trained with). Nothing here comes from corpus.py's phrasing generator. Every line is
checked: the operands are spelled in the text (digits or words, read by this file's own reader), the country or the
units are named. --check compares the output with the committed file instead of writing it (test_demo_model.py).
"""
import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402  (tables and tool schemas only)

SOURCE = os.path.join(HERE, "freeform_eval.txt")
DEFAULT_OUT = os.path.join(HERE, "..", "..", "models", "demo", "freeform_eval.jsonl")
MAX_TOKENS = {"answer": 16, "json": 24, "thinking": 160, "tool_call": 128, "tool_result": 16}

_SMALL = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
         "seventeen eighteen nineteen".split()
_DECADES = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def spellings(n):
    """Regexes that read n in a text: its digits, or its English words (any case, hyphen or space, "and" or not)."""
    out = [rf"(?<![\d.]){n}(?![\d])"]
    if n < 20:
        words = _SMALL[n]
    elif n < 100:
        words = _DECADES[n // 10 - 2] + (r"[- ]" + _SMALL[n % 10] if n % 10 else "")
    elif n < 1000:
        rest = n % 100
        words = _SMALL[n // 100] + " hundred" + ((r" (?:and )?" + spellings(rest)[1][2:]) if rest else "")
    else:
        return out
    out.append(r"\b" + words + (r"(?![- ](?:one|two|three|four|five|six|seven|eight|nine)\b)" if n >= 20 and n % 10 == 0
                                else ""))
    if n == 2:
        out.append(r"\btwice\b")
    return out


def spelled_in(n, text):
    return any(re.search(p, text, re.IGNORECASE) for p in spellings(n))


def tools_for(index):
    """All three tools, in an order that varies from check to check (the corpus shuffles them too)."""
    names = list(corpus.TOOLS)
    k = index % len(names)
    return [corpus.TOOLS[n] for n in names[k:] + names[:k]]


def units_by_name():
    return {corpus.unit_name(u[0]): u for u in corpus.UNITS}


def read_source(path=SOURCE):
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split(" | ")]
            if len(parts) not in (4, 5):
                raise ValueError(f"{path}:{n}: expected 'kind | task | item | text [| system]': {line!r}")
            rows.append((n, *parts[:4], parts[4] if len(parts) == 5 else None))
    return rows


def build(rows):
    capitals, units = dict(corpus.CAPITALS), units_by_name()
    out, counts = [], {}

    def add(kind, task, request, expect, answer, item, source_line):
        counts[kind] = counts.get(kind, 0) + 1
        request = dict(request, max_tokens=MAX_TOKENS[kind])
        out.append({"id": f"free-{kind}-{len(out):03d}", "kind": kind, "task": task, "request": request,
                    "answer": answer, "item": item, "expect": expect, "source_line": source_line})

    for n, kind, task, item_text, text, system in rows:
        where = f"freeform_eval.txt:{n}"
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        if task in corpus.OPS:
            a, b = (int(x) for x in item_text.split())
            for v in (a, b):
                if not spelled_in(v, text):
                    raise ValueError(f"{where}: {v} is not spelled in {text!r}")
            if task == "sub" and a < b:
                raise ValueError(f"{where}: {a} - {b} is negative")
            answer = {"add": a + b, "sub": a - b, "mul": a * b}[task]
            item = [a, b]
            call = {"name": "calculator", "arguments": {"expression": f"{a} {corpus.OPS[task]} {b}"}}
        elif task == "capital":
            answer, item = capitals[item_text], [item_text, capitals[item_text]]
            if item_text.lower() not in text.lower():
                raise ValueError(f"{where}: {item_text} is not named in {text!r}")
            call = {"name": "get_capital", "arguments": {"country": item_text}}
        elif task == "unit":
            unit = units[item_text]
            answer, item = unit[4], list(unit)
            if item_text not in text.lower() or unit[3] not in text.lower():
                raise ValueError(f"{where}: {item_text} or {unit[3]} is not named in {text!r}")
            call = None
        elif task == "convert":
            value, name = item_text.split()
            value, unit = int(value), units[name]
            if not spelled_in(value, text) or name not in text.lower() or unit[3] not in text.lower():
                raise ValueError(f"{where}: {value}, {name} or {unit[3]} is not in {text!r}")
            answer, item = value * unit[4], [corpus.UNITS.index(unit), value]
            call = {"name": "convert_units", "arguments": {"value": value, "from_unit": name, "to_unit": unit[2]}}
        else:
            raise ValueError(f"{where}: unknown task {task!r}")
        record_task = "unit" if task == "convert" else task
        if task == "convert" and kind != "tool":
            raise ValueError(f"{where}: conversions are asked with tools only")
        if kind == "answer":
            add("answer", record_task, {"messages": messages}, {"content": str(answer)}, answer, item, n)
        elif kind in ("json", "json_rf"):
            request = {"messages": messages}
            if kind == "json_rf":
                request["response_format"] = {"type": "json_object"}
            elif "json" not in text.lower():
                raise ValueError(f"{where}: a JSON check without response_format must ask for JSON in words")
            add("json", record_task, request, {"content_json": {"answer": answer}}, answer, item, n)
        elif kind == "thinking":
            request = {"messages": messages, "chat_template_kwargs": {"thinking": True}}
            add("thinking", record_task, request, {"content": str(answer), "reasoning_nonempty": True}, answer, item, n)
        elif kind == "tool":
            if call is None:
                raise ValueError(f"{where}: unit facts have no tool; use task convert")
            tools = tools_for(counts.get("tool_call", 0))
            call_id = f"call_ff{n:06d}"
            add("tool_call", record_task, {"messages": messages, "tools": tools}, {"tool_call": call}, call, item, n)
            followup = {"messages": messages + [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call_id, "type": "function",
                     "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}]},
                {"role": "tool", "tool_call_id": call_id, "content": str(answer)}], "tools": tools}
            add("tool_result", record_task, followup, {"content": str(answer)}, answer, item, n)
        else:
            raise ValueError(f"{where}: unknown kind {kind!r}")
    # strata_demo_eval and the reports expect the answer checks first, like heldout_eval.jsonl.
    order = {"answer": 0, "json": 1, "thinking": 2, "tool_call": 3, "tool_result": 3}
    out.sort(key=lambda r: order[r["kind"]])
    for i, r in enumerate(out):
        r["id"] = f"free-{r['kind']}-{i:03d}"
    return out


def dumps(rows):
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args()
    text = dumps(build(read_source()))
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            if f.read() != text:
                sys.exit(f"{args.out} is not what freeform_eval.txt gives: run tools/demo_model/freeform_eval.py")
        print(f"{args.out}: up to date")
        return
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    kinds = {}
    for r in build(read_source()):
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    print(f"wrote {args.out}: {sum(kinds.values())} checks {kinds}")


if __name__ == "__main__":
    main()
