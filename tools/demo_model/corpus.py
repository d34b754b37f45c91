#!/usr/bin/env python3
"""Synthetic chat corpus for Strata's demo model (stdlib only, deterministic for a given --seed).

Every line is one training example: an OpenAI chat-completions request body and the assistant message that
should follow it.

    {"request": {...}, "reply": {"role": "assistant", ...}, "task": "add", "mode": "plain",
     "answer": 68, "item": [23, 45], "split": "train"}

("item": the operands, the (country, capital) pair, or (unit index, value) / the unit row for units.)

Tasks: addition and subtraction of 0-99 (subtraction never goes negative), multiplication of 0-12, capitals
from a fixed table, and unit facts from a fixed table. Modes: a plain answer ("68"), a JSON answer
('{"answer": 68}', asked for by response_format or in words), thinking (chat_template_kwargs.thinking: short
step-by-step reasoning_content, then the answer), a tool call (calculator / get_capital / convert_units, given
in `tools`), and the answer after a tool result (role "tool" message). A few plain examples are multi-turn.

Held-out split (so the held-out accuracy measures generalisation, not recall):
  * number pairs: a pair is held out when a hash of (operation, operands) falls below --heldout-frac; for + and
    x the operands are unordered (seeing 45 + 23 would give 23 + 45 away). No training line contains a held-out
    pair in any form: not as a question, not as a calculator call, not as a step of a reasoning_content;
  * phrasings: every task has training templates and held-out templates; held-out questions use only the
    latter (and held-out pairs). Facts (capitals, units) are necessarily seen in training: for them the split
    is by phrasing alone.

Outputs in --out: train.jsonl, heldout.jsonl (the same modes, held-out pairs and phrasings, for held-out loss),
heldout_eval.jsonl (the CI set: 200 plain-answer questions first, then json / thinking / tool_call /
tool_result checks; each line says what to expect), and corpus_stats.json.

usage: python3 tools/demo_model/corpus.py --out DIR [--seed 0] [--train-lines 200000]
"""
import argparse
import collections
import hashlib
import json
import os
import random

# ----------------------------------------------------------------------------------------------------------
# Fixed knowledge (the model can only answer what it was taught: these tables are the whole world)
# ----------------------------------------------------------------------------------------------------------

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("United Kingdom", "London"), ("Ireland", "Dublin"), ("Netherlands", "Amsterdam"),
    ("Belgium", "Brussels"), ("Switzerland", "Bern"), ("Austria", "Vienna"), ("Poland", "Warsaw"),
    ("Czechia", "Prague"), ("Hungary", "Budapest"), ("Greece", "Athens"), ("Sweden", "Stockholm"),
    ("Norway", "Oslo"), ("Denmark", "Copenhagen"), ("Finland", "Helsinki"), ("Iceland", "Reykjavik"),
    ("Russia", "Moscow"), ("Ukraine", "Kyiv"), ("Romania", "Bucharest"), ("Bulgaria", "Sofia"),
    ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Turkey", "Ankara"), ("Egypt", "Cairo"),
    ("Morocco", "Rabat"), ("Nigeria", "Abuja"), ("Kenya", "Nairobi"), ("Ethiopia", "Addis Ababa"),
    ("South Africa", "Pretoria"), ("Ghana", "Accra"), ("Senegal", "Dakar"), ("Israel", "Jerusalem"),
    ("Saudi Arabia", "Riyadh"), ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("India", "New Delhi"),
    ("Pakistan", "Islamabad"), ("Bangladesh", "Dhaka"), ("China", "Beijing"), ("Japan", "Tokyo"),
    ("South Korea", "Seoul"), ("Vietnam", "Hanoi"), ("Thailand", "Bangkok"), ("Indonesia", "Jakarta"),
    ("Philippines", "Manila"), ("Malaysia", "Kuala Lumpur"), ("Australia", "Canberra"),
    ("New Zealand", "Wellington"), ("Canada", "Ottawa"), ("United States", "Washington"),
    ("Mexico", "Mexico City"), ("Cuba", "Havana"), ("Brazil", "Brasilia"), ("Argentina", "Buenos Aires"),
    ("Chile", "Santiago"), ("Peru", "Lima"), ("Colombia", "Bogota"), ("Venezuela", "Caracas"),
]

