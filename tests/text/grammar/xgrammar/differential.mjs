// Differential test: Strata's grammar engine against XGrammar (npm @mlc-ai/web-xgrammar, the WASM build) on the
// same grammars and the same token sequences. For every case of corpus/*.json (JSON schemas, regexes and EBNF
// grammars from real-world use, with hand-written valid outputs), the texts are the positives, the hand-written
// negatives and seeded mutations of the positives (a character deleted, doubled, replaced, inserted, two swapped,
// the text cut short). Each text becomes token sequences over one shared vocabulary (all 256 bytes, a few dozen
// multi-byte tokens, a stop token): greedy longest-match and byte by byte. Both engines must agree on
//   * the index of the first token refused (or none), and whether the stop token is accepted after the last;
//   * for the positives, the whole allowed-token mask before every token.
// Strata's side is the strata_grammar_verdicts tool (grammar_verdicts.cpp); known dialect differences are listed in
// known_differences.json, each with the reason (docs/grammar.md, "Differential test against XGrammar").
//
//   node differential.mjs --strata build/strata_grammar_verdicts --work DIR [--report FILE]
// Exit 0: every verdict agrees (or differs only as known_differences.json says); 1: disagreements (listed).
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith("--") ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));
if (!args.strata || !args.work) {
  console.error("usage: node differential.mjs --strata STRATA_GRAMMAR_VERDICTS --work DIR [--report FILE]");
  process.exit(2);
}

// The package is a UMD bundle inside a "type": "module" package: imported as ESM it finds no CommonJS `exports`
// and assigns globalThis.xgrammar; its emscripten loader asks for require and __filename.
const require = createRequire(import.meta.url);
const entry = require.resolve("@mlc-ai/web-xgrammar");
globalThis.require = require;
globalThis.__filename = entry;
globalThis.__dirname = path.dirname(entry);
await import("@mlc-ai/web-xgrammar");
const xg = globalThis.xgrammar;
const xgVersion = JSON.parse(readFileSync(path.join(path.dirname(entry), "..", "package.json"), "utf8")).version;

// ---- vocabulary: bytes, then multi-byte tokens, then the stop token ----
const multiByte = ['{"', '"}', '": ', '":', '", "', '","', ' "', '["', '"]', "[{", "}]", "},", "true", "false", "null",
  "name", "type", "id", "value", "the", " the", "ing", "00", "12", "19", "20", "-0", "0.", ".5", "e+", "e-", "\\n",
  "\\u00", "\\\"", "  ", "\n  ", "\n", "é", "€", "😀", "http", "://", "www.", ".com", "@", "::=", "ab", "-", "T1", ":00", "Z"];
const vocabBytes = [];
for (let b = 0; b < 256; ++b) vocabBytes.push(Buffer.from([b]));
for (const t of multiByte) vocabBytes.push(Buffer.from(t, "utf8"));
const eos = vocabBytes.length;
vocabBytes.push(Buffer.from("</s>"));

// GPT-2's byte-level spelling (XGrammar's "byte_level" vocab type): printable bytes stand for themselves, the rest
// for code points from 256 up, in byte order.
const byteToChar = (() => {
  const table = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[b] = String.fromCodePoint(printable ? b : next++);
  }
  return table;
})();
const encoded = vocabBytes.map((bytes, id) => (id === eos ? "</s>" : [...bytes].map((b) => byteToChar[b]).join("")));

// Greedy longest match over the vocabulary (the stop token never matches text).
function tokenizeGreedy(bytes) {
  const ids = [];
  for (let i = 0; i < bytes.length;) {
    let best = bytes[i], bestLen = 1;
    for (let id = 256; id < eos; ++id) {
      const t = vocabBytes[id];
      if (t.length > bestLen && i + t.length <= bytes.length && bytes.subarray(i, i + t.length).equals(t)) {
        best = id;
        bestLen = t.length;
      }
    }
    ids.push(best);
    i += bestLen;
  }
  return ids;
}

