#!/usr/bin/env python3
"""Expected DeepSeek-V4 prompts for the chat-encoding fixtures, from the reference encoder.

For every OpenAI chat-completions request body tests/fixtures/chat/requests/NAME.json this writes
tests/fixtures/chat/expected/NAME.txt: the prompt string deepseek-ai's reference encoder `encoding_dsv4.py`
renders for it (UTF-8, no trailing newline). `ChatEncoding.Fixtures` (tests/text/chat_encoding_test.cpp) checks
that src/text/chat_encoding.cpp renders every one byte for byte.

The reference is not part of this repository. Put the file shipped with the V4 checkpoints
(deepseek-ai/DeepSeek-V4-Flash, encoding/encoding_dsv4.py; SGLang carries the same code as
python/sglang/srt/entrypoints/openai/encoding_dsv4.py) at .deps/reference/encoding_dsv4.py (git-ignored) or pass
--reference PATH. It needs only the Python standard library:

    /usr/bin/python3 tests/reference/chat_reference.py            # rewrite expected/*.txt
    /usr/bin/python3 tests/reference/chat_reference.py --check    # compare, write nothing; exit 1 on a difference

How a request maps onto the reference's inputs
==============================================
This mapping is ours (the reference takes a message list, not an OpenAI request); src/text/chat_request.cpp
(reading the request) and src/text/chat_encoding.cpp (turns, rendering) implement the same, and reject what
`to_reference_inputs` rejects. It follows what SGLang's and vLLM's
OpenAI servers do for V4 where they agree, and says where it differs.

* messages (required, non-empty). Roles system, developer, user, assistant, tool; any other role is an error.
  Every message becomes a fresh dict holding only the keys below, so unknown keys (name, prefix, ...) never
  reach the encoder.
  - content: a string; null or absent -> ""; an array of {"type": "text", "text": ...} parts -> the texts joined
    with "\\n\\n" (how the reference joins the text parts of a list-valued tool result). Any other part type is
    an error: V4 reads text only.
  - developer content must be non-empty (the reference asserts it).
  - assistant: reasoning_content (DeepSeek's name) or, failing that, reasoning (vLLM's name) -> reasoning_content;
    tool_calls -> [{"id", "type": "function", "function": {"name", "arguments"}}]. function.name must be a
    non-empty string. function.arguments must be a JSON text of an object (the reference's fallback for text that
    is not JSON, {"arguments": text}, is an error here: "...arguments: not valid JSON"), or an object; blank text
    means no arguments ("{}"). Keys keep the client's order.
  - tool: tool_call_id (absent -> "") and content as above (null -> "", where the reference would print "None").
* tools: [{"type": "function", "function": {...}}], each function object passed as written (vLLM does the same;
  SGLang first round-trips it through its pydantic model, which adds default fields). A non-empty list goes into
  the first message when that is a system message, else into a new {"role": "system", "content": ""} put first
  (SGLang's rule; an empty system message renders nothing).
* response_format: {"type": "json_schema", "json_schema": {"schema": S, ...}} -> S; {"type": "json_object"} ->
  {"type": "object"}; {"type": "text"} -> nothing. The result goes into that same system message as
  "response_format" (created the same way when needed); the reference renders it as "## Response Format: ...".
  Neither SGLang nor vLLM renders response_format into V4 prompts; the issue asks for it.
* tool_choice: validated (none | auto | required | {"type": "function", "function": {"name": one of the tools}})
  but does not change the prompt; it constrains the output, not the encoding.
* chat_template_kwargs.thinking (or .enable_thinking, vLLM's alias): true -> thinking_mode "thinking", else "chat".
* reasoning_effort: "max" or "xhigh" -> "max"; "high", "medium" or "low" -> "high" (renders like None);
  "none", "minimal" or absent -> None; anything else is an error. SGLang and vLLM pass "max" / "high" and turn
  everything else into None, which renders the same for the values both accept.
* encode_messages(messages, thinking_mode, reasoning_effort=...) with its defaults: context=None,
  drop_thinking=True, add_default_bos_token=True.
* JSON: requests are read keeping key order; NaN / Infinity literals are errors (C++'s parser rejects them).
"""

import argparse
import importlib.util
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "chat"
DEFAULT_REFERENCE = ROOT / ".deps" / "reference" / "encoding_dsv4.py"
FIXTURES_V41 = ROOT / "tests" / "fixtures" / "chat_v41"
DEFAULT_REFERENCE_V41 = ROOT / ".deps" / "reference" / "encoding_dsv41.py"


class BadRequest(ValueError):
    pass


def _reject_constant(name):
    raise BadRequest(f"not valid JSON: {name}")


def load_json(text):
    return json.loads(text, parse_constant=_reject_constant)


def _content(msg, field):
    content = msg.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{field}: expected a string, an array of text parts or null")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise BadRequest(f"{field}[{j}]: only text parts are supported")
        texts.append(part["text"])
    return "\n\n".join(texts)


