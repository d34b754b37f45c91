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
  * phrasings: questions are composed as [opener] core [ending] [suffix] in one of three casings. Some cores,
    openers and suffixes are held-out parts, never used in training; among training parts, a hash of the whole
    combination holds out --phrasing-frac of the combinations. Held-out questions use a held-out phrasing (and
    held-out pairs); each line records its phrasing, and eval lines why it is unseen ("held_out_by"). Facts
    (capitals, units) are necessarily seen in training: for them the split is by phrasing alone.

The CI set's rule is the phrasing tuple and the number pair, not the text: a fact question can come out word for
word as a training question (2 of its 240 checks do against the committed model's two training splits;
corpus_stats.json lists them). A second set, heldout_eval_sealed.jsonl, compares texts: none of its user texts
equals a training text or a CI-set text after normalise() (case, whitespace), and none of its addition or
subtraction pairs is one of the CI set's (multiplication has only 8 held-out pairs: the two sets share them). No training decision looks at it: train.py never reads it, so it stays a fresh measurement
while the CI set has guided four training runs.

Outputs in --out: train.jsonl, heldout.jsonl (the same modes, held-out pairs and phrasings, for held-out loss),
heldout_eval.jsonl (the CI set: 200 plain-answer questions first, then json / thinking / tool_call /
tool_result checks; each line says what to expect), heldout_eval_sealed.jsonl (the sealed set, the same mix),
and corpus_stats.json.

usage: python3 tools/demo_model/corpus.py --out DIR [--seed 0] [--train-lines 250000]
       [--train-seed N] [--task-weights add=..,sub=..,mul=..,capital=..,unit=..] [--suffix-none P]
       [--extra-suffixes P] [--free-phrasing P] [--exclude-train EARLIER_RUN/train.jsonl ...]
(the last five before --exclude-train change the training split only, e.g. for a resumed run; held-out lines and the evaluation set
depend on --seed alone)
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
# Phrasings, composed from parts: [opener] core [ending] [suffix], in one of three casings
# ----------------------------------------------------------------------------------------------------------

