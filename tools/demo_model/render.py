#!/usr/bin/env python3
"""(request, reply) -> the exact token ids the demo model trains on: prompt ids + completion ids.

Why this shape: at inference Strata encodes a chat request into prompt pieces, tokenizes them, and the model
continues greedily. Training must therefore see exactly that prompt, followed by the assistant turn exactly as
the reference encoder renders one. So:

  1. the request maps onto the reference encoder's inputs with tests/reference/chat_reference.py's
     `to_reference_inputs` — the mapping src/text/chat_{request,encoding}.cpp implement and its fixtures check (tools
     and response_format into a leading system message, json_object -> {"type": "object"},
     chat_template_kwargs.thinking -> thinking mode, ...). Using that file, not a copy, keeps the training
     prompts identical to Strata's whenever the chat-encoding fixtures pass;
  2. prompt text = encode_messages(messages) (the generation prompt ends in "<｜Assistant｜></think>" or
     "...<think>"); completion text = encode_messages(messages + [reply]) minus that prefix (checked to be a
     prefix), which is "{reasoning}</think>{content}{\n\n tool_calls block}<｜end▁of▁sentence｜>";
  3. the reference encoder returns one string; it is split back into pieces on the control-token spellings
     the encoder itself inserts (its own constants: BOS, EOS, <｜User｜>, <｜Assistant｜>, <think>, </think>,
     ｜DSML｜, <｜latest_reminder｜> and the task tokens). That split is exact because `check_no_control_text`
     rejects any request or reply whose text contains one of those spellings, so every occurrence in the
     rendered string was inserted by the encoder. Note that the encoder also inserts them inside the tools
     section ("<｜DSML｜tool_calls>", "<think>" in TOOLS_TEMPLATE); those are control tokens too, as they are
     when the real V4 tokenizer encodes the reference string;
  4. control pieces become their token ids; text pieces are BPE-encoded on their own (HF `tokenizers`,
     add_special_tokens=False), after checking that no added-token spelling occurs in them, so a text piece
     can never turn into a special token — the same rule Strata's chat encoding follows.

Steps 1-3 need only the stdlib (and the reference encoder, a stdlib module); step 4 needs `tokenizers`.

usage:
  python3 tools/demo_model/render.py selftest --in CORPUS.jsonl     (stdlib; --encoder PATH, default
                                                                    .deps/reference/encoding_dsv4.py)
  python3 tools/demo_model/render.py show --in CORPUS.jsonl [--n 3]
  python3 tools/demo_model/render.py tokenize --tokenizer DIR --in CORPUS.jsonl --out OUT.jsonl   (tokenizers)
"""
import argparse
import importlib.util
import json
import os
import re
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_ENCODER = os.path.join(REPO, ".deps", "reference", "encoding_dsv4.py")
DEFAULT_CHAT_REFERENCE = os.path.join(REPO, "tests", "reference", "chat_reference.py")