# (larger unit with its article, larger unit plural, smaller unit singular, smaller unit plural, how many)
UNITS = [
    ("a kilometer", "kilometers", "meter", "meters", 1000),
    ("a meter", "meters", "centimeter", "centimeters", 100),
    ("a centimeter", "centimeters", "millimeter", "millimeters", 10),
    ("a mile", "miles", "foot", "feet", 5280),
    ("a yard", "yards", "foot", "feet", 3),
    ("a foot", "feet", "inch", "inches", 12),
    ("a kilogram", "kilograms", "gram", "grams", 1000),
    ("a pound", "pounds", "ounce", "ounces", 16),
    ("a tonne", "tonnes", "kilogram", "kilograms", 1000),
    ("a liter", "liters", "milliliter", "milliliters", 1000),
    ("a gallon", "gallons", "quart", "quarts", 4),
    ("a week", "weeks", "day", "days", 7),
    ("a day", "days", "hour", "hours", 24),
    ("an hour", "hours", "minute", "minutes", 60),
    ("a minute", "minutes", "second", "seconds", 60),
    ("a year", "years", "month", "months", 12),
    ("a decade", "decades", "year", "years", 10),
    ("a century", "centuries", "year", "years", 100),
    ("a kilobyte", "kilobytes", "byte", "bytes", 1024),
    ("a dozen", "dozens", "item", "items", 12),
]


def unit_name(article_unit):
    """'an hour' -> 'hour' (the singular unit, as tool arguments spell it)."""
    return article_unit.split(" ", 1)[1]


# ----------------------------------------------------------------------------------------------------------
# Phrasings: (training templates, held-out templates) per question kind
# ----------------------------------------------------------------------------------------------------------

TEMPLATES = {
    "add": (
        ["What is {a} + {b}?", "What is {a} plus {b}?", "Compute {a} + {b}.", "Calculate {a} plus {b}.",
         "{a} + {b} = ?", "Add {a} and {b}.", "What do you get when you add {a} and {b}?",
         "What is the sum of {a} and {b}?", "Please work out {a} + {b}.", "How much is {a} plus {b}?",
         "{a} plus {b} equals what?", "Find the sum of {a} and {b}.", "what's {a}+{b}"],
        ["Tell me what {a} + {b} is.", "If you add {b} to {a}, what do you get?", "Quick question: {a} plus {b}?",
         "Evaluate {a} + {b}."],
    ),
    "sub": (
        ["What is {a} - {b}?", "What is {a} minus {b}?", "Compute {a} - {b}.", "Calculate {a} minus {b}.",
         "{a} - {b} = ?", "Subtract {b} from {a}.", "What is {b} subtracted from {a}?",
         "What is the difference between {a} and {b}?", "Please work out {a} - {b}.", "How much is {a} minus {b}?",
         "{a} minus {b} equals what?", "Take {b} away from {a}.", "what's {a}-{b}"],
        ["Tell me what {a} - {b} is.", "If you take {b} from {a}, what is left?", "Quick question: {a} minus {b}?",
         "Evaluate {a} - {b}."],
    ),
    "mul": (
        ["What is {a} × {b}?", "What is {a} times {b}?", "What is {a} * {b}?", "Compute {a} * {b}.",
         "Calculate {a} times {b}.", "{a} × {b} = ?", "Multiply {a} by {b}.", "What is {a} multiplied by {b}?",
         "What is the product of {a} and {b}?", "How much is {a} times {b}?", "{a} times {b} equals what?",
         "Please work out {a} × {b}.", "what's {a}*{b}"],
        ["Tell me what {a} * {b} is.", "If you multiply {a} by {b}, what do you get?", "Quick question: {a} times {b}?",
         "Evaluate {a} × {b}."],
    ),
    "capital": (
        ["What is the capital of {c}?", "What's the capital of {c}?", "Name the capital of {c}.",
         "Which city is the capital of {c}?", "The capital of {c} is which city?", "Capital of {c}?",
         "Tell me the capital of {c}.", "What city is the capital of {c}?", "Do you know the capital of {c}?",
         "{c}: what is its capital?"],
        ["Which city serves as the capital of {c}?", "I need the capital of {c}.", "Quick question: capital of {c}?",
         "What is the capital city of {c}?"],
    ),
    "unit": (
        ["How many {small} are in {big}?", "How many {small} are there in {big}?", "How many {small} make {big}?",
         "{Big} has how many {small}?", "{Big} is how many {small}?", "What is the number of {small} in {big}?",
         "How many {small} in {big}?", "Tell me how many {small} are in {big}."],
        ["Quick question: how many {small} are in {big}?", "I need the number of {small} in {big}.",
         "Exactly how many {small} does {big} contain?", "If I have {big}, how many {small} is that?"],
    ),
    # Unit conversions are only asked with tools (the model copies convert_units' result).
    "convert": (
        ["Convert {v} {bigs} to {small}.", "How many {small} are in {v} {bigs}?", "What is {v} {bigs} in {small}?",
         "Use the tool to convert {v} {bigs} into {small}."],
        ["Quick question: {v} {bigs} in {small}?", "Express {v} {bigs} in {small}."],
    ),
}