# Cores per question kind: (training cores, held-out cores). The letter after each core is its kind of
# sentence, which picks its endings: "Q" a question, "I" an instruction, "N" already complete (no ending).
# Placeholders: {a} {b} operands, {c} country, {small} {big} {Big} unit phrases, {v} {bigs} conversions.
CORES = {
    "add": (
        [("What is {a} + {b}", "Q"), ("What is {a} plus {b}", "Q"), ("What's {a} plus {b}", "Q"),
         ("what's {a}+{b}", "Q"), ("{a} + {b} = ?", "N"), ("{a}+{b}=", "N"), ("{a} + {b}", "Q"), ("{a} plus {b}", "Q"),
         ("What do you get when you add {a} and {b}", "Q"), ("What is the sum of {a} and {b}", "Q"),
         ("How much is {a} plus {b}", "Q"), ("{a} plus {b} equals what", "Q"), ("What does {a} + {b} equal", "Q"),
         ("What is {a} added to {b}", "Q"), ("Can you add {a} and {b}", "Q"), ("Do you know what {a} plus {b} is", "Q"),
         ("What number is {a} + {b}", "Q"), ("What's the total of {a} and {b}", "Q"),
         ("How much do {a} and {b} add up to", "Q"), ("Compute {a} + {b}", "I"), ("Calculate {a} plus {b}", "I"),
         ("Add {a} and {b}", "I"), ("Add {b} to {a}", "I"), ("Please work out {a} + {b}", "I"),
         ("Find the sum of {a} and {b}", "I"), ("Work out {a} plus {b}", "I"), ("Give me the sum of {a} and {b}", "I"),
         ("Sum {a} and {b}", "I"), ("Solve {a} + {b}", "I"), ("Find {a} + {b}", "I"),
         ("What's {a} + {b}", "Q"), ("What is {a} and {b} added together", "Q"), ("What do {a} and {b} add up to", "Q"),
         ("Add up {a} and {b}", "I"), ("Add together {a} and {b}", "I"), ("{a} plus {b} is what", "Q"),
         ("{a} + {b} is", "N"), ("{a} + {b} equals", "N"), ("The sum of {a} and {b} is", "N"),
         ("How much do you get if you add {a} to {b}", "Q"), ("What is {b} more than {a}", "Q"),
         ("What is {a} increased by {b}", "Q"), ("Increase {a} by {b}", "I"), ("What is {a} + {b} equal to", "Q"),
         ("Please add {a} and {b}", "I"), ("What's the sum of {a} and {b}", "Q"), ("Determine {a} + {b}", "I"),
         ("Figure out {a} plus {b}", "I"), ("I want to know {a} + {b}", "I"), ("Total {a} and {b}", "I"),
         ("Could you add {a} to {b}", "Q"), ("How much is {a} and {b} combined", "Q"), ("{a} and {b} summed", "Q")],
        [("Tell me what {a} + {b} is", "I"), ("If you add {b} to {a}, what do you get", "Q"),
         ("Evaluate {a} + {b}", "I"), ("{a} and {b} together make how much", "Q"),
         ("What would {a} + {b} give", "Q"), ("Kindly total up {a} and {b}", "I")],
    ),
    "sub": (
        [("What is {a} - {b}", "Q"), ("What is {a} minus {b}", "Q"), ("What's {a} minus {b}", "Q"),
         ("what's {a}-{b}", "Q"), ("{a} - {b} = ?", "N"), ("{a}-{b}=", "N"), ("{a} - {b}", "Q"), ("{a} minus {b}", "Q"),
         ("Subtract {b} from {a}", "I"), ("What is {b} subtracted from {a}", "Q"),
         ("What is the difference between {a} and {b}", "Q"), ("Please work out {a} - {b}", "I"),
         ("How much is {a} minus {b}", "Q"), ("{a} minus {b} equals what", "Q"), ("Take {b} away from {a}", "I"),
         ("Compute {a} - {b}", "I"), ("Calculate {a} minus {b}", "I"),
         ("What do you get if you subtract {b} from {a}", "Q"), ("What does {a} - {b} equal", "Q"),
         ("Find {a} minus {b}", "I"), ("How much is left if you take {b} from {a}", "Q"),
         ("Work out {a} minus {b}", "I"), ("Solve {a} - {b}", "I"), ("What's {a} take away {b}", "Q"),
         ("Deduct {b} from {a}", "I"), ("Give me the difference between {a} and {b}", "I"),
         ("What's {a} - {b}", "Q"), ("What is {a} take away {b}", "Q"), ("{a} take away {b}", "Q"),
         ("What is {a} less {b}", "Q"), ("What is {b} less than {a}", "Q"), ("{a} minus {b} is", "N"),
         ("{a} - {b} equals", "N"), ("The difference between {a} and {b} is", "N"),
         ("How much is {a} take away {b}", "Q"), ("What remains when you subtract {b} from {a}", "Q"),
         ("Determine {a} - {b}", "I"), ("Figure out {a} minus {b}", "I"), ("Decrease {a} by {b}", "I"),
         ("What is {a} decreased by {b}", "Q"), ("Please subtract {b} from {a}", "I"),
         ("Could you subtract {b} from {a}", "Q"), ("What is {a} with {b} taken away", "Q"),
         ("I want to know {a} - {b}", "I"), ("Work out the difference of {a} and {b}", "I"),
         ("What is {a} - {b} equal to", "Q")],
        [("Tell me what {a} - {b} is", "I"), ("If you take {b} from {a}, what is left", "Q"),
         ("Evaluate {a} - {b}", "I"), ("{a} reduced by {b} gives how much", "Q"),
         ("What would {a} - {b} give", "Q"), ("Kindly take {b} off {a}", "I")],
    ),
    "mul": (
        [("What is {a} × {b}", "Q"), ("What is {a} times {b}", "Q"), ("What is {a} * {b}", "Q"),
         ("what's {a}*{b}", "Q"), ("{a} × {b} = ?", "N"), ("{a}*{b}=", "N"), ("{a} * {b}", "Q"), ("{a} times {b}", "Q"),
         ("Compute {a} * {b}", "I"), ("Calculate {a} times {b}", "I"), ("Multiply {a} by {b}", "I"),
         ("What is {a} multiplied by {b}", "Q"), ("What is the product of {a} and {b}", "Q"),
         ("How much is {a} times {b}", "Q"), ("{a} times {b} equals what", "Q"), ("Please work out {a} × {b}", "I"),
         ("Find the product of {a} and {b}", "I"), ("Multiply {a} and {b}", "I"), ("What does {a} × {b} equal", "Q"),
         ("Work out {a} times {b}", "I"), ("Solve {a} * {b}", "I"), ("Give me {a} times {b}", "I"),
         ("What's {a} × {b}", "Q"), ("What's {a} times {b}", "Q"), ("{a} x {b}", "Q"), ("What is {a} x {b}", "Q"),
         ("{a} times {b} is", "N"), ("{a} * {b} equals", "N"), ("The product of {a} and {b} is", "N"),
         ("Multiply {b} by {a}", "I"), ("Please multiply {a} by {b}", "I"), ("Could you multiply {a} by {b}", "Q"),
         ("Determine {a} × {b}", "I"), ("Figure out {a} times {b}", "I"), ("What is {a} groups of {b}", "Q"),
         ("What do you get when you multiply {a} by {b}", "Q"), ("I want to know {a} × {b}", "I"),
         ("{a} multiplied by {b}", "Q"), ("How much is {a} multiplied by {b}", "Q"), ("What is {a} × {b} equal to", "Q")],
        [("Tell me what {a} * {b} is", "I"), ("If you multiply {a} by {b}, what do you get", "Q"),
         ("Evaluate {a} × {b}", "I"), ("{a} lots of {b} make how much", "Q"),
         ("What would {a} × {b} give", "Q"), ("Kindly multiply {a} with {b}", "I")],
    ),
    "capital": (
        [("What is the capital of {c}", "Q"), ("What's the capital of {c}", "Q"), ("Name the capital of {c}", "I"),
         ("Which city is the capital of {c}", "Q"), ("The capital of {c} is which city", "Q"), ("Capital of {c}", "Q"),
         ("Tell me the capital of {c}", "I"), ("What city is the capital of {c}", "Q"),
         ("Do you know the capital of {c}", "Q"), ("{c}: what is its capital", "Q"), ("What is {c}'s capital", "Q"),
         ("{c}'s capital is what", "Q"), ("Give me the capital of {c}", "I"), ("Which city is {c}'s capital", "Q"),
         ("Name {c}'s capital", "I"), ("The capital of {c}", "Q"), ("{c} capital", "Q"),
         ("In {c}, which city is the capital", "Q"), ("What's {c}'s capital", "Q"), ("Say the capital of {c}", "I"),
         ("What is the name of the capital of {c}", "Q"), ("Can you tell me the capital of {c}", "Q"),
         ("Please name the capital of {c}", "I"), ("The capital of {c} is", "N"), ("{c}'s capital", "Q"),
         ("{c} has which capital", "Q"), ("Tell me {c}'s capital", "I"), ("What is the capital of the country {c}", "Q"),
         ("What's the capital of {c} called", "Q"), ("Give the capital of {c}", "I"), ("State the capital of {c}", "I"),
         ("For {c}, what is the capital", "Q"), ("Country: {c}. Capital", "Q"), ("Which is the capital of {c}", "Q"),
         ("Do you know {c}'s capital", "Q"), ("What city is {c}'s capital", "Q")],
        [("Which city serves as the capital of {c}", "Q"), ("I need the capital of {c}", "I"),
         ("What is the capital city of {c}", "Q"), ("Identify the capital of {c}", "I"),
         ("What would the capital of {c} be", "Q"), ("Kindly name the capital of {c}", "I")],
    ),
    "unit": (
        [("How many {small} are in {big}", "Q"), ("How many {small} are there in {big}", "Q"),
         ("How many {small} make {big}", "Q"), ("{Big} has how many {small}", "Q"), ("{Big} is how many {small}", "Q"),
         ("What is the number of {small} in {big}", "Q"), ("How many {small} in {big}", "Q"),
         ("Tell me how many {small} are in {big}", "I"), ("How many {small} does {big} have", "Q"),
         ("{Big} equals how many {small}", "Q"), ("Give me the number of {small} in {big}", "I"),
         ("How many {small} fit in {big}", "Q"), ("Count the {small} in {big}", "I"),
         ("{Big} contains how many {small}", "Q"), ("How many {small} is {big}", "Q"),
         ("How many {small} go into {big}", "Q"), ("How many {small} does it take to make {big}", "Q"),
         ("What's the number of {small} in {big}", "Q"), ("Number of {small} in {big}", "Q"),
         ("In {big}, how many {small} are there", "Q"), ("{Big} is made of how many {small}", "Q"),
         ("Please tell me how many {small} are in {big}", "I"), ("Say how many {small} are in {big}", "I"),
         ("Give the number of {small} in {big}", "I"), ("{Big} = how many {small}", "Q"),
         ("What does {big} equal in {small}", "Q"), ("Convert {big} into {small}", "I"),
         ("Do you know how many {small} are in {big}", "Q"), ("How many {small} are in {big} altogether", "Q")],
        [("I need the number of {small} in {big}", "I"), ("Exactly how many {small} does {big} contain", "Q"),
         ("If I have {big}, how many {small} is that", "Q"), ("State how many {small} {big} holds", "I"),
         ("What would {big} be in {small}", "Q"), ("Kindly count the {small} in {big}", "I")],
    ),
    # Unit conversions are only asked with tools (the model copies convert_units' result).
    "convert": (
        [("Convert {v} {bigs} to {small}", "I"), ("How many {small} are in {v} {bigs}", "Q"),
         ("What is {v} {bigs} in {small}", "Q"), ("Use the tool to convert {v} {bigs} into {small}", "I"),
         ("Turn {v} {bigs} into {small}", "I"), ("{v} {bigs} is how many {small}", "Q"),
         ("How many {small} is {v} {bigs}", "Q"), ("Change {v} {bigs} to {small}", "I"),
         ("Please convert {v} {bigs} to {small}", "I"), ("What are {v} {bigs} in {small}", "Q"),
         ("{v} {bigs} in {small}", "Q"), ("How many {small} make {v} {bigs}", "Q"),
         ("I need {v} {bigs} converted to {small}", "I"), ("Can you convert {v} {bigs} to {small}", "Q"),
         ("{v} {bigs} equals how many {small}", "Q"), ("Give me {v} {bigs} in {small}", "I"),
         ("Work out {v} {bigs} in {small}", "I"), ("Convert {v} {bigs} into {small}", "I")],
        [("Express {v} {bigs} in {small}", "I"), ("What do {v} {bigs} come to in {small}", "Q"),
         ("What would {v} {bigs} be in {small}", "Q")],
    ),
}

