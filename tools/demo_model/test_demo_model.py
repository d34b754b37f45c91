#!/usr/bin/env python3
"""Stdlib tests of the demo-model tools: python3 tools/demo_model/test_demo_model.py [-v]

What can be checked without torch: the corpus (determinism, the split rule, no leaks), the rendering (every
line renders, splits exactly, parses back; the same prompts as `strata chat-template`), the tokenizer files,
the official tensor list and name mapping (against the committed transformers fixture), the config keys, and
that Strata loads a checkpoint laid out exactly as train.py exports it (FP8 tied embedding with block scales,
no head.weight, I32 tid2eid, official names). Tests needing .deps/ files or a strata binary skip without them
(STRATA_BIN picks the binary; default build/strata).
"""
import array
import collections
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402
import freeform_eval  # noqa: E402
import make_tokenizer  # noqa: E402
import model_config as mc  # noqa: E402
import render  # noqa: E402

REPO = render.REPO
V3_DIR = make_tokenizer.DEFAULT_V3
STRATA = os.environ.get("STRATA_BIN", os.path.join(REPO, "build", "strata"))


def strata_has(command):
    if not os.path.exists(STRATA):
        return False
    r = subprocess.run([STRATA, command, "--help"], capture_output=True)
    return r.returncode == 0


def small_corpus(seed=0, n=3000):
    return {
        "train": corpus.generate_split(corpus.Sampler("train", seed, 0.1), n),
        "heldout": corpus.generate_split(corpus.Sampler("heldout", seed, 0.1), 600),
        "eval": corpus.eval_lines(seed, 0.1),
    }


CORPUS = small_corpus()


def question_of(line):
    return next(m["content"] for m in line["request"]["messages"] if m["role"] == "user")


def template_regex(template, anchored=True):
    """A template as a regex over questions (placeholders match anything)."""
    parts = re.split(r"\{[A-Za-z]+\}", template)
    return re.compile(("^" if anchored else "") + "(.+)".join(re.escape(p) for p in parts))


class CorpusTest(unittest.TestCase):
    def test_deterministic(self):
        again = small_corpus()
        self.assertEqual(json.dumps(CORPUS, sort_keys=True), json.dumps(again, sort_keys=True))
        self.assertNotEqual(json.dumps(CORPUS["train"][:50]), json.dumps(small_corpus(seed=1)["train"][:50]))

    def test_number_pairs_split(self):
        for split, lines in CORPUS.items():
            for line in lines:
                if line["task"] in corpus.OPS:
                    a, b = line["item"]
                    self.assertEqual(corpus.is_heldout_pair(line["task"], a, b, 0.1), split != "train", line)

    def test_reasoning_never_leaks_heldout_pairs(self):
        for line in CORPUS["train"]:
            if line["mode"] == "thinking" and line["task"] in corpus.OPS:
                for step in corpus.arithmetic_steps(line["task"], *line["item"]):
                    self.assertFalse(corpus.is_heldout_pair(*step, 0.1), (line, step))

    def test_phrasings_split(self):
        """By the bookkeeping: training lines use training phrasings only, held-out and eval lines held-out ones.
        By the text: no training question contains a held-out core, opener or suffix."""
        for split, lines in CORPUS.items():
            for line in lines:
                self.assertEqual(corpus.is_heldout_phrasing(*line["phrasing"], 0.2), split != "train", line)
        held_cores = [template_regex(c.lower(), anchored=False) for cores in corpus.CORES.values() for c, _ in cores[1]]
        held_openers = [o.lower().strip() for o in corpus.OPENERS[1]]
        held_suffixes = [s.lower().strip() for s in corpus.SUFFIXES[1]]
        for line in CORPUS["train"]:
            for m in line["request"]["messages"]:
                if m["role"] != "user":
                    continue
                q = m["content"].lower()
                self.assertFalse([r.pattern for r in held_cores if r.search(q)], q)
                self.assertFalse([o for o in held_openers if q.startswith(o)], q)
                self.assertFalse([s for s in held_suffixes if s in q], q)

    def test_heldout_parts_unseen(self):
        """Over all training parts, not just the sampled lines: no training opener starts with a held-out opener, no
        training text around a question (suffixes, cores, nudges, instructions) contains a held-out suffix, and no
        part is both. Enough parts that an unseen one is an ordinary event."""
        train_text = [t.lower() for t in corpus.SUFFIXES[0] + corpus.EXTRA_SUFFIXES + corpus.OPENERS[0] + corpus.TOOL_NUDGES +
                      corpus.JSON_INSTRUCTIONS + [c for cores in corpus.CORES.values() for c, _ in cores[0]] +
                      corpus.EXTRA_JSON_INSTRUCTIONS + corpus.JSON_LEADS + corpus.THINK_INSTRUCTIONS +
                      corpus.EXTRA_TOOL_NUDGES + [c for cores in corpus.EXTRA_CORES.values() for c, _ in cores]]
        for o in corpus.OPENERS[1]:
            self.assertNotIn(o, corpus.OPENERS[0])
            self.assertFalse([t for t in corpus.OPENERS[0] if t.lower().startswith(o.lower().strip())], o)
        for suffix in corpus.SUFFIXES[1]:
            self.assertNotIn(suffix, corpus.SUFFIXES[0])
            self.assertNotIn(suffix, corpus.EXTRA_SUFFIXES)
            self.assertFalse([t for t in train_text if suffix.lower().strip() in t], suffix)
        for kind, (train, held) in corpus.CORES.items():
            self.assertFalse({c for c, _ in train} & {c for c, _ in held}, kind)
            self.assertFalse({c for c, _ in corpus.EXTRA_CORES.get(kind, [])} & {c for c, _ in train + held}, kind)
            self.assertGreaterEqual(len(train), 18 if kind == "convert" else 29, kind)
            self.assertGreaterEqual(len(held), 3 if kind == "convert" else 6, kind)
        self.assertGreaterEqual(len(set(corpus.OPENERS[0])), 100)
        self.assertGreaterEqual(len(set(corpus.SUFFIXES[0])), 80)
        self.assertGreaterEqual(len(corpus.OPENERS[1]), 8)
        self.assertGreaterEqual(len(corpus.SUFFIXES[1]), 8)

    def test_tool_calls_copy_the_question(self):
        """The tool fits the task (conversions call convert_units) and every argument is spelled in the question."""
        calls = [l for l in CORPUS["train"] + CORPUS["eval"] if l.get("mode", l.get("kind")) == "tool_call"]
        self.assertGreater(sum(l["task"] == "unit" for l in calls), 0.15 * len(calls))
        for line in calls:
            q = question_of(line)
            call = line["reply"]["tool_calls"][0]["function"] if "reply" in line else None
            name, args = (call["name"], json.loads(call["arguments"])) if call else (
                line["expect"]["tool_call"]["name"], line["expect"]["tool_call"]["arguments"])
            if line["task"] in corpus.OPS:
                self.assertEqual(name, "calculator", line)
                a, b = line["item"]
                self.assertEqual(args, {"expression": f"{a} {corpus.OPS[line['task']]} {b}"})
                self.assertRegex(q, rf"\b{a}\b.*\b{b}\b|\b{b}\b.*\b{a}\b")
            elif line["task"] == "capital":
                self.assertEqual(name, "get_capital", line)
                self.assertIn(args["country"], q)
            else:
                self.assertEqual(name, "convert_units", line)
                unit = corpus.UNITS[line["item"][0]]
                self.assertEqual(args, {"value": line["item"][1], "from_unit": corpus.unit_name(unit[0]),
                                        "to_unit": unit[2]})
                self.assertIn(f"{args['value']} {unit[1]}", q.lower())
                self.assertIn(unit[3], q.lower())

    def test_phrasing_variety(self):
        train_q = {question_of(l) for l in CORPUS["train"] if l["mode"] == "plain"}
        self.assertGreater(len(train_q), 0.9 * sum(l["mode"] == "plain" for l in CORPUS["train"]))
        reasons = {l["held_out_by"] for l in CORPUS["eval"] if l["kind"] == "answer"}
        self.assertEqual(reasons, {"core", "opener", "suffix", "combination"})

    def test_answers_are_right(self):
        for line in CORPUS["train"] + CORPUS["eval"]:
            if line["task"] in corpus.OPS and line.get("mode") != "tool_call" and line.get("kind") != "tool_call":
                self.assertEqual(line["answer"], corpus.arithmetic(line["task"], *line["item"]))
            if line["task"] == "capital" and line.get("mode", line.get("kind")) in ("plain", "answer"):
                self.assertEqual(dict(corpus.CAPITALS)[line["item"][0]], line["answer"])

    def test_eval_set(self):
        kinds = [l["kind"] for l in CORPUS["eval"]]
        self.assertEqual(kinds[:200], ["answer"] * 200)
        self.assertEqual(len({json.dumps(l["request"], sort_keys=True) for l in CORPUS["eval"]}), len(kinds))
        for kind in ("json", "thinking", "tool_call", "tool_result"):
            self.assertGreaterEqual(kinds.count(kind), 5, kind)