// ---- texts: positives, negatives, mutations ----
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}
const pool = ['"', ",", "}", "]", "{", "[", "0", "9", "a", "Z", " ", "-", ".", ":", "\\", "\n", "é", "x", "1", "e"];
function mutations(text, random, count) {
  const chars = [...text];
  const out = [];
  for (let k = 0; k < count && chars.length > 0; ++k) {
    const i = Math.floor(random() * chars.length);
    const c = pool[Math.floor(random() * pool.length)];
    const m = [...chars];
    switch (k % 6) {
      case 0: m.splice(i, 1); break;
      case 1: m.splice(i, 0, m[i]); break;
      case 2: m[i] = c; break;
      case 3: m.splice(i, 0, c); break;
      case 4: if (i + 1 < m.length) [m[i], m[i + 1]] = [m[i + 1], m[i]]; else m.push(c); break;
      case 5: m.length = i; break;
    }
    out.push(m.join(""));
  }
  return out;
}

const cases = [];
for (const file of readdirSync(path.join(here, "corpus")).filter((f) => f.endsWith(".json")).sort()) {
  for (const c of JSON.parse(readFileSync(path.join(here, "corpus", file), "utf8"))) {
    const source = typeof c.source === "string" ? c.source : JSON.stringify(c.source);
    const random = rng([...c.name].reduce((h, ch) => (h * 31 + ch.charCodeAt(0)) >>> 0, 7));
    const texts = [], positive = new Set(c.positive);
    for (const t of [...c.positive, ...(c.negative || [])]) texts.push(t);
    for (const t of c.positive) texts.push(...mutations(t, random, 12));
    const unique = [...new Set(texts)];
    const sequences = [], masks = [], seqText = [];
    for (const t of unique) {
      const bytes = Buffer.from(t, "utf8");
      sequences.push(tokenizeGreedy(bytes));
      seqText.push(t);
      if (positive.has(t)) masks.push(sequences.length - 1);
      sequences.push([...bytes]);  // byte by byte too
      seqText.push(t);
    }
    cases.push({ name: `${file.replace(/\.json$/, "")}/${c.name}`, kind: c.kind, source, sequences, masks, seqText });
  }
}

// ---- Strata ----
mkdirSync(args.work, { recursive: true });
const input = path.join(args.work, "cases.json");
writeFileSync(input, JSON.stringify({
  vocab: vocabBytes.map((b) => b.toString("hex")), eos,
  cases: cases.map(({ name, kind, source, sequences, masks }) => ({ name, kind, source, sequences, masks })),
}));
const strata = JSON.parse(execFileSync(args.strata, [input], { maxBuffer: 1 << 30 }).toString());

// ---- XGrammar ----
const tokenizerInfo = await xg.TokenizerInfo.createTokenizerInfo(encoded, "byte_level", false, encoded.length, [eos]);
const compiler = await xg.GrammarCompiler.createGrammarCompiler(tokenizerInfo);
async function compileXGrammar(c) {
  if (c.kind === "json_schema") return compiler.compileJSONSchema(c.source);
  if (c.kind === "regex") return compiler.compileStructuralTag({ type: "structural_tag", format: { type: "regex", pattern: c.source } });
  return compiler.compileGrammar(c.source);
}
function maskIds(bitmask) {
  const ids = [];
  for (let id = 0; id < encoded.length; ++id) if ((bitmask[id >> 5] >>> (id & 31)) & 1) ids.push(id);
  return ids;
}

// known_differences.json: mask tokens only one side allows for a documented reason ("masks": [{"allowed_by":
// "xgrammar" | "strata", "tokens", "why"}]), and cases (or one text of a case) whose verdicts differ for a
// documented reason ("cases": [{"case", "text"?, "why"}]). Known differences are counted and listed, not failed.
const known = JSON.parse(readFileSync(path.join(here, "known_differences.json"), "utf8"));
// A mask rule may hold only after text ending with "after_ends_with".
const knownInMask = (side, id, prefix) => known.masks.some((m) => m.allowed_by === side && m.tokens.includes(id) &&
  (m.after_ends_with === undefined || prefix.endsWith(m.after_ends_with)));
const knownFor = (name, text) => known.cases.find((k) => k.case === name && (k.text === undefined || k.text === text));
const report = { xgrammar_version: xgVersion, cases: cases.length, sequences: 0, masks_compared: 0, agree: 0,
  known_differences: 0, known_by_case: {}, disagreements: [], compile_differences: [] };