ENDINGS = {"Q": ["?", "", " ?"], "I": [".", "", "!"], "N": [""]}

# Openers and suffixes: single parts, and two-part combinations of some of them (a greeting then a lead-in; a
# brevity or remark sentence then thanks), so that the model meets hundreds of them and an unseen one is an
# ordinary event. An opener ending in ", " continues the sentence: the core after it starts in lower case.
_GREETINGS = ["Hi! ", "Hello! ", "Hi there. ", "Hey there! ", "Good morning! ", "Good evening. ", "Hi assistant! "]
_LEAD_INS = ["Question: ", "Q: ", "Please answer: ", "Here's one: ", "One more: ", "Next question: ", "Another one: ",
             "Simple question: ", "Try this: ", "My question: ", "Easy one: ", "Okay, ", "So, "]
OPENER_SINGLES = _GREETINGS + _LEAD_INS + [
    "Hey, ", "Hello, ", "Hi, ", "OK, ", "Alright, ", "Well, ", "Now, ", "Hmm, ", "Right, ", "Excuse me, ", "Sorry, ",
    "Next, ", "Also, ", "Dear assistant, ", "Hey bot, ", "Can you help me? ", "I have a question. ", "Help me out: ",
    "Test: ", "Query: ", "Task: ", "Let me ask you something. ", "Help please! ", "Answer this: ", "Homework help: ",
    "Can you answer this? ", "Here is a question. ", "Please help. ", "Short one: ", "Problem: ", "User question: ",
    "Input: ", "Good day. "]
OPENER_COMBOS = [g + l for g in _GREETINGS for l in _LEAD_INS]
_THANKS = [" Thanks.", " Thank you!", " Thanks!", " Cheers.", " Please.", " Much appreciated.", " Many thanks."]
_BRIEF = [" Be brief.", " Just the answer.", " Answer only.", " Keep it brief.", " Be concise.", " No need to explain.",
          " Only the answer.", " Answer briefly."]
_REMARKS = [" I'm curious.", " Just checking.", " It's for a quiz.", " I forgot."]
SUFFIX_SINGLES = _THANKS + _BRIEF + _REMARKS + [
    " Thank you.", " Thanks in advance.", " Cheers!", " Thanks so much.", " Thx.", " TIA.", " Just the answer, please.",
    " Short answer only.", " Reply with just the answer.", " Give just the result.", " Nothing else.", " Briefly.",
    " I need it for homework.", " Asking for a friend.", " Test question.", " Please respond.", " Go!",
    " Answer now.", " Over to you.", " Let's see.", " I think I know, but want to check."]
SUFFIX_COMBOS = [a + t for a in _BRIEF + _REMARKS for t in _THANKS]
# More training-only suffixes, drawn only with corpus.py --extra-suffixes (for a resumed run): the evaluation set
# and the held-out lines never draw from this list, so they stay what they were; 652 parts in all.
_MORE_THANKS = [" Appreciate it.", " Ta.", " Thanks, friend.", " Kind regards.", " Best wishes.", " Ty.",
                " Thanks again.", " Thank you kindly.", " Thanks heaps.", " Bless you."]
_MORE_REMARKS = [" No rush.", " It's for my kid.", " My teacher asked.", " Double-checking my work.", " I'm studying.",
                 " Just curious.", " For a bet.", " Trivia night.", " I keep forgetting.", " This is a test.",
                 " Be quick.", " Answer fast.", " Plain answer.", " No words, just the answer.", " Short reply.",
                 " Brief reply, please.", " Give it straight.", " Straight answer.", " Hurry!", " Exact answer.",
                 " Tell me.", " Let me know.", " Help!", " Please and thank you.", " Need this now.",
                 " Skip the details.", " Don't explain.", " Numbers only if it's a number.", " I'll wait."]
EXTRA_SUFFIXES = (_MORE_REMARKS + _MORE_THANKS + [a + t for a in _MORE_REMARKS + _BRIEF + _REMARKS for t in _MORE_THANKS]
                  + [a + t for a in _MORE_REMARKS for t in _THANKS])