class HeldOutTextTest(unittest.TestCase):
    """Held out by text, not only by phrasing tuple: the sealed set shares no normalised user text with training
    or the CI set and no addition / subtraction pair with the CI set; train.py never reads it."""

    def test_normalise(self):
        self.assertEqual(corpus.normalise("  Which city is\tthe Capital of PERU?  Thank you!"),
                         "which city is the capital of peru? thank you!")

    def test_sealed_set(self):
        train_texts = corpus.training_texts(CORPUS["train"])
        ci_texts = corpus.training_texts(CORPUS["eval"])
        ci_pairs = corpus.sealed_excluded_pairs(CORPUS["eval"])
        sealed = corpus.eval_lines(0, 0.1, 0.2, "sealed", train_texts | ci_texts, ci_pairs)
        self.assertEqual([l["kind"] for l in sealed], [l["kind"] for l in CORPUS["eval"]])
        for line in sealed:
            self.assertTrue(line["id"].startswith("sealed-"), line["id"])
            for t in corpus.user_texts(line["request"]):
                self.assertNotIn(t, train_texts, line)
                self.assertNotIn(t, ci_texts, line)
            if line["task"] in corpus.OPS:
                self.assertNotIn(corpus.pair_key(line["task"], *line["item"]), ci_pairs, line)
                self.assertTrue(corpus.is_heldout_pair(line["task"], *line["item"], 0.1), line)

    def test_committed_sets_are_apart(self):
        path = os.path.join(REPO, "models", "demo", "heldout_eval_sealed.jsonl")
        if not os.path.exists(path):
            self.skipTest("no models/demo/heldout_eval_sealed.jsonl")
        with open(path) as f:
            sealed = [json.loads(l) for l in f]
        with open(os.path.join(REPO, "models", "demo", "heldout_eval.jsonl")) as f:
            ci = [json.loads(l) for l in f]
        self.assertEqual(json.dumps(ci, sort_keys=True), json.dumps(CORPUS["eval"], sort_keys=True))
        ci_texts = corpus.training_texts(ci)
        ci_pairs = corpus.sealed_excluded_pairs(ci)
        self.assertTrue(ci_pairs)
        for line in sealed:
            self.assertFalse(set(corpus.user_texts(line["request"])) & ci_texts, line)
            if line["task"] in corpus.OPS:
                self.assertNotIn(corpus.pair_key(line["task"], *line["item"]), ci_pairs, line)

    def test_training_never_reads_the_sealed_set(self):
        for name in ("train.py", "greedy_eval.py", "run_on_gpu.sh", "train_mtp.py", "run_mtp_on_gpu.sh"):
            with open(os.path.join(HERE, name)) as f:
                self.assertNotIn("sealed", f.read(), name)