const show = (t) => JSON.stringify(t);
for (let ci = 0; ci < cases.length; ++ci) {
  const c = cases[ci], s = strata.cases[ci];
  let compiled, xgError;
  try {
    compiled = await compileXGrammar(c);
  } catch (e) {
    xgError = String(e.message || e).split("\n")[0];
  }
  if (s.error !== undefined || xgError !== undefined) {
    if (s.error === undefined || xgError === undefined) {
      const entry = { case: c.name, strata: s.error ?? "compiles", xgrammar: xgError ?? "compiles" };
      const k = knownFor(c.name, undefined);
      if (k) entry.known = k.why;
      report.compile_differences.push(entry);
      if (!k) report.disagreements.push({ case: c.name, what: "compile", strata: entry.strata, xgrammar: entry.xgrammar });
    }
    continue;
  }
  for (let si = 0; si < c.sequences.length; ++si) {
    const ids = c.sequences[si], mine = s.results[si];
    const matcher = await xg.GrammarMatcher.createGrammarMatcher(compiled);
    const withMasks = c.masks.includes(si);
    let refusedAt = -1, maskDiff;
    for (let k = 0; k < ids.length; ++k) {
      if (withMasks) {
        const theirs = new Set(maskIds(await matcher.getNextTokenBitmask()));
        const ours = new Set(mine.masks[k]);
        report.masks_compared++;
        const prefix = Buffer.concat(ids.slice(0, k).map((i) => vocabBytes[i])).toString("utf8");
        const onlyXGrammar = [...theirs].filter((id) => !ours.has(id) && !knownInMask("xgrammar", id, prefix));
        const onlyStrata = [...ours].filter((id) => !theirs.has(id) && !knownInMask("strata", id, prefix));
        if ((onlyXGrammar.length || onlyStrata.length) && !maskDiff) {
          const spell = (list) => list.map((id) => `${id}:${show(vocabBytes[id].toString("latin1"))}`);
          maskDiff = { after: prefix, only_xgrammar: spell(onlyXGrammar), only_strata: spell(onlyStrata) };
        }
      }
      if (!matcher.acceptToken(ids[k])) {
        refusedAt = k;
        break;
      }
    }
    const ended = refusedAt < 0 && matcher.acceptToken(eos);
    matcher.dispose();
    report.sequences++;
    const text = c.seqText[si];
    if (refusedAt === mine.refused_at && ended === mine.ended && !maskDiff) {
      report.agree++;
      continue;
    }
    if (knownFor(c.name, text)) {
      report.known_differences++;
      report.known_by_case[c.name] = (report.known_by_case[c.name] || 0) + 1;
      continue;
    }
    const where = (r) => (r < 0 ? "none" : `token ${r} (${show(vocabBytes[ids[r]].toString("latin1"))}, after ${show(Buffer.concat(ids.slice(0, r).map((i) => vocabBytes[i])).toString("utf8"))})`);
    report.disagreements.push({ case: c.name, text, tokens: ids.length > 40 ? `${ids.length} tokens` : ids,
      xgrammar: { refused_at: where(refusedAt), ended }, strata: { refused_at: where(mine.refused_at), ended: mine.ended },
      ...(maskDiff ? { mask: maskDiff } : {}) });
  }
  compiled.dispose();
}

const summary = `xgrammar differential (web-xgrammar ${xgVersion}): ${report.cases} cases, ${report.sequences} token ` +
  `sequences, ${report.masks_compared} masks compared; ${report.agree} agree, ${report.known_differences} known ` +
  `dialect differences, ${report.compile_differences.length} cases one side refuses, ${report.disagreements.length} disagreements`;
for (const d of report.compile_differences) console.log(`compile difference: ${JSON.stringify(d)}`);
for (const [name, count] of Object.entries(report.known_by_case)) {
  console.log(`known difference: ${name}: ${count} sequences (${knownFor(name, undefined)?.why ?? "see known_differences.json"})`);
}
for (const d of report.disagreements.slice(0, 40)) console.log(`DISAGREE: ${JSON.stringify(d)}`);
console.log(summary);
if (args.report) writeFileSync(args.report, JSON.stringify({ ...report, summary }, null, 1) + "\n");
process.exit(report.disagreements.length ? 1 : 0);