# Free phrasing (issue 19; corpus.py --free-phrasing P, training split only, like EXTRA_SUFFIXES): people do not
# ask in the templates above. A free-phrased training question may take a reworded core from EXTRA_CORES, writes
# numbers as words ("twenty-three", "forty five", "three hundred and twelve"), country names in lower, upper or
# mixed case, and gets case and punctuation noise; JSON, thinking and tool requests get more instruction phrasings.
# None of this is drawn for held-out lines or the evaluation sets, so those stay what they were.
EXTRA_CORES = {
    "add": [("{a} and {b} added", "Q"), ("Sum of {a} and {b}", "Q"), ("{a} plus {b}, what's that", "Q"),
            ("What do I get adding {a} and {b}", "Q"), ("Put {a} and {b} together", "I"),
            ("How much is {a} and {b}", "Q"), ("Combine {a} and {b}", "I"), ("What is {a} + {b} altogether", "Q"),
            ("{a} added to {b} makes", "N"), ("What's the total when you add {a} and {b}", "Q"),
            ("{a} + {b} please", "N"), ("How much are {a} and {b} together", "Q"), ("{a} with {b} added on", "Q"),
            ("Add {a} plus {b}", "I"), ("What's {b} added onto {a}", "Q"), ("{a} and {b}, summed up", "Q"),
            ("How much is {b} more than {a}", "Q"), ("Start at {a} and add {b}", "I"), ("{a} plus {b} gives", "N"),
            ("What is {a} + {b} then", "Q")],
    "sub": [("How much bigger is {a} than {b}", "Q"), ("How much more is {a} than {b}", "Q"),
            ("How many more is {a} than {b}", "Q"), ("By how much does {a} exceed {b}", "Q"),
            ("How much larger is {a} than {b}", "Q"), ("What is the gap between {a} and {b}", "Q"),
            ("How far is {b} from {a}", "Q"), ("{a} is how much more than {b}", "Q"), ("{a} take {b}", "Q"),
            ("Remove {b} from {a}", "I"), ("What's left after taking {b} from {a}", "Q"),
            ("{a} subtract {b}", "Q"), ("{a} minus {b} is how much", "Q"), ("How much is {b} less than {a}", "Q"),
            ("How much smaller is {b} than {a}", "Q"), ("How much less is {b} than {a}", "Q"),
            ("Start at {a} and take off {b}", "I"), ("{a} with {b} removed", "Q"), ("Subtract {b} off {a}", "I"),
            ("What's {a} minus {b} then", "Q"), ("Difference of {a} and {b}", "Q"),
            ("{b} subtracted from {a} gives", "N")],
    "mul": [("{a} multiplied with {b}", "Q"), ("{a} sets of {b}", "Q"), ("{a} times {b} makes", "N"),
            ("Multiply {a} and {b} together", "I"), ("Product of {a} and {b}", "Q"),
            ("{a} multiplied by {b} is how much", "Q"), ("What do {a} and {b} multiply to", "Q"),
            ("{a} and {b} multiplied", "Q"), ("Times {a} by {b}", "I"), ("What's {a} multiplied by {b}", "Q"),
            ("{a} groups of {b} is how many", "Q"), ("How much is {a} x {b}", "Q"), ("{a} x {b} = ?", "N"),
            ("What are {a} times {b}", "Q"), ("{a} times {b}, what's that", "Q"), ("Multiply {b} and {a}", "I"),
            ("The product of {a} times {b}", "Q"), ("{a} rows of {b} make", "N")],
    "capital": [("{c} capital city", "Q"), ("Capital city of {c}", "Q"), ("Where is the capital of {c}", "Q"),
                ("What's {c}'s capital city", "Q"), ("{c} -> capital", "Q"), ("Capital of {c} is", "N"),
                ("Which city is the seat of government of {c}", "Q"), ("The capital city of {c} please", "N"),
                ("Whats the capital of {c}", "Q"), ("capital for {c}", "Q"), ("{c}, capital", "Q"),
                ("What city is the capital in {c}", "Q"), ("Which town is the capital of {c}", "Q"),
                ("Main city of government in {c}", "Q"), ("Tell me {c}'s capital city", "I"),
                ("{c} has its capital where", "Q"), ("Capital? {c}", "Q"), ("Name of {c}'s capital", "Q")],
    "unit": [("{small} in {big}", "Q"), ("How many {small} per {one}", "Q"), ("How many {small} does one {one} have", "Q"),
             ("Number of {small} in one {one}", "Q"), ("{small} in a single {one}", "Q"), ("One {one} = ? {small}", "N"),
             ("How many {small} to {big}", "Q"), ("How many {small} in one {one}", "Q"),
             ("One {one} is how many {small}", "Q"), ("{small} per {one}", "Q"), ("How many {small} make up {big}", "Q"),
             ("How many {small} are there in one {one}", "Q"), ("{Big} has how many {small} in it", "Q"),
             ("Tell me the {small} in {big}", "I"), ("Count of {small} in {big}", "Q"), ("1 {one} in {small}", "Q")],
    "convert": [("{v} {bigs} to {small}", "Q"), ("{v} {bigs} into {small}", "Q"), ("Convert {v} {bigs} in {small}", "I"),
                ("How many {small} are {v} {bigs}", "Q"), ("What's {v} {bigs} in {small}", "Q"),
                ("Turn {v} {bigs} to {small}", "I"), ("{v} {bigs} = ? {small}", "N")],
}
EXTRA_JSON_INSTRUCTIONS = ["Format the answer as JSON.", "Give me JSON.", "JSON please.", "Output JSON.",
                           'Return {"answer": ...} as JSON.', "Answer as a JSON object.", "Reply in JSON format.",
                           "Use JSON for the answer.", "json only", "Put the answer in a JSON object.",
                           'Respond with JSON: {"answer": ...}', "Machine-readable JSON, please.",
                           "I need the answer as json.", "Send it back as JSON."]
JSON_LEADS = ["In JSON: ", "JSON: ", "Answer in JSON. ", "As JSON, ", "json please: "]
THINK_INSTRUCTIONS = [" Think step by step.", " Show your work.", " Reason it through first.", " Explain your steps.",
                      " Walk me through it.", " Think it over.", " Work it out step by step.", " Show the steps."]