class ResumedCorpusTest(unittest.TestCase):
    """The training split of a resumed run (corpus.py --train-seed / --task-weights / --suffix-none) keeps the
    held-out rules: training pairs and phrasings only, no held-out part in its text, right answers; and these
    options leave the held-out lines and the evaluation set alone."""

    @classmethod
    def setUpClass(cls):
        weights = corpus.parse_task_weights("add=0.28,sub=0.30,mul=0.16,capital=0.14,unit=0.12")
        cls.lines = corpus.generate_split(corpus.Sampler("train", 1, 0.1, 0.2, suffix_none=0.25, extra_suffixes=0.5),
                                          3000, weights)

    def test_split_rules(self):
        held_suffixes = [s.lower().strip() for s in corpus.SUFFIXES[1]]
        held_openers = [o.lower().strip() for o in corpus.OPENERS[1]]
        held_cores = [template_regex(c.lower(), anchored=False) for cores in corpus.CORES.values() for c, _ in cores[1]]
        for line in self.lines:
            self.assertFalse(corpus.is_heldout_phrasing(*line["phrasing"], 0.2), line)
            if line["task"] in corpus.OPS:
                self.assertFalse(corpus.is_heldout_pair(line["task"], *line["item"], 0.1), line)
                if line["mode"] != "tool_call":
                    self.assertEqual(line["answer"], corpus.arithmetic(line["task"], *line["item"]))
                if line["mode"] == "thinking":
                    for step in corpus.arithmetic_steps(line["task"], *line["item"]):
                        self.assertFalse(corpus.is_heldout_pair(*step, 0.1), (line, step))
            for m in line["request"]["messages"]:
                if m["role"] == "user":
                    q = m["content"].lower()
                    self.assertFalse([x for x in held_suffixes if x in q], q)
                    self.assertFalse([o for o in held_openers if q.startswith(o)], q)
                    self.assertFalse([r.pattern for r in held_cores if r.search(q)], q)

    def test_mix_and_untouched_eval(self):
        plain = [l for l in self.lines if l["mode"] == "plain"]
        share = lambda lines, task: sum(l["task"] == task for l in lines) / len(lines)  # noqa: E731
        self.assertGreater(share(plain, "mul"), 0.12)  # 0.10 by default
        self.assertLess(share(plain, "capital"), 0.17)  # 0.19 by default
        with_suffix = sum(l["phrasing"][4] != "" for l in plain) / len(plain)
        self.assertGreater(with_suffix, 0.68)  # 0.60 by default
        extra = sum(l["phrasing"][4] in corpus.EXTRA_SUFFIXES for l in plain) / len(plain)
        self.assertGreater(extra, 0.3)  # about half of the suffixed ones
        self.assertGreaterEqual(len(set(corpus.EXTRA_SUFFIXES)), 650)
        self.assertFalse(set(corpus.EXTRA_SUFFIXES) & set(corpus.SUFFIXES[0]))
        self.assertNotEqual(self.lines[0], CORPUS["train"][0])
        self.assertEqual(json.dumps(corpus.eval_lines(0, 0.1), sort_keys=True),
                         json.dumps(CORPUS["eval"], sort_keys=True))
        with self.assertRaises(ValueError):
            corpus.parse_task_weights("add=1,sub=1")


