#!/usr/bin/env python3
"""Writes the tokenizer parity corpus: tests/fixtures/tokenizer/corpus.jsonl, one JSON string per line.

Deterministic (a fixed seed, the standard library only): running it again gives the same bytes, so the expected
ids committed beside it (made by HF tokenizers through tests/reference/tokenizer_parity.py --write-expected) stay
valid. The text is synthetic but aimed at everything a byte-level BPE with DeepSeek's pre-tokenizer can get wrong:
mixed scripts, CJK (in and out of the Han/kana split range), emoji with joiners, skin tones, flags and keycaps,
combining marks (alone, stacked, after digits and spaces), numbers in every script, whitespace runs (spaces,
tabs, \\r\\n, NBSP, U+3000, NEL, U+180E, ZWSP), code, markup, the spellings of the added tokens of DeepSeek-V3
and V4 (whole, partial, nested, repeated), code points Unicode 15/16 added, control characters and very long
lines.

usage: python3 tools/build_tokenizer_corpus.py [--out tests/fixtures/tokenizer/corpus.jsonl] [--min-bytes 1100000]
"""
import argparse
import json
import os
import random

SEED = 20261129

WORDS = (
    "the of and to in is was for on that with as by it at from his an were are which this be or has had not but "
    "first one their its new after who they have her she two been other when there all during into school time "
    "may years more most only over city some world would where later up such used many can state about national "
    "out known university united then made government these house under system team three while each both between "
    "model token decode encode stream tensor kernel memory latency throughput request server cache prefix batch "
    "attention sparse compressed window expert router layer norm residual gradient weight float half precision "
    "Hello World DeepSeek Strata OpenAI Python JSON HTTP GPU CPU NVIDIA H200 FP8 BF16 MoE MLA CSA HCA API URL "
    "don't can't won't it's they're we've I'm you'll she'd O'Reilly rock'n'roll naïve café résumé façade coöperate "
    "Zürich Ærøskøbing São Paulo Kraków Dvořák Łódź İstanbul Straße ﬁnance ＡＢＣ ｆｕｌｌｗｉｄｔｈ"
).split()

CYRILLIC = "Привет мир как дела сегодня хорошая погода Москва Санкт-Петербург ёжик щука ЪЫЬ".split()
GREEK = "Γειά σου κόσμε καλημέρα Αθήνα φιλοσοφία ψυχή ΩΜΕΓΑ ἀρχὴ".split()
ARABIC = "مرحبا بالعالم كيف حالك اليوم السَّلَامُ عَلَيْكُمْ القاهرة ١٢٣ ٤٥٦".split()
HEBREW = "שלום עולם מה שלומך בְּרֵאשִׁית בָּרָא ירושלים".split()
DEVANAGARI = "नमस्ते दुनिया आप कैसे हैं हिन्दी भाषा क्षत्रिय १२३".split()
THAI = "สวัสดีชาวโลก ภาษาไทย กรุงเทพมหานคร ๑๒๓".split()
KOREAN = "안녕하세요 세계 한국어 문장입니다 서울특별시 ㄱㄴㄷ 한글".split()
OTHER = "გამარჯობა Բարեւ ሰላም வணக்கம் ສະບາຍດີ ជំរាបសួរ မင်္ဂလာပါ ᠮᠣᠩᠭᠣᠯ ꦲꦏ꧀ꦱꦫ 𐌰𐌱𐌲 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛".split()
JAPANESE = ["こんにちは世界", "日本語のテキスト", "ひらがなとカタカナ", "東京都渋谷区", "ラーメン", "ｶﾀｶﾅ半角", "〜ですね。", "「引用」"]
CHINESE_PUNCT = "，。！？、；：「」『』（）《》【】…—·"