def load_encoder(path):
    """The reference encoder module, imported from a file (it is not committed, so not importable by name)."""
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    if spec is None:
        raise SystemExit(f"cannot import the reference encoder from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for attr in ("encode_messages", "parse_message_from_completion_text", "bos_token", "eos_token", "dsml_token"):
        if not hasattr(module, attr):
            raise SystemExit(f"{path}: not the DeepSeek-V4 reference encoder (no '{attr}')")
    return module


def control_spellings(enc):
    """Every control-token spelling the encoder can insert, longest first (so no spelling shadows another)."""
    spellings = {enc.bos_token, enc.eos_token, enc.USER_SP_TOKEN, enc.ASSISTANT_SP_TOKEN,
                 enc.LATEST_REMINDER_SP_TOKEN, enc.thinking_start_token, enc.thinking_end_token, enc.dsml_token}
    spellings.update(getattr(enc, "DS_TASK_SP_TOKENS", {}).values())
    return sorted(spellings, key=len, reverse=True)


# ----------------------------------------------------------------------------------------------------------
# Strings
# ----------------------------------------------------------------------------------------------------------


def load_request_mapping(path=DEFAULT_CHAT_REFERENCE):
    """tests/reference/chat_reference.py's to_reference_inputs: request -> (messages, encode_messages kwargs)."""
    spec = importlib.util.spec_from_file_location("chat_reference", path)
    if spec is None or not os.path.exists(path):
        raise SystemExit(f"cannot find the request mapping {path} (tests/reference/chat_reference.py)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.to_reference_inputs


def render_text(enc, to_inputs, request, reply=None):
    """(prompt text, completion text); completion is None without a reply.

    The completion is what the full conversation (request messages + reply) adds to the generation prompt,
    both rendered through the same request mapping, so the reply is normalised exactly like a history turn.
    """
    messages, kwargs = to_inputs(request)
    prompt = enc.encode_messages(messages, **kwargs)
    if reply is None:
        return prompt, None
    full_messages, full_kwargs = to_inputs(dict(request, messages=list(request["messages"]) + [reply]))
    full = enc.encode_messages(full_messages, **full_kwargs)
    if not full.startswith(prompt):
        raise ValueError("the rendered conversation does not extend the generation prompt:\n"
                         f"prompt: {prompt!r}\nfull:   {full!r}")
    completion = full[len(prompt):]
    if not completion.endswith(enc.eos_token):
        raise ValueError(f"completion does not end with EOS: {completion!r}")
    return prompt, completion


def strings_in(value):
    """Every string inside a JSON value (keys too): all of them end up in the prompt somewhere."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


def check_no_control_text(spellings, *values):
    """Refuse text that spells a control token: it would make the piece split ambiguous."""
    for value in values:
        for s in strings_in(value):
            for sp in spellings:
                if sp in s:
                    raise ValueError(f"text contains the control spelling {sp!r}: {s!r}")


def split_pieces(text, spellings):
    """[(text, is_control)] with no empty text pieces; concatenating the pieces gives `text` back."""
    pattern = "(" + "|".join(re.escape(s) for s in spellings) + ")"
    pieces = []
    for i, part in enumerate(re.split(pattern, text)):
        if part:
            pieces.append((part, i % 2 == 1))
    return pieces


class Renderer:
    """Strings and pieces for corpus lines, with the reference encoder loaded once."""

    def __init__(self, encoder_path=DEFAULT_ENCODER, chat_reference_path=DEFAULT_CHAT_REFERENCE):
        self.enc = load_encoder(encoder_path)
        self.to_inputs = load_request_mapping(chat_reference_path)
        self.spellings = control_spellings(self.enc)

    def pieces(self, request, reply=None):
        check_no_control_text(self.spellings, request, reply or {})
        prompt, completion = render_text(self.enc, self.to_inputs, request, reply)
        return (split_pieces(prompt, self.spellings),
                None if completion is None else split_pieces(completion, self.spellings))

    def thinking_mode(self, request):
        return self.to_inputs(request)[1]["thinking_mode"]

    def parse(self, completion_text, request):
        """The reference parser's reading of a completion (raises on malformed output)."""
        return self.enc.parse_message_from_completion_text(completion_text, self.thinking_mode(request))


# ----------------------------------------------------------------------------------------------------------
# Token ids
# ----------------------------------------------------------------------------------------------------------


class PieceTokenizer:
    """Pieces -> ids with HF `tokenizers`: control pieces by id, text pieces BPE-encoded without special parsing."""

    def __init__(self, tokenizer_json):
        from tokenizers import Tokenizer  # the GPU machine has it; the stdlib paths above do not need it

        self.tok = Tokenizer.from_file(tokenizer_json)
        with open(tokenizer_json, encoding="utf-8") as f:
            added = [t["content"] for t in json.load(f)["added_tokens"]]
        self.added_pattern = re.compile("|".join(re.escape(s) for s in sorted(added, key=len, reverse=True)))
        self.cache = {}

    def control_id(self, spelling):
        i = self.tok.token_to_id(spelling)
        if i is None:
            raise ValueError(f"control token {spelling!r} is not in the tokenizer")
        return i

    def prime(self, texts):
        """Encode many text pieces at once (encode_batch runs in parallel); later lookups hit the cache."""
        todo = sorted({t for t in texts if t not in self.cache})
        for t in todo:
            m = self.added_pattern.search(t)
            if m:
                raise ValueError(f"text piece contains the added-token spelling {m.group(0)!r}: {t!r}")
        for start in range(0, len(todo), 20000):
            chunk = todo[start:start + 20000]
            for t, e in zip(chunk, self.tok.encode_batch(chunk, add_special_tokens=False)):
                self.cache[t] = e.ids

    def ids(self, pieces):
        self.prime([t for t, control in pieces if not control])
        out = []
        for text, control in pieces:
            out.extend([self.control_id(text)] if control else self.cache[text])
        return out

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def tokenize_lines(renderer, tokenizer, lines, log=print):
    """[{prompt, completion, task, mode}] for corpus lines (eval lines, without a reply, get completion None)."""
    rendered = [renderer.pieces(line["request"], line.get("reply")) for line in lines]
    tokenizer.prime([t for p, c in rendered for t, control in p + (c or []) if not control])
    out = []
    for line, (p, c) in zip(lines, rendered):
        out.append({"prompt": tokenizer.ids(p), "completion": None if c is None else tokenizer.ids(c),
                    "task": line.get("task"), "mode": line.get("mode", line.get("kind"))})
    log(f"tokenized {len(out)} lines ({len(tokenizer.cache)} distinct text pieces)")
    return out


# ----------------------------------------------------------------------------------------------------------
# Self-test (stdlib): every line renders, the split is exact, and the reference parser reads the reply back
# ----------------------------------------------------------------------------------------------------------


def same_message(parsed, reply):
    """Does the reference parser's reading of the completion equal the reply we rendered?"""
    if parsed["content"] != (reply.get("content") or ""):
        return False
    if parsed["reasoning_content"] != (reply.get("reasoning_content") or ""):
        return False
    want = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.get("tool_calls") or []]
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed["tool_calls"]]
    return want == got