class FreePhrasingCorpusTest(unittest.TestCase):
    """corpus.py --free-phrasing (issue 19): reworded cores, numbers as words, country names in any case, case and
    punctuation noise, more JSON / thinking / tool instructions, in training lines only; the held-out rules hold, the
    answers, reasoning steps and tool arguments stay right, and the held-out lines and evaluation sets do not move."""

    @classmethod
    def setUpClass(cls):
        cls.lines = corpus.generate_split(corpus.Sampler("train", 3, 0.1, 0.2, free_phrasing=0.5), 4000)

    def test_number_words(self):
        self.assertEqual(corpus.number_words(23), "twenty-three")
        self.assertEqual(corpus.number_words(45, hyphen=False), "forty five")
        self.assertEqual(corpus.number_words(312), "three hundred and twelve")
        self.assertEqual(corpus.number_words(700, and_=False), "seven hundred")
        for n in range(1000):
            for hyphen in (True, False):
                for and_ in (True, False):
                    w = corpus.number_words(n, hyphen, and_)
                    self.assertEqual(corpus.parse_number_words(w.upper()), n, w)
                    self.assertTrue(freeform_eval.spelled_in(n, w), w)  # the eval set's own reader agrees

    def test_families_drawn(self):
        families = collections.Counter(f for l in self.lines for f in l.get("free", {}).get("families", []))
        for f in ("core", "words", "country_case", "case", "punctuation", "json_words", "think_words", "tool_words"):
            self.assertGreater(families[f], 10, (f, families))
        free = sum("free" in l for l in self.lines) / len(self.lines)
        self.assertTrue(0.4 < free < 0.6, free)

    def test_split_rules_and_answers(self):
        held_suffixes = [s.lower().strip() for s in corpus.SUFFIXES[1]]
        held_openers = [o.lower().strip() for o in corpus.OPENERS[1]]
        held_cores = [template_regex(c.lower(), anchored=False) for cores in corpus.CORES.values() for c, _ in cores[1]]
        for line in self.lines:
            self.assertFalse(corpus.is_heldout_phrasing(*line["phrasing"], 0.2), line)
            for m in line["request"]["messages"]:
                if m["role"] == "user":
                    q = m["content"].lower()
                    self.assertFalse([x for x in held_suffixes if x in q], q)
                    self.assertFalse([o for o in held_openers if q.startswith(o)], q)
                    self.assertFalse([r.pattern for r in held_cores if r.search(q)], q)
            if line["task"] in corpus.OPS:
                a, b = line["item"]
                self.assertFalse(corpus.is_heldout_pair(line["task"], a, b, 0.1), line)
                if line["mode"] != "tool_call":
                    self.assertEqual(line["answer"], corpus.arithmetic(line["task"], a, b))
                if line["mode"] == "thinking":
                    for step in corpus.arithmetic_steps(line["task"], a, b):
                        self.assertFalse(corpus.is_heldout_pair(*step, 0.1), (line, step))
            for words, n in line.get("free", {}).get("numbers", []):
                self.assertEqual(corpus.parse_number_words(words), n, line)
                last = [m["content"] for m in line["request"]["messages"] if m["role"] == "user"][-1]
                self.assertIn(words.lower(), " ".join(last.lower().split()), line)

    def test_thinking_states_the_digits(self):
        """A question with numbers as words: the reasoning first says them in digits, then the usual steps."""
        seen = 0
        for line in self.lines:
            if line["mode"] == "thinking" and line.get("free", {}).get("numbers"):
                reasoning = line["reply"]["reasoning_content"]
                for words, n in line["free"]["numbers"]:
                    self.assertIn(f"{words.lower()} is {n}", reasoning)
                a, b = line["item"]
                self.assertTrue(reasoning.endswith(corpus.arithmetic_reasoning(line["task"], a, b)), reasoning)
                self.assertTrue(reasoning.endswith(f"The answer is {line['answer']}."), reasoning)
                seen += 1
        self.assertGreater(seen, 20)

    def test_tool_calls_copy_the_question(self):
        for line in self.lines:
            if line["mode"] != "tool_call":
                continue
            q = " ".join(question_of(line).lower().split())  # spacing noise may double a space
            args = json.loads(line["reply"]["tool_calls"][0]["function"]["arguments"])
            words = {n: w.lower() for w, n in line.get("free", {}).get("numbers", [])}
            if line["task"] in corpus.OPS:
                a, b = line["item"]
                self.assertEqual(args, {"expression": f"{a} {corpus.OPS[line['task']]} {b}"})
                for n in (a, b):
                    self.assertTrue(re.search(rf"\b{n}\b", q) or words.get(n, "\0") in q, (n, q))
            elif line["task"] == "capital":
                self.assertEqual(args["country"], line["item"][0])
                self.assertIn(args["country"].lower(), q)
            else:
                v = line["item"][1]
                self.assertEqual(args["value"], v)
                self.assertTrue(str(v) in q or words.get(v, "\0") in q, q)

    def test_eval_sets_and_heldout_untouched(self):
        a = corpus.generate_split(corpus.Sampler("heldout", 0, 0.1, 0.2), 300)
        b = corpus.generate_split(corpus.Sampler("heldout", 0, 0.1, 0.2, free_phrasing=0.5), 300)
        self.assertEqual(a, b)
        self.assertFalse(any("free" in l for l in b))
        self.assertEqual(json.dumps(corpus.eval_lines(0, 0.1), sort_keys=True),
                         json.dumps(CORPUS["eval"], sort_keys=True))
        # off by default: the training split is the one earlier runs regenerate
        self.assertEqual(corpus.generate_split(corpus.Sampler("train", 0, 0.1), 3000), CORPUS["train"])


def loose(text):
    """Case, punctuation and spacing do not make a text new."""
    return " ".join(re.sub(r"[?.!,:;\"]", " ", text.casefold()).split())


def skeleton_regexes():
    """Every text corpus.py can compose, as regexes over loose() texts: any opener (or JSON lead-in), any core
    (training, held-out or free-phrasing), the numbers in digits or words, any country or unit name, then any run of
    suffixes, instructions and nudges. Case, punctuation and spacing noise are what loose() removes."""
    ones = "|".join(corpus._ONES + corpus._TENS[2:] + ["hundred", "and"])
    num = rf"(?:\d+|(?:{ones})(?:[- ](?:{ones}))*)"
    country = "|".join(re.escape(c.casefold()) for c, _ in corpus.CAPITALS)
    unit_words = {w for u in corpus.UNITS for w in (u[0], u[1], u[2], u[3], corpus.unit_name(u[0]))}
    unit = "(?:" + "|".join(re.escape(w) for w in sorted(unit_words, key=len, reverse=True)) + ")"
    fill = {"a": num, "b": num, "v": num, "c": f"(?:{country})", "small": unit, "big": unit, "bigs": unit, "one": unit}

    def alt(parts):
        parts = sorted({loose(p) for p in parts} - {""}, key=len, reverse=True)
        return "(?:" + "|".join(re.escape(p) for p in parts) + ")"
    openers, leads = alt(corpus.OPENERS[0] + corpus.OPENERS[1]), alt(corpus.JSON_LEADS)
    tails = alt(corpus.SUFFIXES[0] + corpus.SUFFIXES[1] + corpus.EXTRA_SUFFIXES + corpus.JSON_INSTRUCTIONS
                + corpus.EXTRA_JSON_INSTRUCTIONS + corpus.THINK_INSTRUCTIONS + corpus.TOOL_NUDGES
                + corpus.EXTRA_TOOL_NUDGES + ["pls", "plz", "thx", "ty", ":)"])
    cores = [c for train, held in corpus.CORES.values() for c, _ in train + held]
    cores += [c for extra in corpus.EXTRA_CORES.values() for c, _ in extra]
    out = []
    for core in cores:
        pieces = re.split(r"(\{[A-Za-z]+\})", loose(core.replace("{Big}", "{big}")))
        body = "".join(fill[p[1:-1]] if p.startswith("{") else re.escape(p) for p in pieces)
        out.append((core, re.compile(rf"^(?:{leads} )?(?:{openers} )?{body}(?: {tails})*$")))
    return out