EMOJI = [
    "😀", "😂", "🥲", "👍", "👍🏽", "👋🏿", "❤️", "❤", "🔥", "✨", "🚀", "🎉", "🤖", "🧠", "🫠", "🫶🏻",
    "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️", "🧑‍🤝‍🧑", "❤️‍🔥", "🐻‍❄️", "😶‍🌫️",
    "🇯🇵", "🇺🇸", "🇩🇪🇫🇷", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "#️⃣", "1️⃣", "*️⃣", "©️", "™", "↔️", "☺︎",
]
# Code points Unicode 15.0-16.0 added (HF's Oniguruma knows them; Debian 12's PCRE2 does not).
NEW_UNICODE = [
    "🩷", "🩵", "🩶", "🫎", "🫏", "🪼", "🪿", "🫨", "🛜",  # 15.0 emoji (So)
    "🫩", "🫆", "🪾", "🫜", "🪉", "🪏", "🫟",  # 16.0 emoji (So)
    "\U00011F04\U00011F05\U00011F06",  # Kawi letters (Lo, 15.0)
    "\U00011F00\U00011F03",  # Kawi signs (Mn)
    "\U0001E4D0\U0001E4D1\U0001E4F0\U0001E4F1",  # Nag Mundari letters and digits
    "\U00031350\U00031351\U000323AF",  # CJK Ext H (Lo)
    "\U0002EBF0\U0002EBF1",  # CJK Ext I (15.1)
    "\U0001D2C0\U0001D2C1\U0001D2D3",  # Kaktovik numerals (No)
    "\U000105C0\U000105C1",  # Todhri (16.0, Lo)
    "\U00016D40\U00016D41\U00016D70",  # Kirat Rai letters, digit
    "\U00011380\U00011381\U000113B8",  # Tulu-Tigalari letters + mark
    "\u0CF3", "\u0ECE", "\u0897", "\U00010EFD",  # new marks
    "\U0001CCF0\U0001CCF5",  # outlined digits (Nd, 16.0)
    "\u2FFC\u2FFF\u31EF",  # ideographic description (So, 15.1)
    "\U00010D4A\U00010D40",  # Garay letter, digit
]

V3_SPECIAL = [
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜User｜>", "<｜Assistant｜>", "<|EOT|>",
    "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<｜tool▁sep｜>", "<｜place▁holder▁no▁0｜>",
    "<｜place▁holder▁no▁17｜>", "<｜place▁holder▁no▁799｜>",
]
V4_SPELLINGS = [
    "<think>", "</think>", "｜DSML｜", "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", "<｜DSML｜invoke name=\"get_weather\">",
    "<｜DSML｜parameter name=\"city\" string=\"true\">", "</｜DSML｜parameter>", "</｜DSML｜invoke>", "<｜System｜>",
    "<｜latest_reminder｜>", "<｜action｜>", "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>",
    "<｜read_url｜>", "<｜begin▁sys｜>", "<｜search▁begin｜>", "<dsml:", "</dsml:",
]
NEAR_MISSES = [
    "<｜User", "<｜User｜", "｜User｜>", "<|User|>", "< ｜User｜>", "<｜user｜>", "<｜place▁holder▁no▁800｜>",
    "<｜place▁holder▁no▁1", "<｜<｜User｜>｜>", "<<｜User｜>>", "<｜end▁of▁sentence", "▁", "｜", "<|EOT|", "<|EOT|>>",
    "<think", "think>", "</think", "<｜｜DSML｜｜tool_calls>",
]

SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \t ",
          "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u0085", "\u180e", "\u200b", "\ufeff", "\u2028",
          "\u2029", "\x0b", "\x0c", " \r\n ", "\n\n\n\n", "        "]
COMBINING = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u20e3", "\ufe0f", "\u200d", "\u0338", "\u036f"]

CODE_SNIPPETS = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "const x = await fetch(`https://api.example.com/v1/items?id=${id}&limit=10`);\n",
    "if (a<b && c>=d) { x[i] = y->z; } else { return -1; }",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 100;",
    "#include <vector>\nstd::vector<int32_t> ids{1, 2, 3};\n",
    "{\"role\": \"user\", \"content\": \"hi\", \"n\": 3.14e-10, \"ok\": true, \"list\": [1,2,3]}",
    "<div class=\"box\" id='main'>&nbsp;&lt;tag&gt;</div>\r\n",
    "$ cargo build --release && ./target/release/app --port=8080 2>&1 | tee log.txt",
    "\\begin{equation} E = mc^2 \\quad \\sum_{i=1}^{n} x_i^2 \\end{equation}",
    "    @property\n    def name(self) -> str:\n        return self._name\n\n\n",
    "fn main() { let v: Vec<u8> = b\"\\x00\\xff\".to_vec(); println!(\"{:?}\", v); }",
    "x=1;y=2;z=x+y;print(z)//comment\n/* block */",
    "git commit -m 'fix: handle \\r\\n line endings' && git push origin main",
    "2026-11-29T10:45:03.123Z INFO [worker-3] request_id=7f3a9c latency_ms=12.5 status=200",
]


def rand_word(rng):
    r = rng.random()
    if r < 0.55:
        w = rng.choice(WORDS)
    elif r < 0.62:
        w = rng.choice(CYRILLIC + GREEK)
    elif r < 0.66:
        w = rng.choice(ARABIC + HEBREW)
    elif r < 0.70:
        w = rng.choice(DEVANAGARI + THAI + KOREAN + OTHER)
    elif r < 0.75:
        w = rng.choice(JAPANESE)
    elif r < 0.80:
        w = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(1, 8)))
    elif r < 0.85:
        w = rand_number(rng)
    elif r < 0.90:
        w = rng.choice(EMOJI)
    elif r < 0.93:
        w = rng.choice(NEW_UNICODE)
    elif r < 0.96:
        w = rng.choice(V3_SPECIAL + V4_SPELLINGS + NEAR_MISSES)
    else:
        w = rng.choice(WORDS) + rng.choice(COMBINING) * rng.randint(1, 3)
    if rng.random() < 0.08:
        w = w.capitalize() if rng.random() < 0.5 else w.upper()
    return w


