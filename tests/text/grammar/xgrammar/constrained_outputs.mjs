// Every constrained output validates: the corpus's JSON schemas (as response_format json_schema) and regexes (as
// structured_outputs.regex) go through `strata generate --input` (the server's request path, offline) at
// temperature 1, and every output that finished ("stop") is checked by an independent validator — ajv with
// ajv-formats for the schemas, JavaScript's RegExp (the u flag, anchored) for the regexes. Outputs cut by
// max_tokens are counted, not validated (a prefix need not be a document).
//
//   node constrained_outputs.mjs --strata BIN --model DIR --label demo|random --work DIR [--n 3] [--max-tokens 160]
// Exit 0: every finished output valid (and, with --min-finished K, at least K finished); 1 otherwise.
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Ajv from "ajv";
import addFormats from "ajv-formats";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith("--") ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []));
if (!args.strata || !args.model || !args.work || !args.label) {
  console.error("usage: node constrained_outputs.mjs --strata BIN --model DIR --label NAME --work DIR [--n N] [--max-tokens M] [--min-finished K]");
  process.exit(2);
}
const n = Number(args.n ?? 3), maxTokens = Number(args["max-tokens"] ?? 160), minFinished = Number(args["min-finished"] ?? 0);

const schemas = JSON.parse(readFileSync(path.join(here, "corpus", "json_schemas.json"), "utf8"));
const regexes = JSON.parse(readFileSync(path.join(here, "corpus", "regexes.json"), "utf8"));
const requests = [];
for (const c of schemas) {
  requests.push({ custom_id: `json_schemas/${c.name}`,
    messages: [{ role: "user", content: `Answer in JSON: ${c.note}. For example: ${c.positive[0]}` }],
    response_format: { type: "json_schema", json_schema: { name: c.name, schema: c.source, strict: true } },
    temperature: 1, n, max_tokens: maxTokens });
}
for (const c of regexes) {
  requests.push({ custom_id: `regexes/${c.name}`, prompt: `${c.note}, e.g. ${c.positive[0]}\nAnswer: `,
    structured_outputs: { regex: c.source }, temperature: 1, n, max_tokens: maxTokens });
}

mkdirSync(args.work, { recursive: true });
const input = path.join(args.work, `requests_${args.label}.jsonl`), output = path.join(args.work, `results_${args.label}.jsonl`);
writeFileSync(input, requests.map((r) => JSON.stringify(r)).join("\n") + "\n");
// The compile limit is not what this test checks: a sanitized build compiles the larger schemas several times slower.
execFileSync(args.strata, ["generate", "--model", args.model, "--input", input, "--output", output,
                           "--grammar-compile-timeout", "120"],
  { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } });

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const validators = new Map(schemas.map((c) => [`json_schemas/${c.name}`, ajv.compile(c.source)]));
const patterns = new Map(regexes.map((c) => [`regexes/${c.name}`, new RegExp(`^(?:${c.source})$`, "u")]));

const counts = { outputs: 0, finished: 0, cut: 0, invalid: 0 };
const problems = [];
for (const line of readFileSync(output, "utf8").split("\n").filter(Boolean)) {
  const r = JSON.parse(line);
  if (r.response?.status_code !== 200) {
    problems.push({ id: r.custom_id, refused: r.error ?? r.response });
    continue;
  }
  for (const choice of r.response.body.choices) {
    const text = choice.message ? choice.message.content ?? "" : choice.text;
    counts.outputs++;
    if (choice.finish_reason !== "stop") {
      counts.cut++;
      continue;
    }
    counts.finished++;
    let valid, why = "";
    if (validators.has(r.custom_id)) {
      try {
        const validate = validators.get(r.custom_id);
        valid = validate(JSON.parse(text));
        if (!valid) why = ajv.errorsText(validate.errors);
      } catch (e) {
        valid = false;
        why = `not JSON: ${e.message}`;
      }
    } else {
      valid = patterns.get(r.custom_id).test(text);
      if (!valid) why = "no full match";
    }
    if (!valid) {
      counts.invalid++;
      problems.push({ id: r.custom_id, text, why });
    }
  }
}
for (const p of problems.slice(0, 20)) console.log(`INVALID: ${JSON.stringify(p)}`);
const summary = `constrained outputs (${args.label} model, temperature 1, n ${n}, max_tokens ${maxTokens}): ` +
  `${requests.length} requests, ${counts.outputs} outputs, ${counts.finished} finished and validated ` +
  `(ajv ${JSON.parse(readFileSync(path.join(here, "node_modules", "ajv", "package.json"), "utf8")).version} / RegExp), ` +
  `${counts.invalid} invalid, ${counts.cut} cut by max_tokens, ${problems.length - counts.invalid} requests refused`;
console.log(summary);
writeFileSync(path.join(args.work, `summary_${args.label}.json`), JSON.stringify({ ...counts, requests: requests.length, summary }, null, 1) + "\n");
process.exit(problems.length || counts.finished < minFinished ? 1 : 0);