FREEFORM = os.path.join(REPO, "models", "demo", "freeform_eval.jsonl")


class FreeformEvalTest(unittest.TestCase):
    """The free-phrasing set (models/demo/freeform_eval.jsonl from tools/demo_model/freeform_eval.txt, written by hand):
    up to date, every task and kind, and none of its texts is one corpus.py composes or draws."""

    @classmethod
    def setUpClass(cls):
        cls.rows = freeform_eval.build(freeform_eval.read_source())
        cls.texts = {r["id"]: next(m["content"] for m in r["request"]["messages"] if m["role"] == "user")
                     for r in cls.rows}

    def test_committed_file_is_up_to_date(self):
        with open(FREEFORM, encoding="utf-8") as f:
            self.assertEqual(f.read(), freeform_eval.dumps(self.rows))

    def test_coverage(self):
        kinds = collections.Counter(r["kind"] for r in self.rows)
        self.assertGreaterEqual(kinds["answer"], 150)
        for kind in ("json", "thinking", "tool_call", "tool_result"):
            self.assertGreaterEqual(kinds[kind], 10, kind)
        tasks = collections.Counter(r["task"] for r in self.rows if r["kind"] == "answer")
        self.assertEqual(set(tasks), set(corpus.TASK_WEIGHTS))
        self.assertEqual(len({r["id"] for r in self.rows}), len(self.rows))
        arithmetic = [r for r in self.rows if r["task"] in corpus.OPS and r["kind"] != "tool_result"]
        in_words = [r for r in arithmetic if not all(re.search(rf"(?<!\d){n}(?!\d)", self.texts[r["id"]])
                                                     for n in r["item"])]
        self.assertGreater(len(in_words), 0.4 * len(arithmetic))
        capitals = [r for r in self.rows if r["task"] == "capital"]
        self.assertGreater(sum(r["item"][0] not in self.texts[r["id"]] for r in capitals), 0.6 * len(capitals))
        with_rf = sum("response_format" in r["request"] for r in self.rows if r["kind"] == "json")
        self.assertTrue(0 < with_rf < kinds["json"])

    def test_no_text_is_a_template(self):
        regexes = skeleton_regexes()
        for rid, text in self.texts.items():
            self.assertFalse([core for core, r in regexes if r.match(loose(text))], (rid, text))

    def test_disjoint_from_generated_training(self):
        """Training splits of three seeds, free phrasing on and off: no user text equals one of the set (loose())."""
        ours = {loose(t) for t in self.texts.values()}
        for seed, free in ((0, 0.0), (1, 0.5), (2, 1.0)):
            lines = corpus.generate_split(corpus.Sampler("train", seed, 0.1, 0.2, free_phrasing=free), 20000)
            generated = {loose(m["content"]) for l in lines for m in l["request"]["messages"] if m["role"] == "user"}
            self.assertFalse(ours & generated, (seed, free))