def rand_number(rng):
    r = rng.random()
    if r < 0.3:
        return str(rng.randint(0, 10 ** rng.randint(1, 12)))
    if r < 0.45:
        return f"{rng.uniform(-1e4, 1e4):.{rng.randint(0, 6)}f}"
    if r < 0.55:
        return f"{rng.randint(1, 999):,}" + ",{:03d}".format(rng.randint(0, 999))
    if r < 0.65:
        return f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if r < 0.72:
        return "".join(chr(0x0660 + rng.randint(0, 9)) for _ in range(rng.randint(1, 7)))  # Arabic-Indic
    if r < 0.78:
        return "".join(chr(0xFF10 + rng.randint(0, 9)) for _ in range(rng.randint(1, 7)))  # fullwidth
    if r < 0.84:
        return "".join(chr(0x0966 + rng.randint(0, 9)) for _ in range(rng.randint(1, 5)))  # Devanagari
    if r < 0.90:
        return rng.choice(["½", "¾", "²", "³", "Ⅻ", "ⅷ", "①②③", "⑩", "𝟘𝟙", "٣.١٤", "10⁻³", "x²+y²"])
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(10, 40)))


def rand_sep(rng):
    r = rng.random()
    if r < 0.78:
        return " "
    if r < 0.88:
        return rng.choice([", ", ". ", "; ", ": ", "! ", "? ", " - ", " — ", "...", "'", '"', "(", ") ", "/", "_"])
    if r < 0.93:
        return rng.choice(CHINESE_PUNCT)
    return rng.choice(SPACES)


def sentence(rng, n_words):
    parts = []
    for _ in range(n_words):
        parts.append(rand_word(rng))
        parts.append(rand_sep(rng))
    return "".join(parts)


def prose_line(rng):
    return sentence(rng, rng.randint(3, 120))


def cjk_line(rng):
    out = []
    for _ in range(rng.randint(5, 80)):
        r = rng.random()
        if r < 0.5:
            out.append("".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(1, 12))))
        elif r < 0.65:
            out.append("".join(chr(rng.randint(0x3041, 0x3096)) for _ in range(rng.randint(1, 6))))
        elif r < 0.75:
            out.append("".join(chr(rng.randint(0x30A1, 0x30FA)) for _ in range(rng.randint(1, 6))))
        elif r < 0.82:
            out.append("".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(rng.randint(1, 5))))
        elif r < 0.88:
            out.append("".join(chr(rng.randint(0x3400, 0x4DBF)) for _ in range(rng.randint(1, 3))))  # Ext A
        elif r < 0.92:
            out.append("".join(chr(rng.randint(0x20000, 0x2A6DF)) for _ in range(rng.randint(1, 3))))  # Ext B
        else:
            out.append(rand_word(rng))
        out.append(rng.choice(CHINESE_PUNCT + "  ,.!?0123456789") if rng.random() < 0.4 else "")
    return "".join(out)


def code_line(rng):
    parts = [rng.choice(CODE_SNIPPETS) for _ in range(rng.randint(1, 6))]
    text = "".join(parts)
    if rng.random() < 0.3:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.2:
        text = text.replace("    ", "\t")
    return text


def whitespace_line(rng):
    out = []
    for _ in range(rng.randint(5, 60)):
        r = rng.random()
        if r < 0.4:
            out.append(rng.choice(SPACES) * rng.randint(1, 6))
        elif r < 0.55:
            out.append(rng.choice(COMBINING) * rng.randint(1, 3))
        elif r < 0.7:
            out.append(rand_number(rng))
        elif r < 0.8:
            out.append("".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(1, 3))))
        else:
            out.append(rand_word(rng))
    return "".join(out)


def special_line(rng):
    pool = V3_SPECIAL + V4_SPELLINGS + NEAR_MISSES
    out = []
    for _ in range(rng.randint(2, 40)):
        r = rng.random()
        if r < 0.45:
            out.append(rng.choice(pool))
        elif r < 0.6:
            out.append(rng.choice(SPACES))
        else:
            out.append(rand_word(rng))
    return "".join(out)