SYSTEM_PROMPTS = [None, None, None, "You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
                  "You are Strata's demo model.", "Answer with just the result."]
JSON_INSTRUCTIONS = ['Answer in JSON with the key "answer".', 'Reply with a JSON object {"answer": ...}.',
                     "Respond in JSON."]
TOOL_NUDGES = ["", "", " Use a tool.", " Please use the available tools."]

OPS = {"add": "+", "sub": "-", "mul": "*"}

TOOLS = {
    "calculator": {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression and return the result.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string", "description": "The expression, for example \"12 * 7\"."}},
            "required": ["expression"]}}},
    "get_capital": {"type": "function", "function": {
        "name": "get_capital", "description": "Return the capital city of a country.",
        "parameters": {"type": "object", "properties": {
            "country": {"type": "string", "description": "The country's English name."}},
            "required": ["country"]}}},
    "convert_units": {"type": "function", "function": {
        "name": "convert_units", "description": "Convert a quantity from one unit to another.",
        "parameters": {"type": "object", "properties": {
            "value": {"type": "number", "description": "The quantity to convert."},
            "from_unit": {"type": "string", "description": "The unit of the quantity, singular."},
            "to_unit": {"type": "string", "description": "The unit to convert to, singular."}},
            "required": ["value", "from_unit", "to_unit"]}}},
}

# ----------------------------------------------------------------------------------------------------------
# The split rule
# ----------------------------------------------------------------------------------------------------------


def pair_key(op, a, b):
    """Operands as the split sees them: + and x are commutative, so their pairs are unordered."""
    return (op, min(a, b), max(a, b)) if op in ("add", "mul") else (op, a, b)


def is_heldout_pair(op, a, b, frac):
    """Deterministic, seed-independent: the same pairs are held out on every machine and every run."""
    key = "%s:%d:%d" % pair_key(op, a, b)
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 10000
    return bucket < frac * 10000


def operand_ranges(op, with_tool):
    """The calculator handles larger numbers: there the model only copies the tool's result."""
    if op == "mul":
        return (0, 99) if with_tool else (0, 12)
    return (0, 999) if with_tool else (0, 99)


def arithmetic(op, a, b):
    return {"add": a + b, "sub": a - b, "mul": a * b}[op]


# ----------------------------------------------------------------------------------------------------------
# Reasoning (thinking mode): short, and built from steps that generalise to unseen pairs
# ----------------------------------------------------------------------------------------------------------


def arithmetic_steps(op, a, b):
    """The (op, x, y) steps a reasoning_content spells out. Every step is itself an arithmetic fact, so a step
    that is a held-out pair would leak it: the sampler rejects such examples for the training split."""
    if op == "mul":
        if b <= 1:
            return [("mul", a, b)]
        return [("mul", a, b - 1), ("add", a * (b - 1), a)]
    tens, ones = b - b % 10, b % 10
    if tens == 0 or ones == 0:
        return [(op, a, b)]
    return [(op, a, tens), (op, arithmetic(op, a, tens), ones)]