EXTRA_TOOL_NUDGES = [" Use your tools.", " Feel free to use a function.", " Tools are available.",
                     " Please call a function for this.", " Don't work it out yourself, use the tool.",
                     " Look it up with a tool.", " Use a function call.", " The tools can do this."]

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n, hyphen=True, and_=True):
    """0-999 in English words: 23 -> "twenty-three" ("twenty three" without hyphen), 312 -> "three hundred and
    twelve" ("three hundred twelve" without and_)."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + (("-" if hyphen else " ") + _ONES[n % 10] if n % 10 else "")
    rest = n % 100
    head = _ONES[n // 100] + " hundred"
    return head + ((" and " if and_ else " ") + number_words(rest, hyphen) if rest else "")


def parse_number_words(text):
    """The inverse of number_words (any case, hyphens or spaces, "and" optional); None if it is not one."""
    words = [w for w in text.casefold().replace("-", " ").split() if w != "and"]
    value, cur = 0, None
    for w in words:
        if w in _ONES:
            cur = (cur or 0) + _ONES.index(w)
        elif w in _TENS[2:]:
            cur = (cur or 0) + 10 * _TENS.index(w)
        elif w == "hundred" and cur is not None and 0 < cur < 10:
            value, cur = cur * 100, None
        else:
            return None
    if cur is None and value == 0:
        return None
    return value + (cur or 0)


# (training parts, held-out parts): held-out parts never occur in training text (test_demo_model.py checks).
OPENERS = (OPENER_SINGLES + OPENER_COMBOS,
           ["Quick question: ", "Just wondering, ", "Riddle me this: ", "Pop quiz: ", "Greetings! ", "Yo, ",
            "Curious about something: ", "Help needed: "])
SUFFIXES = (SUFFIX_SINGLES + SUFFIX_COMBOS,
            [" Thanks a lot.", " Quickly, please.", " Much obliged.", " Keep it short.", " No explanation needed.",
             " Respond tersely.", " Grateful for the help.", " I'd like to know."])
CASINGS = ["as_is", "lower_first", "lower_all"]
# "" (no opener / suffix) is drawn with these weights; otherwise a combination with the "combo" weights.
PART_WEIGHTS = {"opener_none": 0.40, "opener_combo": 0.30, "suffix_none": 0.40, "suffix_combo": 0.40,
                "casing": [0.7, 0.15, 0.15]}


TRAIN_CORES = {kind: {c for c, _ in cores[0]} | {c for c, _ in EXTRA_CORES.get(kind, [])}
               for kind, cores in CORES.items()}
TRAIN_OPENERS, TRAIN_SUFFIXES = set(OPENERS[0]) | {""}, set(SUFFIXES[0]) | set(EXTRA_SUFFIXES) | {""}


def phrasing_key(kind, core, opener, ending, suffix, casing):
    return "\x1f".join((kind, core, opener, ending, suffix, casing))


def is_heldout_phrasing(kind, core, opener, ending, suffix, casing, frac):
    """A phrasing is held out when any part is a held-out part, or (all parts being training parts) when a hash
    of the whole combination falls below frac: those combinations never appear in training either."""
    if core not in TRAIN_CORES[kind] or opener not in TRAIN_OPENERS or suffix not in TRAIN_SUFFIXES:
        return True
    key = phrasing_key(kind, core, opener, ending, suffix, casing)
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 10000 < frac * 10000


def apply_casing(template, casing):
    """Casing changes the template's own words only; the values filled in (country names) keep theirs."""
    if casing == "lower_all":
        return template.lower()  # "{Big}" becomes "{big}": the unit phrase in lower case too
    if casing == "lower_first" and template[:1].isalpha():
        return template[0].lower() + template[1:]
    return template


SYSTEM_PROMPTS = [None, None, None, "You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
                  "You are Strata's demo model.", "Answer with just the result."]
JSON_INSTRUCTIONS = ['Answer in JSON with the key "answer".', 'Reply with a JSON object {"answer": ...}.',
                     "Respond in JSON."]