def _arguments(function, field):
    args = function.get("arguments")
    if isinstance(args, dict):
        return json.dumps(args, ensure_ascii=False)
    if not isinstance(args, str):
        raise BadRequest(f"{field}: expected a JSON string")
    if not args.strip(" \t\r\n"):
        return "{}"
    try:
        parsed = load_json(args)
    except (ValueError, BadRequest) as err:
        raise BadRequest(f"{field}: not valid JSON ({err})")
    if not isinstance(parsed, dict):
        raise BadRequest(f"{field}: expected a JSON object of named arguments")
    return args


def _message(msg, field):
    role = msg.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise BadRequest(f"{field}.role: expected system, developer, user, assistant or tool")
    out = {"role": role, "content": _content(msg, field + ".content")}
    if role == "developer" and not out["content"]:
        raise BadRequest(f"{field}.content: a developer message needs non-empty content")
    if role == "assistant":
        for key in ("reasoning_content", "reasoning"):
            if msg.get(key) is not None:
                out["reasoning_content"] = msg[key]
                break
        calls = []
        for k, call in enumerate(msg.get("tool_calls") or []):
            f = f"{field}.tool_calls[{k}]"
            function = call.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                raise BadRequest(f"{f}.function.name: missing")
            calls.append({"id": call.get("id") or "", "type": "function",
                          "function": {"name": function["name"],
                                       "arguments": _arguments(function, f + ".function.arguments")}})
        out["tool_calls"] = calls
    if role == "tool":
        out["tool_call_id"] = msg.get("tool_call_id") or ""
    return out


def _response_format(request):
    fmt = request.get("response_format")
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "object"}
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise BadRequest("response_format.json_schema.schema: missing")
        return schema
    raise BadRequest("response_format.type: expected text, json_object or json_schema")


def _reasoning_effort(request):
    effort = request.get("reasoning_effort")
    if effort in (None, "none", "minimal"):
        return None
    if effort in ("max", "xhigh"):
        return "max"
    if effort in ("high", "medium", "low"):
        return "high"
    raise BadRequest("reasoning_effort: unknown value")


def _reasoning_budget(request):
    """V4.1 (encoding_dsv41): the value goes to the reference as given; it maps low/high/xhigh/max and checks
    integers itself. Only what JSON cannot say the same way in both languages is refused here: a bool is not an
    int budget (Python's type(True) is bool, so the reference refuses it too)."""
    effort = request.get("reasoning_effort")
    if isinstance(effort, bool) or isinstance(effort, float):
        raise BadRequest("reasoning_effort: expected a string or an integer")
    return effort


def to_reference_inputs(request, encoding="v4"):
    """An OpenAI request body -> (messages, kwargs) for encoding_dsv4.encode_messages (or encoding_dsv41's)."""
    raw = request.get("messages")
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages: expected a non-empty array")
    messages = [_message(m, f"messages[{i}]") for i, m in enumerate(raw)]

    tools = request.get("tools") or []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise BadRequest(f"tools[{i}]: expected a function tool")
    response_format = _response_format(request)
    if tools or response_format is not None:
        if messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": ""})
        if tools:
            messages[0]["tools"] = tools
        if response_format is not None:
            messages[0]["response_format"] = response_format

    kwargs = request.get("chat_template_kwargs") or {}
    thinking = bool(kwargs.get("thinking", False)) or bool(kwargs.get("enable_thinking", False))
    effort = _reasoning_budget(request) if encoding == "v41" else _reasoning_effort(request)
    return messages, {"thinking_mode": "thinking" if thinking else "chat", "reasoning_effort": effort}


def load_reference(path):
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoding", choices=["v4", "v41"], default="v4",
                        help="v41: SGLang's encoding_dsv41.py (DeepSeek-V4.1) at .deps/reference/encoding_dsv41.py, "
                             "fixtures in tests/fixtures/chat_v41")
    parser.add_argument("--reference", type=pathlib.Path, default=None)
    parser.add_argument("--check", action="store_true", help="compare with expected/*.txt instead of writing")
    args = parser.parse_args()
    fixtures = FIXTURES_V41 if args.encoding == "v41" else FIXTURES
    if args.reference is None:
        args.reference = DEFAULT_REFERENCE_V41 if args.encoding == "v41" else DEFAULT_REFERENCE
    if not args.reference.is_file():
        sys.exit(f"reference encoder not found at {args.reference} (see this script's docstring)")
    reference = load_reference(args.reference)

    requests = sorted((fixtures / "requests").glob("*.json"))
    (fixtures / "expected").mkdir(exist_ok=True)
    differences = 0
    for path in requests:
        request = load_json(path.read_text(encoding="utf-8"))
        messages, kwargs = to_reference_inputs(request, args.encoding)
        prompt = reference.encode_messages(messages, **kwargs)
        target = fixtures / "expected" / (path.stem + ".txt")
        if args.check:
            if not target.is_file() or target.read_bytes() != prompt.encode("utf-8"):
                print(f"DIFFERENT: {target.relative_to(ROOT)}")
                differences += 1
        else:
            target.write_bytes(prompt.encode("utf-8"))
    print(f"{len(requests)} requests, {differences} different" if args.check else f"wrote {len(requests)} prompts")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