def arithmetic_reasoning(op, a, b):
    sym = {"add": "+", "sub": "-", "mul": "×"}[op]
    result = arithmetic(op, a, b)
    if op == "mul" and b == 0:
        body = f"Anything times 0 is 0, so {a} × 0 = 0."
    elif op == "mul" and b == 1:
        body = f"Anything times 1 is itself, so {a} × 1 = {a}."
    elif op == "mul":
        p = a * (b - 1)
        body = f"{a} × {b} is {a} × {b - 1} plus one more {a}. {a} × {b - 1} = {p}. {p} + {a} = {result}."
    else:
        steps = arithmetic_steps(op, a, b)
        if len(steps) == 1:
            body = f"{a} {sym} {b} = {result}."
        else:
            (_, _, tens), (_, mid, ones) = steps
            verb = "add" if op == "add" else "subtract"
            body = f"Split {b} into {tens} and {ones}. {a} {sym} {tens} = {mid}. {mid} {sym} {ones} = {result}."
            body = f"First {verb} the tens, then the ones. " + body
    return f"{body} The answer is {result}."


def fact_reasoning(task, item):
    if task == "capital":
        country, capital = item
        return f"The question asks for the capital of {country}. The capital of {country} is {capital}."
    big, _, _, smalls, factor = item
    return f"The question asks how many {smalls} are in {big}. There are {factor} {smalls} in {big}."


# ----------------------------------------------------------------------------------------------------------
# Building requests and replies
# ----------------------------------------------------------------------------------------------------------