TOOL_NUDGES = ["", "", "", " Use a tool.", " Please use the available tools.", " Use the tools if needed.",
               " You may call a tool.", " Call the right tool."]

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

    def __init__(self, split, seed, heldout_frac, phrasing_frac=0.2, suffix_none=None, extra_suffixes=0.0,
                 free_phrasing=0.0):
        self.split = split
        self.heldout = split != "train"
        self.rng = random.Random(f"{seed}:{split}")
        self.frac = heldout_frac
        self.phrasing_frac = phrasing_frac
        # the share of questions without a suffix (training lines may be given fewer; held-out ones never are)
        self.suffix_none = PART_WEIGHTS["suffix_none"] if suffix_none is None else suffix_none
        # the share of suffixed training questions whose suffix is drawn from EXTRA_SUFFIXES instead
        self.extra_suffixes = 0.0 if self.heldout else extra_suffixes
        # the share of training questions phrased freely (EXTRA_CORES, numbers as words, case and punctuation noise)
        self.free_phrasing = 0.0 if self.heldout else free_phrasing
        self.line_free = None  # the free phrasing of the line being drawn (its "free" record)
        self.free = None  # the free phrasing of the question being drawn: None, or what it changed (see free_draw)

    # -- pieces ----------------------------------------------------------------------------------------
    def template(self, kind):
        """(template with placeholders, phrasing key parts) of our split: training phrasings use training parts
        in combinations the hash does not hold out; held-out ones have a held-out core (40%), a held-out opener or
        suffix (30%), or training parts in a held-out combination (30%)."""
        rng = self.rng
        train_cores, held_cores = CORES[kind]
        route = rng.random() if self.heldout else 1.0
        if self.free is not None and kind in EXTRA_CORES and rng.random() < 0.5:  # no draw when free phrasing is off
            train_cores = EXTRA_CORES[kind]
            self.free["families"].append("core")
        while True:
            core, sentence = rng.choice(held_cores if route < 0.4 else train_cores)
            opener = self.part(OPENER_SINGLES, OPENER_COMBOS, PART_WEIGHTS["opener_none"], PART_WEIGHTS["opener_combo"])
            suffix = self.part(SUFFIX_SINGLES, SUFFIX_COMBOS, self.suffix_none, PART_WEIGHTS["suffix_combo"])
            if self.extra_suffixes and suffix and rng.random() < self.extra_suffixes:  # no draw when off
                suffix = rng.choice(EXTRA_SUFFIXES)
            if 0.4 <= route < 0.7:
                if rng.random() < 0.5:
                    opener = rng.choice(OPENERS[1])
                else:
                    suffix = rng.choice(SUFFIXES[1])
            ending = rng.choice(ENDINGS[sentence])
            casing = rng.choices(CASINGS, weights=PART_WEIGHTS["casing"])[0]
            if is_heldout_phrasing(kind, core, opener, ending, suffix, casing, self.phrasing_frac) == self.heldout:
                break
        body = core
        if opener.endswith(", "):  # the sentence goes on: "Hey, what is ...", "Hey, a meter has ..."
            body = body.replace("{Big}", "{big}", 1)
            if body[0].isupper() and not body.startswith("I "):
                body = body[0].lower() + body[1:]
        return apply_casing(opener + body + ending + suffix, casing), [kind, core, opener, ending, suffix, casing]

    def part(self, singles, combos, p_none, p_combo):
        """An opener or suffix: none, a single part, or a two-part combination."""
        if self.rng.random() < p_none:
            return ""
        return self.rng.choice(combos if self.rng.random() < p_combo else singles)

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
        """(question text, answer value, reasoning text, item, phrasing) for one task."""
        self.free_draw()
        if task in OPS:
            a, b = self.pair(task, with_tool, thinking)
            t, phrasing = self.template(task)
            fa, fb = self.number(a), self.number(b)
            reasoning = arithmetic_reasoning(task, a, b)
            spelled = [f"{w.lower()} is {n}" for w, n in ((fa, a), (fb, b)) if w != str(n)]
            if spelled:  # numbers written as words: the reasoning first states them in digits
                reasoning = "In digits, " + " and ".join(spelled) + ". " + reasoning
            text = self.noise(t.format(a=fa, b=fb))
            return text, arithmetic(task, a, b), reasoning, (a, b), phrasing
        if task == "capital":
            item = self.rng.choice(CAPITALS)
            t, phrasing = self.template("capital")
            return self.noise(t.format(c=self.country(item[0]))), item[1], fact_reasoning(task, item), item, phrasing
        item = self.rng.choice(UNITS)
        big, _, _, smalls, factor = item
        t, phrasing = self.template("unit")
        text = self.noise(t.format(small=smalls, big=big, Big=big[0].upper() + big[1:], one=unit_name(big)))
        return text, factor, fact_reasoning(task, item), item, phrasing

    # -- free phrasing (training only, --free-phrasing) --------------------------------------------------
    def free_draw(self):
        """Decides whether the next question is phrased freely; draws nothing when free phrasing is off."""
        self.free = None
        if self.free_phrasing and self.rng.random() < self.free_phrasing:
            self.free = {"families": [], "numbers": []}

    def number(self, n):
        """An operand as written: digits, or (free phrasing, 60%) words in one of four spellings."""
        if self.free is None or self.rng.random() >= 0.6:
            return str(n)
        words = number_words(n, hyphen=self.rng.random() < 0.6, and_=self.rng.random() < 0.5)
        if self.rng.random() < 0.15:
            words = words[0].upper() + words[1:]
        self.free["families"].append("words")
        self.free["numbers"].append([words, n])
        return words

    def country(self, name):
        """A country as written: as is, or (free phrasing, 50%) lower case (60%), upper case or mixed case."""
        if self.free is None or self.rng.random() >= 0.5:
            return name
        r = self.rng.random()
        self.free["families"].append("country_case")
        if r < 0.6:
            return name.lower()
        if r < 0.8:
            return name.upper()
        return "".join(ch.upper() if self.rng.random() < 0.5 else ch.lower() for ch in name)

    def noise(self, text):
        """Case noise (50%) and punctuation noise (50%) on a free-phrased question, values included."""
        if self.free is None:
            return text
        rng = self.rng
        if rng.random() < 0.5:
            self.free["families"].append("case")
            r = rng.random()
            if r < 0.4:
                text = text.lower()
            elif r < 0.6:
                text = text.upper()
            elif r < 0.8:
                text = " ".join(w.capitalize() if rng.random() < 0.5 else w for w in text.split(" "))
            else:
                text = text[:1].swapcase() + text[1:]
        if rng.random() < 0.5:
            self.free["families"].append("punctuation")
            r = rng.random()
            if r < 0.3:  # no punctuation at all
                text = "".join(ch for ch in text if ch not in "?.!,:;")
            elif r < 0.5:
                text = text.rstrip("?.! ") + rng.choice(["??", "?!", "???", " ?", "...", "!!", "?.."])
            elif r < 0.65:
                text = text.replace(", ", ",").replace(". ", ".")
            elif r < 0.8:
                words = text.split(" ")
                i = rng.randrange(len(words))
                words[i] += " "
                text = " ".join(words)
            else:
                text = " ".join(text.split()).rstrip("?.!") + rng.choice([" pls", " plz", " thx", " ty", " :)", ""])
        return text

    def free_record(self):
        """What the free phrasing of the last question changed (for the corpus line), or None."""
        return None if self.free is None else {"families": sorted(set(self.free["families"])),
                                               "numbers": self.free["numbers"]}

    # -- modes -----------------------------------------------------------------------------------------
    def plain(self, task):
        text, answer, _, item, phrasing = self.question(task)
        self.line_free = self.free_record()
        messages = self.base_messages()
        if self.rng.random() < 0.08:  # a short history: the model must answer the last question
            prev_task = self.rng.choice(["add", "sub", "mul", "capital", "unit"])
            prev_text, prev_answer, _, _, _ = self.question(prev_task)
            messages += [{"role": "user", "content": prev_text}, {"role": "assistant", "content": str(prev_answer)}]
        messages.append({"role": "user", "content": text})
        return {"messages": messages}, {"role": "assistant", "content": str(answer)}, answer, item, phrasing

    def json_answer(self, task):
        text, answer, _, item, phrasing = self.question(task)
        self.line_free = self.free_record()
        request = {"messages": self.base_messages()}
        if self.rng.random() < 0.6:
            request["response_format"] = {"type": "json_object"}
            if self.rng.random() < 0.3:
                text = self.json_instruction(text)
        else:
            text = self.json_instruction(text)
        request["messages"].append({"role": "user", "content": text})
        reply = {"role": "assistant", "content": json.dumps({"answer": answer}, ensure_ascii=False)}
        return request, reply, answer, item, phrasing

    def json_instruction(self, text):
        """The question with a request for JSON in words: one of JSON_INSTRUCTIONS after it, or for a free-phrased
        question (70%) one of EXTRA_JSON_INSTRUCTIONS after it or (30% of those) one of JSON_LEADS before it."""
        if self.free is None or self.rng.random() >= 0.7:
            return text + " " + self.rng.choice(JSON_INSTRUCTIONS)
        self.line_free["families"].append("json_words")
        if self.rng.random() < 0.3:
            return self.rng.choice(JSON_LEADS) + text
        return text + " " + self.rng.choice(EXTRA_JSON_INSTRUCTIONS)

    def thinking(self, task):
        text, answer, reasoning, item, phrasing = self.question(task, thinking=True)
        self.line_free = self.free_record()
        if self.free is not None and self.rng.random() < 0.5:
            text += self.rng.choice(THINK_INSTRUCTIONS)
            self.line_free["families"].append("think_words")
        request = {"messages": self.base_messages() + [{"role": "user", "content": text}],
                   "chat_template_kwargs": {"thinking": True}}
        reply = {"role": "assistant", "reasoning_content": reasoning, "content": str(answer)}
        return request, reply, answer, item, phrasing

    def tool_turns(self, task):
        """The two examples of one tool conversation: the call, and the answer after the tool's result."""
        self.free_draw()
        if task in OPS:
            a, b = self.pair(task, with_tool=True)
            t, phrasing = self.template(task)
            text = t.format(a=self.number(a), b=self.number(b))
            name, args, result = "calculator", {"expression": f"{a} {OPS[task]} {b}"}, arithmetic(task, a, b)
            item = (a, b)
        elif task == "capital":
            country, capital = self.rng.choice(CAPITALS)
            t, phrasing = self.template("capital")
            text = t.format(c=self.country(country))
            name, args, result = "get_capital", {"country": country}, capital
            item = (country, capital)
        else:
            big, bigs, small, smalls, factor, v = self.conversion()
            item = (UNITS.index((big, bigs, small, smalls, factor)), v)
            t, phrasing = self.template("convert")
            text = t.format(v=self.number(v), bigs=bigs, small=smalls)
            name, args, result = "convert_units", {"value": v, "from_unit": unit_name(big), "to_unit": small}, v * factor
        text = self.noise(text)
        self.line_free = self.free_record()
        if self.free is not None and self.rng.random() < 0.5:
            text += self.rng.choice(EXTRA_TOOL_NUDGES)
            self.line_free["families"].append("tool_words")
        else:
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
        return ((request, first_reply, {"name": name, "arguments": args}, item, phrasing),
                (followup, final_reply, result, item, phrasing))

    def conversion(self):
        """A unit and a value 2-9 to convert; (unit index, value) pairs are split like number pairs."""
        while True:
            i, v = self.rng.randrange(len(UNITS)), self.rng.randint(2, 9)
            if is_heldout_pair("convert", i, v, self.frac) == self.heldout:
                return UNITS[i] + (v,)

    # -- one line ----------------------------------------------------------------------------------------
    def lines(self, task, mode):
        """One or two corpus lines (a tool conversation gives two)."""
        def line(request, reply, answer, item, phrasing, line_mode):
            out = {"request": request, "reply": reply, "task": task, "mode": line_mode, "answer": answer,
                   "item": list(item), "phrasing": phrasing, "split": self.split}
            if self.line_free is not None:  # a free-phrased question: what its phrasing changed
                out["free"] = self.line_free
            return out
        self.line_free = None
        if mode == "plain":
            return [line(*self.plain(task), "plain")]
        if mode == "json":
            return [line(*self.json_answer(task), "json")]
        if mode == "thinking":
            return [line(*self.thinking(task), "thinking")]
        first, second = self.tool_turns(task)
        keep_result = self.rng.random() < TOOL_RESULT_SHARE
        return [line(*first, "tool_call")] + ([line(*second, "tool_result")] if keep_result else [])