def selftest(renderer, lines):
    """Raises on the first problem; returns counts and one example per mode."""
    examples, lengths = {}, []
    for n, line in enumerate(lines):
        request, reply = line["request"], line.get("reply")
        prompt_pieces, completion_pieces = renderer.pieces(request, reply)
        prompt_text, completion_text = render_text(renderer.enc, renderer.to_inputs, request, reply)
        for pieces, text in ((prompt_pieces, prompt_text), (completion_pieces, completion_text)):
            if pieces is None:
                continue
            assert "".join(t for t, _ in pieces) == text, f"line {n}: pieces do not rebuild the text"
            for t, control in pieces:
                assert control == (t in renderer.spellings), f"line {n}: piece {t!r} misclassified"
        if reply is not None:
            parsed = renderer.parse(completion_text, request)
            if not same_message(parsed, reply):
                raise AssertionError(f"line {n}: reference parser reads back {parsed}, expected {reply}")
        lengths.append(len(prompt_text) + len(completion_text or ""))
        mode = line.get("mode", line.get("kind"))
        examples.setdefault(mode, (prompt_pieces, completion_pieces))
    return {"lines": len(lines), "max_chars": max(lengths), "mean_chars": sum(lengths) / len(lengths)}, examples


def show_pieces(pieces):
    return "".join(f"[{t}]" if control else t for t, control in pieces)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["selftest", "show", "tokenize"])
    ap.add_argument("--encoder", default=DEFAULT_ENCODER, help="path of the reference encoding_dsv4.py")
    ap.add_argument("--chat-reference", default=DEFAULT_CHAT_REFERENCE, help="path of chat_reference.py")
    ap.add_argument("--in", dest="inp", required=True, help="corpus JSONL (train/heldout/heldout_eval)")
    ap.add_argument("--tokenizer", help="folder with tokenizer.json (tokenize)")
    ap.add_argument("--out", help="output JSONL (tokenize)")
    ap.add_argument("--n", type=int, default=3, help="lines to show")
    args = ap.parse_args()
    renderer = Renderer(args.encoder, args.chat_reference)
    lines = read_jsonl(args.inp)
    if args.command == "selftest":
        summary, examples = selftest(renderer, lines)
        for mode, (p, c) in examples.items():
            print(f"--- {mode}\n{show_pieces(p)}\n>>> {show_pieces(c) if c else '(no reply)'}")
        print(json.dumps(summary))
        print("render selftest: OK")
    elif args.command == "show":
        for line in lines[: args.n]:
            p, c = renderer.pieces(line["request"], line.get("reply"))
            print(show_pieces(p) + "\n>>> " + (show_pieces(c) if c else "(no reply)") + "\n")
    else:
        if not (args.tokenizer and args.out):
            sys.exit("tokenize needs --tokenizer and --out")
        tokenizer = PieceTokenizer(args.tokenizer.rstrip("/") + "/tokenizer.json")
        with open(args.out, "w") as f:
            for row in tokenize_lines(renderer, tokenizer, lines):
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