@unittest.skipUnless(os.path.exists(render.DEFAULT_ENCODER), "no reference encoder in .deps/reference")
class RenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.renderer = render.Renderer()

    def test_selftest(self):
        summary, examples = render.selftest(self.renderer, CORPUS["train"][:1500] + CORPUS["eval"])
        self.assertEqual(set(examples), {"plain", "json", "thinking", "tool_call", "tool_result", "answer"})

    def test_completion_shapes(self):
        by_mode = {}
        for line in CORPUS["train"]:
            by_mode.setdefault(line["mode"], line)
        eos, dsml = "<｜end▁of▁sentence｜>", "｜DSML｜"
        _, c = self.renderer.pieces(by_mode["plain"]["request"], by_mode["plain"]["reply"])
        self.assertEqual(c, [(str(by_mode["plain"]["answer"]), False), (eos, True)])
        _, c = self.renderer.pieces(by_mode["thinking"]["request"], by_mode["thinking"]["reply"])
        self.assertEqual(c[1], ("</think>", True))
        _, c = self.renderer.pieces(by_mode["tool_call"]["request"], by_mode["tool_call"]["reply"])
        self.assertEqual(c[0], ("\n\n<", False))
        self.assertEqual(c[1], (dsml, True))
        self.assertEqual(c[-1], (eos, True))

    def test_thinking_always_closes(self):
        """Every thinking completion: non-empty reasoning, one </think>, then the answer and EOS (nothing else)."""
        lines = [l for l in CORPUS["train"] if l["mode"] == "thinking"]
        self.assertGreater(len(lines), 300)
        for line in lines:
            _, c = self.renderer.pieces(line["request"], line["reply"])
            self.assertEqual([p for p in c if p[1]], [("</think>", True), ("<｜end▁of▁sentence｜>", True)], line)
            self.assertTrue(c[0][0].strip() and not c[0][1], line)
            self.assertEqual(c[-2:], [(str(line["answer"]), False), ("<｜end▁of▁sentence｜>", True)], line)

    def test_control_text_is_refused(self):
        request = {"messages": [{"role": "user", "content": "say <think> please"}]}
        with self.assertRaises(ValueError):
            self.renderer.pieces(request)

    @unittest.skipUnless(strata_has("chat-template"), "no strata binary with chat-template")
    def test_same_prompts_as_strata(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            for line in CORPUS["eval"][::8] + CORPUS["train"][:40]:
                with open(path, "w") as f:
                    json.dump(line["request"], f, ensure_ascii=False)
                got = json.loads(subprocess.run([STRATA, "chat-template", "--request", path, "--pieces"],
                                                capture_output=True, check=True).stdout)
                self.assertEqual([(p["text"], p["control"]) for p in got], self.renderer.pieces(line["request"])[0])


class NamesTest(unittest.TestCase):
    def test_fixture_names_and_shapes(self):
        """The official list, renamed as save_pretrained writes it, is exactly the a_hc4 fixture's file."""
        fixture = os.path.join(REPO, "tests", "fixtures", "a_hc4")
        with open(os.path.join(fixture, "config.json")) as f:
            cfg = json.load(f)
        header = read_safetensors_header(os.path.join(fixture, "model.safetensors"))
        ours = {mc.saved_name(n): shape for n, shape, _ in mc.official_tensors(cfg)}
        self.assertEqual(set(ours), set(header))
        for name, shape in ours.items():
            self.assertEqual(header[name]["shape"], shape, name)

    def test_state_dict_names(self):
        cases = {
            "layers.1.attn.indexer.compressor.wkv.weight": "model.layers.1.self_attn.compressor.indexer.kv_proj.weight",
            "layers.1.attn.indexer.weights_proj.weight":
                "model.layers.1.self_attn.compressor.indexer.scorer.weights_proj.weight",
            "layers.1.attn.compressor.norm.weight": "model.layers.1.self_attn.compressor.kv_norm.weight",
            "layers.0.attn.kv_norm.weight": "model.layers.0.self_attn.kv_norm.weight",
            "layers.0.hc_ffn_fn": "model.layers.0.ffn_hc.fn",
            "layers.0.ffn.gate.bias": "model.layers.0.mlp.gate.e_score_correction_bias",
            "layers.0.ffn.shared_experts.w3.weight": "model.layers.0.mlp.shared_experts.up_proj.weight",
            "hc_head_scale": "model.hc_head.hc_scale",
            "embed.weight": "model.embed_tokens.weight",
            "head.weight": "lm_head.weight",
        }
        for official, hf in cases.items():
            self.assertEqual(mc.state_dict_name(official), hf)
        self.assertEqual(mc.routed_expert_slot("layers.3.ffn.experts.7.w2.weight"), (3, 7, "w2"))
        self.assertIsNone(mc.routed_expert_slot("layers.3.ffn.shared_experts.w2.weight"))

    def test_budget(self):
        cfg = mc.demo_config()
        self.assertLess(mc.checkpoint_bytes(cfg, "fp8") / 1e6 + 4.4, 40.0)
        self.assertEqual(cfg["layer_types"], [mc.SWA, mc.CSA, mc.HCA, mc.CSA])
        self.assertEqual(cfg["mlp_layer_types"][0], "hash_moe")

    def test_mtp_tensors(self):
        """The MTP layer's tensors (docs/mtp.md; random_init.cpp and weights.cpp's load of `mtp.<i>.*`): its own
        projections, norms and HyperHead, then exactly the tensors of a window-only, top-k main layer; no copy of
        the shared embedding or head. With them the model folder still fits the 40 MB budget."""
        cfg = mc.demo_config()
        d, hc = cfg["hidden_size"], cfg["hc_mult"]
        mtp = mc.mtp_tensors(cfg)
        names = [n for n, _, _ in mtp]
        self.assertEqual(len(names), len(set(names)))
        self.assertTrue(all(n.startswith("mtp.0.") for n in names))
        self.assertFalse([n for n in names if "emb" in n or n.endswith("head.weight")])
        own = {n: (s, k) for n, s, k in mtp[:8]}
        self.assertEqual(own, {"mtp.0.e_proj.weight": ([d, d], "matrix"), "mtp.0.h_proj.weight": ([d, d], "matrix"),
                               "mtp.0.enorm.weight": ([d], "float"), "mtp.0.hnorm.weight": ([d], "float"),
                               "mtp.0.norm.weight": ([d], "float"), "mtp.0.hc_head_fn": ([hc, hc * d], "float"),
                               "mtp.0.hc_head_base": ([hc], "float"), "mtp.0.hc_head_scale": ([1], "float")})
        layer0 = [(n[len("layers.0"):], s, k) for n, s, k in mc.official_tensors(cfg) if n.startswith("layers.0.")]
        rest = {n[len("mtp.0"):]: (s, k) for n, s, k in mtp[8:]}
        swa = {n: (s, k) for n, s, k in layer0 if n != ".ffn.gate.tid2eid"}  # layer 0 is window-only, hash-routed
        swa[".ffn.gate.bias"] = ([cfg["n_routed_experts"]], "float")
        self.assertEqual(rest, swa)
        mtp_mb = sum(math.prod(s) * (2 if k == "matrix" else 4) for _, s, k in mtp) / 1e6
        self.assertLess(mc.checkpoint_bytes(cfg, "fp8") / 1e6 + mtp_mb + 4.4, 40.0)

    def test_config_keys_accepted(self):
        keys = mc.strata_config_keys(os.path.join(REPO, "src", "model", "config_keys.cpp"))
        with open(os.path.join(REPO, "tests", "fixtures", "transformers_saved_config.json")) as f:
            saved = json.load(f)
        config, dropped = mc.strata_config(saved, keys)
        self.assertEqual(dropped, [])
        self.assertTrue(config["tie_word_embeddings"])


INIT_DIR = os.environ.get("DEMO_INIT_FROM", os.path.join(REPO, ".deps", "demo_run3"))


@unittest.skipUnless(os.path.exists(os.path.join(INIT_DIR, "model.safetensors")),
                     "no checkpoint for train.py --init-from (DEMO_INIT_FROM, default .deps/demo_run3)")
class InitCheckpointTest(unittest.TestCase):
    """What train.py --init-from relies on, checked before device time is spent: the folder's config has the
    shape train.py builds by default (the keys init_from_export compares), its tensors are exactly the official
    list (+ embed.scale) with the official shapes, and the FP8 embedding re-quantizes to the same codes: every
    block with a non-zero code holds a code of magnitude 448 (so the fake quantizer, fed codes x scale, derives
    the same scale up to an ulp and the same codes), and all-zero blocks have scale 1."""

    def test_checkpoint(self):
        cfg = mc.demo_config(192, 4, 128, 8)
        with open(os.path.join(INIT_DIR, "config.json")) as f:
            saved = json.load(f)
        for key in ("vocab_size", "hidden_size", "moe_intermediate_size", "num_hidden_layers", "n_routed_experts",
                    "num_experts_per_tok", "layer_types", "mlp_layer_types", "hc_mult", "compress_rates"):
            self.assertEqual(saved[key], cfg[key], key)
        path = os.path.join(INIT_DIR, "model.safetensors")
        header = read_safetensors_header(path)
        with open(path, "rb") as f:
            offset = 8 + struct.unpack("<Q", f.read(8))[0]
        want = {name: shape for name, shape, _ in mc.official_tensors(cfg)}
        want["embed.scale"] = mc.fp8_scale_shape(want["embed.weight"])
        self.assertEqual(set(header), set(want))
        for name, shape in want.items():
            self.assertEqual(header[name]["shape"], shape, name)
        self.assertEqual(header["embed.weight"]["dtype"], "F8_E4M3")
        rows, cols = want["embed.weight"]
        with open(path, "rb") as f:
            f.seek(offset + header["embed.weight"]["data_offsets"][0])
            codes = f.read(rows * cols)
            f.seek(offset + header["embed.scale"]["data_offsets"][0])
            scales = array.array("f", f.read(4 * want["embed.scale"][0] * want["embed.scale"][1]))
        if sys.byteorder != "little":
            scales.byteswap()
        block, bcols = 128, want["embed.scale"][1]
        has_max = [False] * (want["embed.scale"][0] * bcols)
        nonzero = [False] * len(has_max)
        for r in range(rows):
            row = codes[r * cols:(r + 1) * cols]
            for cb in range(bcols):
                part = row[cb * block:(cb + 1) * block]
                b = (r // block) * bcols + cb
                if not has_max[b] and (b"\x7e" in part or b"\xfe" in part):  # e4m3fn +-448
                    has_max[b] = True
                if not nonzero[b] and part.strip(b"\x00\x80"):
                    nonzero[b] = True
        bad = [b for b in range(len(has_max)) if nonzero[b] and not has_max[b]]
        self.assertEqual(bad, [], "blocks whose largest code is not 448 would re-quantize differently")
        self.assertTrue(all(scales[b] == 1.0 for b in range(len(has_max)) if not nonzero[b]))
        self.assertTrue(all(s > 0 and math.isfinite(s) for s in scales))


@unittest.skipUnless(os.path.exists(os.path.join(V3_DIR, "tokenizer.json")), "no V3 tokenizer in .deps")
class TokenizerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.size = make_tokenizer.make(V3_DIR, cls.tmp)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_ids(self):
        with open(os.path.join(self.tmp, "tokenizer.json")) as f:
            ids = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
        self.assertEqual(self.size, 128847)
        for spelling, want in make_tokenizer.PINNED_IDS.items():
            self.assertEqual(ids[spelling], want)
        self.assertEqual(ids["<｜User｜>"], 128803)
        self.assertEqual(ids["<｜end▁of▁sentence｜>"], 1)

    @unittest.skipUnless(strata_has("tokenize"), "no strata binary with tokenize")
    def test_strata_reads_it(self):
        out = subprocess.run([STRATA, "tokenize", "--model", self.tmp, "--parse-special", "--text",
                              "<｜User｜>1+1<｜Assistant｜></think>2<｜end▁of▁sentence｜>｜DSML｜"],
                             capture_output=True, check=True).stdout
        ids = json.loads(out)
        self.assertEqual(ids[0], 128803)
        self.assertEqual(ids[-1], 128825)
        self.assertIn(128822, ids)


# ----------------------------------------------------------------------------------------------------------
# A checkpoint with train.py's exact layout, random values, written with the stdlib
# ----------------------------------------------------------------------------------------------------------

DTYPE_BYTES = {"F32": 4, "BF16": 2, "F8_E4M3": 1, "I32": 4}


def read_safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def random_tensor(dtype, n, rng, experts=None, k=None):
    if dtype == "F8_E4M3":  # magnitudes 2^-3..2^1, both signs; never the NaN codes 0x7F / 0xFF
        return rng.randbytes(n).translate(bytes((b & 128) | (0x28 + b % 32) for b in range(256)))
    if dtype == "BF16":  # small normal values: sign/exponent byte 0x3C / 0xBC, random mantissa
        out = bytearray(rng.randbytes(2 * n))
        out[1::2] = rng.randbytes(n).translate(bytes(0x3C | (b & 128) for b in range(256)))
        return bytes(out)
    if dtype == "I32":
        rows = [rng.sample(range(experts), k) for _ in range(n // k)]
        return array.array("i", [e for r in rows for e in r]).tobytes()
    return array.array("f", [1.0 + 0.05 * rng.uniform(-1, 1) for _ in range(n)]).tobytes()


def write_fake_export(out_dir, cfg, seed=0):
    """model.safetensors + config.json as train.py exports them (values random, layout exact)."""
    rng = random.Random(seed)
    tensors = []
    for name, shape, kind in mc.official_tensors(cfg):
        n = 1
        for s in shape:
            n *= s
        if kind == "embed":
            tensors.append((name, "F8_E4M3", shape, random_tensor("F8_E4M3", n, rng)))
            scale = mc.fp8_scale_shape(shape)
            tensors.append(("embed.scale", "F32", scale, array.array("f", [0.05] * (scale[0] * scale[1])).tobytes()))
        elif kind == "matrix":
            tensors.append((name, "BF16", shape, random_tensor("BF16", n, rng)))
        elif kind == "index":
            tensors.append((name, "I32", shape, random_tensor("I32", n, rng, cfg["n_routed_experts"], shape[1])))
        else:
            tensors.append((name, "F32", shape, random_tensor("F32", n, rng)))
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for _, _, _, data in tensors:
            f.write(data)
    # What transformers' to_dict() gives looks like the saved fixture config; pin this model's values on it.
    with open(os.path.join(REPO, "tests", "fixtures", "transformers_saved_config.json")) as f:
        saved = json.load(f)
    saved.update({k: v for k, v in cfg.items() if k != "rope_parameters"})
    accepted = mc.strata_config_keys(os.path.join(REPO, "src", "model", "config_keys.cpp"))
    config, dropped = mc.strata_config(saved, accepted)
    assert not dropped, dropped
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_fake_mtp(out_dir, cfg, seed=1):
    """What train_mtp.py adds to an export: mtp.safetensors (mc.mtp_tensors, matrices BF16, the rest F32),
    model.safetensors.index.json naming both files, num_nextn_predict_layers 1 in config.json."""
    rng = random.Random(seed)
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape, kind in mc.mtp_tensors(cfg):
        dtype = "BF16" if kind == "matrix" else "F32"
        data = random_tensor(dtype, math.prod(shape), rng)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    with open(os.path.join(out_dir, "mtp.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob + b"".join(blobs))
    weight_map = {n: "model.safetensors" for n in read_safetensors_header(os.path.join(out_dir, "model.safetensors"))}
    weight_map.update({n: "mtp.safetensors" for n, _, _ in mc.mtp_tensors(cfg)})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(out_dir, "config.json")) as f:
        config = json.load(f)
    config["num_nextn_predict_layers"] = 1
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


@unittest.skipUnless(strata_has("model"), "needs a strata binary")
class StrataLoadsMtpExportTest(unittest.TestCase):
    """train_mtp.py's layout (the main model.safetensors untouched, the MTP layer in mtp.safetensors, an index
    naming both): Strata loads the MTP layer and drafts with it."""

    def test_mtp_layout(self):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = mc.demo_config()
            write_fake_export(tmp, cfg)
            write_fake_mtp(tmp, cfg)
            info = subprocess.run([STRATA, "model", "info", "--model", tmp], capture_output=True, text=True)
            self.assertEqual(info.returncode, 0, info.stderr)
            self.assertIn("MTP layers: 1", info.stdout)
            out = os.path.join(tmp, "mtp.json")
            r = subprocess.run([STRATA, "model", "mtp-logits", "--model", tmp, "--tokens", "5,17,300,2", "--out", out],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                logits = json.load(f)["mtp_logits"]
            self.assertEqual([len(row) for row in logits], [cfg["vocab_size"]] * 3)
            self.assertTrue(all(math.isfinite(x) for row in logits for x in row[:1000]))


@unittest.skipUnless(strata_has("chat-template") and os.path.exists(os.path.join(V3_DIR, "tokenizer.json")),
                     "needs a strata binary with chat-template and the V3 tokenizer")
class StrataLoadsExportTest(unittest.TestCase):
    def test_export_layout(self):
        with tempfile.TemporaryDirectory() as tmp:
            cfg = mc.demo_config()
            write_fake_export(tmp, cfg)
            make_tokenizer.make(V3_DIR, tmp)
            info = subprocess.run([STRATA, "model", "info", "--model", tmp], capture_output=True, text=True)
            self.assertEqual(info.returncode, 0, info.stderr)
            # A chat prompt through Strata's encoder + tokenizer, then greedy generation on the export layout.
            line = CORPUS["eval"][0]
            path = os.path.join(tmp, "request.json")
            with open(path, "w") as f:
                json.dump(line["request"], f)
            ids = subprocess.run([STRATA, "chat-template", "--model", tmp, "--request", path, "--ids"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            gen = subprocess.run([STRATA, "generate", "--model", tmp, "--prompt-ids", ids, "--max-tokens", "4",
                                  "--temperature", "0", "--ignore-eos"], capture_output=True, text=True)
            self.assertEqual(gen.returncode, 0, gen.stderr)
            self.assertEqual(len(gen.stdout.strip().split(",")), 4)
            # check_strata.py greedy, on a self-consistent expected file.
            record = {"id": "x", "kind": "answer", "request": line["request"], "correct": False,
                      "prompt_ids": [int(x) for x in ids.split(",")],
                      "completion_ids": [int(x) for x in gen.stdout.strip().split(",")]}
            expected = os.path.join(tmp, "expected.jsonl")
            with open(expected, "w") as f:
                f.write(json.dumps(record) + "\n")
            chk = subprocess.run([sys.executable, os.path.join(HERE, "check_strata.py"), "greedy", "--strata", STRATA,
                                  "--model", tmp, "--expected", expected], capture_output=True, text=True)
            self.assertEqual(chk.returncode, 0, chk.stdout + chk.stderr)


if __name__ == "__main__":
    unittest.main()