TASK_WEIGHTS = {"add": 0.30, "sub": 0.26, "mul": 0.10, "capital": 0.19, "unit": 0.15}
# With tools, "unit" means a conversion (convert_units); they get a larger share there.
TOOL_TASK_WEIGHTS = {"add": 0.22, "sub": 0.20, "mul": 0.13, "capital": 0.20, "unit": 0.25}
MODE_WEIGHTS = {"plain": 0.57, "json": 0.11, "thinking": 0.19, "tool": 0.13}
# A tool conversation gives the tool_call line, and with this probability also the tool_result line (the answer
# after the tool's message: learned early, and each such line is as long as the tool_call one).
TOOL_RESULT_SHARE = 0.4


def draw(rng, weights):
    return rng.choices(list(weights), weights=list(weights.values()))[0]


def generate_split(sampler, n_lines, task_weights=None):
    out = []
    task_weights = task_weights or TASK_WEIGHTS
    while len(out) < n_lines:
        mode = draw(sampler.rng, MODE_WEIGHTS)
        out += sampler.lines(draw(sampler.rng, TOOL_TASK_WEIGHTS if mode == "tool" else task_weights), mode)
    return out[:n_lines]


def parse_task_weights(spec):
    """"add=0.28,sub=0.30,mul=0.16,capital=0.14,unit=0.12" -> {task: weight} (every task, weights > 0)."""
    weights = {}
    for item in spec.split(","):
        task, _, value = item.partition("=")
        weights[task.strip()] = float(value)
    if set(weights) != set(TASK_WEIGHTS) or min(weights.values()) <= 0:
        raise ValueError(f"--task-weights needs a positive weight for each of {sorted(TASK_WEIGHTS)}: {spec!r}")
    return {t: weights[t] for t in TASK_WEIGHTS}


# ----------------------------------------------------------------------------------------------------------
# The evaluation set
# ----------------------------------------------------------------------------------------------------------

EVAL_ANSWER_MIX = {"add": 60, "sub": 50, "mul": 10, "capital": 50, "unit": 30}  # 200 plain questions
EVAL_OTHER = {"json": 10, "thinking": 10, "tool": 10}  # tool gives a tool_call and a tool_result check each


def heldout_reason(phrasing):
    """Why a held-out phrasing is held out: an unseen "core", "opener" or "suffix", or an unseen "combination"."""
    kind, core, opener, _, suffix, _ = phrasing
    if core not in TRAIN_CORES[kind]:
        return "core"
    if opener not in TRAIN_OPENERS:
        return "opener"
    return "suffix" if suffix not in TRAIN_SUFFIXES else "combination"


def normalise(text):
    """Case and runs of whitespace do not make a question new: "Which city is the capital of Peru? Thank you!" and
    "which city is the capital of peru?  thank you!" are one text."""
    return " ".join(text.casefold().split())


def user_texts(request):
    """The normalised text of every user message of a request (earlier turns included)."""
    return [normalise(m["content"]) for m in request["messages"]
            if m.get("role") == "user" and isinstance(m.get("content"), str)]


def training_texts(rows):
    return {t for row in rows for t in user_texts(row["request"])}


def read_training_texts(path):
    """training_texts of a train.jsonl written earlier (e.g. an earlier run the model was also trained on)."""
    with open(path, encoding="utf-8") as f:
        return {t for line in f for t in user_texts(json.loads(line)["request"])}


def sealed_excluded_pairs(evals):
    """The CI set's addition and subtraction pairs (mul's held-out pairs are too few to share out, see main)."""
    return {pair_key(e["task"], *e["item"]) for e in evals if e["task"] in ("add", "sub")}