def chat_line(rng):
    user = sentence(rng, rng.randint(3, 30))
    answer = sentence(rng, rng.randint(3, 60))
    think = sentence(rng, rng.randint(0, 30))
    text = f"<｜begin▁of▁sentence｜>You are helpful.<｜User｜>{user}<｜Assistant｜><think>{think}</think>{answer}"
    if rng.random() < 0.4:
        text += ("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"q\" string=\"true\">"
                 f"{sentence(rng, 4)}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
    return text + "<｜end▁of▁sentence｜>"


def soup_line(rng):
    """Random code points from every plane (no surrogates), controls included."""
    out = []
    for _ in range(rng.randint(5, 200)):
        r = rng.random()
        if r < 0.3:
            cp = rng.randint(0x20, 0x7E)
        elif r < 0.4:
            cp = rng.randint(0x00, 0x1F)
        elif r < 0.6:
            cp = rng.randint(0x80, 0x2FFF)
        elif r < 0.8:
            cp = rng.randint(0x3000, 0xFFFF)
        else:
            cp = rng.randint(0x10000, 0x10FFFF)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0xFFFD
        out.append(chr(cp))
    return "".join(out)


def markup_line(rng):
    kinds = [
        lambda: f"# {sentence(rng, 5)}\n\n- **{rand_word(rng)}**: `{rand_word(rng)}`\n- [{rand_word(rng)}](https://x.io/{rand_word(rng)})\n",
        lambda: f"| {rand_word(rng)} | {rand_number(rng)} |\n|---|---:|\n| {rand_word(rng)} | {rand_number(rng)} |\n",
        lambda: "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/") for _ in range(rng.randint(20, 300))) + "==",
        lambda: " ".join(f"{rng.randint(0, 255):02x}" for _ in range(rng.randint(8, 64))),
        lambda: f"user{rng.randint(1, 999)}@example.com https://www.example.org/path/to/page.html?q={rand_word(rng)}#frag",
        lambda: f"\"{sentence(rng, 6)}\" — she said; (see p. {rng.randint(1, 500)}) [1] {{x}} <y> ~z~ ^w^ |v| \\u00e9",
    ]
    return "".join(rng.choice(kinds)() for _ in range(rng.randint(1, 4)))


def long_lines(rng):
    return [
        " " * 5000 + "x",
        "a" * 3000,
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2000)),
        "1234567890" * 300,
        "\n" * 500 + "end",
        "\r\n" * 300,
        "😀" * 500,
        "你好" * 1500,
        "".join(prose_line(rng) for _ in range(60)),
        "".join(cjk_line(rng) for _ in range(30)),
        "".join(code_line(rng) for _ in range(40)),
        "<｜User｜>" * 200 + "<｜Assistant｜>" * 100,
        "".join(rng.choice(COMBINING) for _ in range(300)),
        "e" + "\u0301" * 400,
        "ab" * 2000,
    ]


def edge_lines():
    return [
        "", " ", "\n", "\r\n", "\t", "a", "1", "12", "123", "1234", "12345678901234567890",
        "  leading and trailing  ", "Hello, world!", "你好，世界！", "こんにちは", "안녕", "😀", "👨‍👩‍👧‍👦",
        "<｜begin▁of▁sentence｜>", "<｜User｜>", "<|EOT|>", "<think>", "｜DSML｜", "<｜<｜User｜>", "<｜User｜>>",
        "a<｜User｜><｜User｜>b", "\u0301", " \u0301", "1\u0301", "\u00a0\u00a0x", "\u3000\u3000你", "x\u0085y",
        "x\u180ey", "\u200b", "\ufeff", "\x00", "\x00\x01\x02 control \x7f", "'s 're 'll 'd don't", "$$ ## !! ?? ,,",
        "  \n  \n  ", "x\n\n\ny\n \nz", " 123", "  123", "\n123", "abc123def", "abc 123 def", "3.14159", "1,000,000",
        "٠١٢٣٤٥٦٧٨٩", "０１２３", "Ⅻ", "½", "🩷", "🫩!", "a🫩!", "\U00031350\U00031351", "x\U0001D2C0\U0001D2C1y",
    ]


def build(min_bytes):
    rng = random.Random(SEED)
    lines = edge_lines() + long_lines(rng)
    makers = [prose_line] * 6 + [cjk_line] * 3 + [code_line] * 2 + [whitespace_line] * 2 + [special_line] * 2 + \
             [chat_line, soup_line, markup_line]
    total = sum(len(s.encode("utf-8")) for s in lines)
    while total < min_bytes:
        line = rng.choice(makers)(rng)
        lines.append(line)
        total += len(line.encode("utf-8"))
    return lines, total


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "tokenizer", "corpus.jsonl"))
    ap.add_argument("--min-bytes", type=int, default=1_100_000, help="UTF-8 bytes of text to generate at least")
    a = ap.parse_args()
    lines, total = build(a.min_bytes)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8", newline="\n") as f:
        for s in lines:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    print(f"wrote {len(lines)} texts, {total} UTF-8 bytes of text, to {a.out}")


if __name__ == "__main__":
    main()