class Sampler:
    """Draws examples of one split. All randomness goes through self.rng, so a seed fixes the output."""

    def __init__(self, split, seed, heldout_frac):
        self.split = split
        self.heldout = split != "train"
        self.rng = random.Random(f"{seed}:{split}")
        self.frac = heldout_frac

    # -- pieces ----------------------------------------------------------------------------------------
    def template(self, kind):
        train, held = TEMPLATES[kind]
        return self.rng.choice(held if self.heldout else train)

    def pair(self, op, with_tool=False, thinking=False):
        """Operands whose split matches ours; for training also every reasoning step must be a training pair."""
        lo, hi = operand_ranges(op, with_tool)
        while True:
            a, b = self.rng.randint(lo, hi), self.rng.randint(lo, hi)
            if op == "sub" and a < b:
                a, b = b, a
            if is_heldout_pair(op, a, b, self.frac) != self.heldout:
                continue
            if thinking and not self.heldout and any(is_heldout_pair(*s, self.frac) for s in arithmetic_steps(op, a, b)):
                continue
            return a, b

    def call_id(self):
        return "call_" + "".join(self.rng.choice("0123456789abcdef") for _ in range(8))

    def base_messages(self, system=None):
        system = self.rng.choice(SYSTEM_PROMPTS) if system is None else system
        return [{"role": "system", "content": system}] if system else []

    # -- questions -------------------------------------------------------------------------------------
    def question(self, task, with_tool=False, thinking=False):
        """(question text, answer value, reasoning text, item) for one task."""
        if task in OPS:
            a, b = self.pair(task, with_tool, thinking)
            text = self.template(task).format(a=a, b=b)
            return text, arithmetic(task, a, b), arithmetic_reasoning(task, a, b), (a, b)
        if task == "capital":
            item = self.rng.choice(CAPITALS)
            return self.template("capital").format(c=item[0]), item[1], fact_reasoning(task, item), item
        item = self.rng.choice(UNITS)
        big, _, _, smalls, factor = item
        t = self.template("unit")
        text = t.format(small=smalls, big=big, Big=big[0].upper() + big[1:])
        return text, factor, fact_reasoning(task, item), item

    # -- modes -----------------------------------------------------------------------------------------
    def plain(self, task):
        text, answer, _, item = self.question(task)
        messages = self.base_messages()
        if self.rng.random() < 0.08:  # a short history: the model must answer the last question
            prev_task = self.rng.choice(["add", "sub", "mul", "capital", "unit"])
            prev_text, prev_answer, _, _ = self.question(prev_task)
            messages += [{"role": "user", "content": prev_text}, {"role": "assistant", "content": str(prev_answer)}]
        messages.append({"role": "user", "content": text})
        return {"messages": messages}, {"role": "assistant", "content": str(answer)}, answer, item

    def json_answer(self, task):
        text, answer, _, item = self.question(task)
        request = {"messages": self.base_messages()}
        if self.rng.random() < 0.6:
            request["response_format"] = {"type": "json_object"}
            if self.rng.random() < 0.3:
                text += " " + self.rng.choice(JSON_INSTRUCTIONS)
        else:
            text += " " + self.rng.choice(JSON_INSTRUCTIONS)
        request["messages"].append({"role": "user", "content": text})
        reply = {"role": "assistant", "content": json.dumps({"answer": answer}, ensure_ascii=False)}
        return request, reply, answer, item

    def thinking(self, task):
        text, answer, reasoning, item = self.question(task, thinking=True)
        request = {"messages": self.base_messages() + [{"role": "user", "content": text}],
                   "chat_template_kwargs": {"thinking": True}}
        reply = {"role": "assistant", "reasoning_content": reasoning, "content": str(answer)}
        return request, reply, answer, item

    def tool_turns(self, task):
        """The two examples of one tool conversation: the call, and the answer after the tool's result."""
        if task in OPS:
            a, b = self.pair(task, with_tool=True)
            text = self.template(task).format(a=a, b=b)
            name, args, result = "calculator", {"expression": f"{a} {OPS[task]} {b}"}, arithmetic(task, a, b)
            item = (a, b)
        elif task == "capital":
            country, capital = self.rng.choice(CAPITALS)
            text = self.template("capital").format(c=country)
            name, args, result = "get_capital", {"country": country}, capital
            item = (country, capital)
        else:
            big, bigs, small, smalls, factor, v = self.conversion()
            item = (UNITS.index((big, bigs, small, smalls, factor)), v)
            text = self.template("convert").format(v=v, bigs=bigs, small=smalls)
            name, args, result = "convert_units", {"value": v, "from_unit": unit_name(big), "to_unit": small}, v * factor
        text += self.rng.choice(TOOL_NUDGES)
        others = [t for t in TOOLS if t != name]
        chosen = [name] + self.rng.sample(others, self.rng.randint(0, len(others)))
        self.rng.shuffle(chosen)
        request = {"messages": self.base_messages() + [{"role": "user", "content": text}],
                   "tools": [TOOLS[t] for t in chosen]}
        call = {"id": self.call_id(), "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
        first_reply = {"role": "assistant", "content": "", "tool_calls": [call]}
        followup = {"messages": request["messages"] + [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": str(result)}], "tools": request["tools"]}
        final_reply = {"role": "assistant", "content": str(result)}
        return (request, first_reply, {"name": name, "arguments": args}, item), (followup, final_reply, result, item)

    def conversion(self):
        """A unit and a value 2-9 to convert; (unit index, value) pairs are split like number pairs."""
        while True:
            i, v = self.rng.randrange(len(UNITS)), self.rng.randint(2, 9)
            if is_heldout_pair("convert", i, v, self.frac) == self.heldout:
                return UNITS[i] + (v,)

    # -- one line ----------------------------------------------------------------------------------------
    def lines(self, task, mode):
        """One or two corpus lines (a tool conversation gives two)."""
        def line(request, reply, answer, item, line_mode):
            return {"request": request, "reply": reply, "task": task, "mode": line_mode, "answer": answer,
                    "item": list(item), "split": self.split}
        if mode == "plain":
            return [line(*self.plain(task), "plain")]
        if mode == "json":
            return [line(*self.json_answer(task), "json")]
        if mode == "thinking":
            return [line(*self.thinking(task), "thinking")]
        first, second = self.tool_turns(task)
        return [line(*first, "tool_call"), line(*second, "tool_result")]


TASK_WEIGHTS = {"add": 0.28, "sub": 0.22, "mul": 0.12, "capital": 0.22, "unit": 0.16}
MODE_WEIGHTS = {"plain": 0.55, "json": 0.17, "thinking": 0.18, "tool": 0.10}  # tool: two lines each


def draw(rng, weights):
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def generate_split(sampler, n_lines):
    out = []
    while len(out) < n_lines:
        out += sampler.lines(draw(sampler.rng, TASK_WEIGHTS), draw(sampler.rng, MODE_WEIGHTS))
    return out[:n_lines]


# ----------------------------------------------------------------------------------------------------------
# The evaluation set
# ----------------------------------------------------------------------------------------------------------

EVAL_ANSWER_MIX = {"add": 60, "sub": 50, "mul": 10, "capital": 50, "unit": 30}  # 200 plain questions
EVAL_OTHER = {"json": 10, "thinking": 10, "tool": 10}  # tool gives a tool_call and a tool_result check each


def eval_lines(seed, frac):
    """Held-out checks with what each must produce. Plain questions are unique (no repeated prompt)."""
    sampler = Sampler("eval", seed, frac)
    seen, out = set(), []

    def add_unique(kind, task, request, expect, answer, max_tokens, item):
        key = json.dumps(request, sort_keys=True)
        if key in seen:
            return False
        seen.add(key)
        request = dict(request, max_tokens=max_tokens)
        out.append({"id": f"{kind}-{len(out):03d}", "kind": kind, "task": task, "request": request,
                    "answer": answer, "item": list(item), "expect": expect})
        return True

    for task, count in EVAL_ANSWER_MIX.items():
        done = 0
        while done < count:
            text, answer, _, item = sampler.question(task)
            request = {"messages": sampler.base_messages() + [{"role": "user", "content": text}]}
            done += add_unique("answer", task, request, {"content": str(answer)}, answer, 16, item)
    tasks = list(EVAL_ANSWER_MIX)
    for i in range(EVAL_OTHER["json"]):
        task = tasks[i % len(tasks)]
        text, answer, _, item = sampler.question(task)
        request = {"messages": [{"role": "user", "content": text}], "response_format": {"type": "json_object"}}
        add_unique("json", task, request, {"content_json": {"answer": answer}}, answer, 24, item)
    for i in range(EVAL_OTHER["thinking"]):
        task = tasks[i % len(tasks)]
        request, reply, answer, item = sampler.thinking(task)
        add_unique("thinking", task, request, {"content": str(answer), "reasoning_nonempty": True}, answer, 128, item)
    for i in range(EVAL_OTHER["tool"]):
        task = tasks[i % len(tasks)]
        (req1, _, call, item), (req2, _, result, _) = sampler.tool_turns(task)
        add_unique("tool_call", task, req1, {"tool_call": call}, call, 128, item)
        add_unique("tool_result", task, req2, {"content": str(result)}, result, 16, item)
    return out


# ----------------------------------------------------------------------------------------------------------


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def stats(rows):
    return {"lines": len(rows),
            "by_task": dict(collections.Counter(r["task"] for r in rows)),
            "by_mode": dict(collections.Counter(r.get("mode", r.get("kind")) for r in rows))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-lines", type=int, default=200000)
    ap.add_argument("--heldout-lines", type=int, default=2000)
    ap.add_argument("--heldout-frac", type=float, default=0.10, help="fraction of number pairs held out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    train = generate_split(Sampler("train", args.seed, args.heldout_frac), args.train_lines)
    heldout = generate_split(Sampler("heldout", args.seed, args.heldout_frac), args.heldout_lines)
    evals = eval_lines(args.seed, args.heldout_frac)
    write_jsonl(os.path.join(args.out, "train.jsonl"), train)
    write_jsonl(os.path.join(args.out, "heldout.jsonl"), heldout)
    write_jsonl(os.path.join(args.out, "heldout_eval.jsonl"), evals)
    summary = {"seed": args.seed, "heldout_frac": args.heldout_frac, "train": stats(train),
               "heldout": stats(heldout), "eval": stats(evals)}
    with open(os.path.join(args.out, "corpus_stats.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