def eval_lines(seed, frac, phrasing_frac=0.2, split="eval", exclude_texts=frozenset(), exclude_pairs=frozenset()):
    """Held-out checks with what each must produce. Plain questions are unique (no repeated prompt).

    split "eval" is the CI set (models/demo/heldout_eval.jsonl: its rules are those of the phrasing and the number
    pair, see the module docstring). split "sealed" draws a second set from its own random stream and refuses a
    check whose user text equals (after normalise) one of `exclude_texts` — the training texts and the first set's
    — or whose arithmetic pair is in `exclude_pairs`: the set no training decision has looked at.
    With nothing to exclude no draw is refused, so the CI set is what it always was."""
    sampler = Sampler(split, seed, frac, phrasing_frac)
    seen, out = set(), []
    prefix = "" if split == "eval" else split + "-"

    def allowed(task, request, item):
        if any(t in exclude_texts for t in user_texts(request)):
            return False
        return not (task in OPS and pair_key(task, *item) in exclude_pairs)

    def add_unique(kind, task, request, expect, answer, max_tokens, item, phrasing):
        key = json.dumps(request, sort_keys=True)
        if key in seen or not allowed(task, request, item):
            return False
        seen.add(key)
        request = dict(request, max_tokens=max_tokens)
        out.append({"id": f"{prefix}{kind}-{len(out):03d}", "kind": kind, "task": task, "request": request,
                    "answer": answer, "item": list(item), "expect": expect, "phrasing": phrasing,
                    "held_out_by": heldout_reason(phrasing)})
        return True

    for task, count in EVAL_ANSWER_MIX.items():
        done = 0
        while done < count:
            text, answer, _, item, phrasing = sampler.question(task)
            request = {"messages": sampler.base_messages() + [{"role": "user", "content": text}]}
            done += add_unique("answer", task, request, {"content": str(answer)}, answer, 16, item, phrasing)
    tasks = list(EVAL_ANSWER_MIX)
    # The loops below draw again only after a refused check; the CI set refuses none (each loop adds one per draw).
    i = 0
    while i < EVAL_OTHER["json"]:
        task = tasks[i % len(tasks)]
        text, answer, _, item, phrasing = sampler.question(task)
        request = {"messages": [{"role": "user", "content": text}], "response_format": {"type": "json_object"}}
        i += add_unique("json", task, request, {"content_json": {"answer": answer}}, answer, 24, item, phrasing) or not prefix
    i = 0
    while i < EVAL_OTHER["thinking"]:
        task = tasks[i % len(tasks)]
        request, reply, answer, item, phrasing = sampler.thinking(task)
        i += add_unique("thinking", task, request, {"content": str(answer), "reasoning_nonempty": True}, answer, 128,
                        item, phrasing) or not prefix
    i = 0
    while i < EVAL_OTHER["tool"]:
        task = tasks[i % len(tasks)]
        (req1, _, call, item, phrasing), (req2, _, result, _, _) = sampler.tool_turns(task)
        if prefix and not (allowed(task, req1, item) and allowed(task, req2, item)):
            continue  # both turns of a tool check or neither
        add_unique("tool_call", task, req1, {"tool_call": call}, call, 128, item, phrasing)
        add_unique("tool_result", task, req2, {"content": str(result)}, result, 16, item, phrasing)
        i += 1
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
    ap.add_argument("--train-lines", type=int, default=250000)
    ap.add_argument("--heldout-lines", type=int, default=2000)
    ap.add_argument("--heldout-frac", type=float, default=0.10, help="fraction of number pairs held out")
    ap.add_argument("--phrasing-frac", type=float, default=0.20,
                    help="fraction of combinations of training phrasing parts held out")
    ap.add_argument("--train-seed", type=int, default=None,
                    help="seed of the training split only (default --seed): fresh training lines, the same "
                         "held-out lines and evaluation set; the held-out rules do not depend on any seed")
    ap.add_argument("--task-weights", default="",
                    help="task mix of the training split's non-tool lines, e.g. "
                         "add=0.28,sub=0.30,mul=0.16,capital=0.14,unit=0.12 (default: TASK_WEIGHTS)")
    ap.add_argument("--suffix-none", type=float, default=None,
                    help="share of training questions without a suffix (default PART_WEIGHTS: 0.40); held-out "
                         "lines keep the default")
    ap.add_argument("--exclude-train", action="append", default=[], metavar="TRAIN_JSONL",
                    help="the train.jsonl of an earlier run the model also learned from (repeatable): the sealed "
                         "evaluation set avoids its texts as well")
    ap.add_argument("--extra-suffixes", type=float, default=0.0,
                    help="share of suffixed training questions whose suffix comes from EXTRA_SUFFIXES (default 0)")
    ap.add_argument("--free-phrasing", type=float, default=0.0,
                    help="share of training questions phrased freely: reworded cores (EXTRA_CORES), numbers as "
                         "words, country names in any case, case and punctuation noise, more JSON / thinking / tool "
                         "instructions (default 0; issue 19)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    train_seed = args.seed if args.train_seed is None else args.train_seed
    task_weights = parse_task_weights(args.task_weights) if args.task_weights else None
    train = generate_split(Sampler("train", train_seed, args.heldout_frac, args.phrasing_frac, args.suffix_none,
                                   args.extra_suffixes, args.free_phrasing), args.train_lines, task_weights)
    heldout = generate_split(Sampler("heldout", args.seed, args.heldout_frac, args.phrasing_frac), args.heldout_lines)
    evals = eval_lines(args.seed, args.heldout_frac, args.phrasing_frac)
    seen_in_training = training_texts(train)
    for path in args.exclude_train:
        seen_in_training |= read_training_texts(path)
    # The second, sealed set: text-disjoint from every training text given and from the CI set, and no addition or
    # subtraction pair of the CI set. (Multiplication has 8 held-out pairs in all, 7 of them in the CI set: excluding
    # them would leave one pair for every sealed mul check, so mul shares pairs, never texts.) train.py never reads
    # it (test_demo_model.py checks): no training decision looks at it.
    sealed = eval_lines(args.seed, args.heldout_frac, args.phrasing_frac, "sealed",
                        seen_in_training | {t for e in evals for t in user_texts(e["request"])},
                        sealed_excluded_pairs(evals))
    write_jsonl(os.path.join(args.out, "train.jsonl"), train)
    write_jsonl(os.path.join(args.out, "heldout.jsonl"), heldout)
    write_jsonl(os.path.join(args.out, "heldout_eval.jsonl"), evals)
    write_jsonl(os.path.join(args.out, "heldout_eval_sealed.jsonl"), sealed)
    summary = {"seed": args.seed, "train_seed": train_seed, "task_weights": task_weights or TASK_WEIGHTS,
               "train_suffix_none": args.suffix_none if args.suffix_none is not None else PART_WEIGHTS["suffix_none"],
               "train_extra_suffixes": args.extra_suffixes,
               "train_free_phrasing": args.free_phrasing,
               "train_free_families": dict(collections.Counter(f for l in train for f in l.get("free", {}).get("families", []))),
               "heldout_frac": args.heldout_frac, "phrasing_frac": args.phrasing_frac,
               "eval_answers_held_out_by": dict(collections.Counter(
                   l["held_out_by"] for l in evals if l["kind"] == "answer")),
               # CI-set checks whose user text equals a training text after normalise (the CI set's rule is the
               # phrasing, not the text: a fact question can come out word for word as a training one).
               "eval_checks_equal_to_a_training_text": sorted(
                   e["id"] for e in evals if any(t in seen_in_training for t in user_texts(e["request"]))),
               "sealed": stats(sealed),
               "train_distinct_questions": len({q for l in train for q in [l["request"]["messages"][-1]["content"]]}),
               "train": stats(train),
               "heldout": stats(heldout), "eval": stats(evals)}
    with open(os.path.join(args.out, "corpus_stats.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
