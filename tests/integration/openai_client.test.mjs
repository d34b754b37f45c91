// The official OpenAI Node client against a real `strata serve` (tiny random model, DeepSeek tokenizer).
// The model's text is noise, so these tests check structure and invariants: stream == non-stream, seeds
// reproduce, a stop string cuts the text where it first occurs, greedy picks the top logprob, errors name their
// field. Run by tests/integration/run.sh (ctest: integration.openai_client).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

import { fetchMetrics, startServer, waitForIdleEngine } from './strata_server.mjs';

const API_KEY = 'integration-test-key';
const MODEL = 'tiny-test';
const MAX_MODEL_LEN = 1024;

let server;
let client;

before(async () => {
  server = await startServer(['--api-key', API_KEY, '--served-model-name', MODEL, '--max-model-len', String(MAX_MODEL_LEN),
                              '--max-n', '4', '--shutdown-grace', '5']);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: API_KEY, maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  if (!server) return;
  // Every request of this file has finished: nothing may be left in the engine.
  await waitForIdleEngine(server.origin);
  await server.stopCleanly();
});

const USER = [{ role: 'user', content: 'Write a short poem about the sea.' }];

// Collects a chat stream: per choice the content, reasoning, tool-call deltas, logprobs and finish reasons.
async function collectChat(stream) {
  const choices = new Map();
  let id;
  let usage;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, MODEL);
    id ??= chunk.id;
    assert.equal(chunk.id, id, 'every chunk of a stream has the same id');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (!choices.has(c.index))
        choices.set(c.index, { content: '', reasoning: '', roles: [], tool_calls: [], logprobs: [], finish: [] });
      const acc = choices.get(c.index);
      assert.equal(acc.finish.length, 0, `choice ${c.index} got a chunk after its finish_reason`);
      if (c.delta.role) acc.roles.push(c.delta.role);
      if (c.delta.content) acc.content += c.delta.content;
      if (c.delta.reasoning_content) acc.reasoning += c.delta.reasoning_content;
      for (const t of c.delta.tool_calls ?? []) acc.tool_calls.push(t);
      if (c.logprobs?.content) acc.logprobs.push(...c.logprobs.content);
      if (c.finish_reason) acc.finish.push(c.finish_reason);
    }
  }
  return { id, usage, chunks, choices };
}

function assertUsage(usage, { completion } = {}) {
  assert.ok(usage.prompt_tokens > 0);
  assert.ok(usage.completion_tokens >= 0);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  if (completion !== undefined) assert.equal(usage.completion_tokens, completion);
}

async function expectError(promise, { status, param, code, type }) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.APIError, `expected an API error, got ${e}`);
    assert.equal(e.status, status, e.message);
    assert.equal(typeof e.error?.message, 'string', 'the error body has a message');
    if (param !== undefined) {
      assert.equal(e.param, param, e.message);
      if (param) assert.match(e.message, new RegExp(param.replace(/[[\].]/g, '\\$&')), 'the message names the field');
    }
    if (code !== undefined) assert.equal(e.code, code, e.message);
    if (type !== undefined) assert.equal(e.type, type, e.message);
    return true;
  });
}

describe('models', () => {
  it('lists the served model', async () => {
    const page = await client.models.list();
    assert.deepEqual(page.data.map((m) => m.id), [MODEL]);
    const [m] = page.data;
    assert.equal(m.object, 'model');
    assert.equal(typeof m.created, 'number');
    assert.equal(typeof m.owned_by, 'string');
  });

  it('retrieves it by name, and 404s another name', async () => {
    const m = await client.models.retrieve(MODEL);
    assert.equal(m.id, MODEL);
    await expectError(client.models.retrieve('no-such-model'), { status: 404, code: 'model_not_found' });
  });
});

describe('chat completions', () => {
  it('answers a request with one assistant message', async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 8, ignore_eos: true });
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, MODEL);
    assert.equal(typeof r.created, 'number');
    assert.equal(r.choices.length, 1);
    const [c] = r.choices;
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.equal(c.finish_reason, 'length');
    assert.equal(c.logprobs, null);
    assertUsage(r.usage, { completion: 8 });
  });

  it('accepts max_completion_tokens and the usual optional fields as null', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: USER, max_completion_tokens: 3, ignore_eos: true, temperature: null, top_p: null,
      stop: null, seed: null, user: 'integration',
    });
    assertUsage(r.usage, { completion: 3 });
  });

  it('streams the same text as the whole response (greedy)', async () => {
    const request = { model: MODEL, messages: USER, max_tokens: 12, temperature: 0, ignore_eos: true };
    const whole = await client.chat.completions.create(request);
    const stream = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    const s = await collectChat(stream);
    assert.match(s.id, /^chatcmpl-/);
    assert.deepEqual([...s.choices.keys()], [0]);
    const c = s.choices.get(0);
    assert.deepEqual(c.roles, ['assistant'], 'the role comes once, first');
    assert.deepEqual(c.finish, ['length']);
    assert.equal(c.content, whole.choices[0].message.content);
    assertUsage(s.usage, { completion: 12 });
    assert.equal(s.usage.prompt_tokens, whole.usage.prompt_tokens);
  });

  it('streams without a usage chunk unless asked', async () => {
    const stream = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 4, top_k: 20, stream: true });
    const s = await collectChat(stream);
    assert.equal(s.usage, undefined);
    assert.equal(s.choices.get(0).finish.length, 1);
    assert.ok(['length', 'stop'].includes(s.choices.get(0).finish[0]));
  });

  it('ends the text where a stop string first occurs, without it', async () => {
    const request = { model: MODEL, messages: USER, max_tokens: 24, temperature: 0, ignore_eos: true };
    const full = (await client.chat.completions.create(request)).choices[0].message.content;
    const chars = [...full];
    assert.ok(chars.length >= 6, `the greedy text is long enough to cut: ${JSON.stringify(full)}`);
    const stop = chars.slice(Math.floor(chars.length / 2), Math.floor(chars.length / 2) + 2).join('');
    const expected = full.slice(0, full.indexOf(stop));

    const r = await client.chat.completions.create({ ...request, stop: [stop, 'never-generated-\u2603'] });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].message.content, expected);
    assert.ok(r.usage.completion_tokens <= 24);

    const s = await collectChat(await client.chat.completions.create({ ...request, stop, stream: true }));
    assert.deepEqual(s.choices.get(0).finish, ['stop']);
    assert.equal(s.choices.get(0).content, expected);

    const kept = await client.chat.completions.create({ ...request, stop, include_stop_str_in_output: true });
    assert.equal(kept.choices[0].message.content, expected + stop);
  });

  it('returns n choices, each finished, in order', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: USER, n: 3, max_tokens: 6, temperature: 1, top_k: 50, seed: 7, ignore_eos: true,
    });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'length');
      assert.equal(c.message.role, 'assistant');
    }
    assertUsage(r.usage, { completion: 18 });
    const distinct = new Set(r.choices.map((c) => c.message.content));
    assert.ok(distinct.size >= 2, 'sampled choices differ');

    const stream = await client.chat.completions.create({
      model: MODEL, messages: USER, n: 3, max_tokens: 6, temperature: 1, top_k: 50, seed: 7, ignore_eos: true,
      stream: true, stream_options: { include_usage: true },
    });
    const s = await collectChat(stream);
    assert.deepEqual([...s.choices.keys()].sort(), [0, 1, 2]);
    for (const [i, c] of s.choices) {
      assert.deepEqual(c.finish, ['length']);
      assert.equal(c.content, r.choices[i].message.content, `choice ${i}: stream == whole for the same seed`);
    }
    assertUsage(s.usage, { completion: 18 });
  });

  it('reproduces a seeded sample (temperature > 0, top_k); choice i uses seed + i', async () => {
    const request = { model: MODEL, messages: USER, max_tokens: 10, temperature: 0.9, top_k: 20, ignore_eos: true };
    const a = await client.chat.completions.create({ ...request, seed: 1234 });
    const b = await client.chat.completions.create({ ...request, seed: 1234 });
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const pair = await client.chat.completions.create({ ...request, seed: 1233, n: 2 });
    assert.equal(pair.choices[1].message.content, a.choices[0].message.content);
    const others = await Promise.all([1, 2, 3].map((seed) => client.chat.completions.create({ ...request, seed })));
    const texts = new Set([a, ...others].map((r) => r.choices[0].message.content));
    assert.ok(texts.size >= 2, 'different seeds sample different texts');
  });

  it('reports logprobs of the chosen and the top tokens', async () => {
    const request = { model: MODEL, messages: USER, max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3 };
    const r = await client.chat.completions.create(request);
    const entries = r.choices[0].logprobs.content;
    assert.equal(entries.length, 6);
    const bytes = [];
    for (const e of entries) {
      assert.equal(typeof e.token, 'string');
      assert.ok(Number.isFinite(e.logprob) && e.logprob <= 0);
      assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
      bytes.push(...e.bytes);
      assert.equal(e.top_logprobs.length, 3);
      for (let i = 1; i < 3; ++i) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, 'top_logprobs are sorted');
      // Greedy picks the most likely token; logprobs are those of the raw logits.
      assert.deepEqual(e.top_logprobs[0].bytes, e.bytes);
      assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6);
    }
    assert.equal(Buffer.from(bytes).toString('utf8'), r.choices[0].message.content, 'the tokens spell the content');

    const s = await collectChat(await client.chat.completions.create({ ...request, stream: true }));
    assert.deepEqual(s.choices.get(0).logprobs, entries, 'streamed logprobs == whole logprobs');

    const plain = await client.chat.completions.create({ ...request, top_logprobs: undefined });
    for (const e of plain.choices[0].logprobs.content) assert.deepEqual(e.top_logprobs, []);
  });

  const TOOLS = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather in a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];

  function assertToolCalls(message) {
    for (const call of message.tool_calls ?? []) {
      assert.equal(call.type, 'function');
      assert.equal(typeof call.id, 'string');
      assert.equal(typeof call.function.name, 'string');
      assert.equal(typeof call.function.arguments, 'string');
    }
  }

  it('accepts tools and answers with a message that parses', async () => {
    for (const tool_choice of ['auto', 'required', 'none', { type: 'function', function: { name: 'get_weather' } }]) {
      const r = await client.chat.completions.create({ model: MODEL, messages: USER, tools: TOOLS, tool_choice, max_tokens: 16,
                                                      top_k: 20 });
      const [c] = r.choices;
      assert.ok(['stop', 'length', 'tool_calls'].includes(c.finish_reason), c.finish_reason);
      assert.equal(c.message.role, 'assistant');
      assert.ok(c.message.content === null || typeof c.message.content === 'string');
      assertToolCalls(c.message);
      if (c.finish_reason === 'tool_calls') assert.ok(c.message.tool_calls.length > 0);
    }
    const s = await collectChat(await client.chat.completions.create({
      model: MODEL, messages: USER, tools: TOOLS, max_tokens: 16, top_k: 20, stream: true,
    }));
    assert.equal(s.choices.get(0).finish.length, 1);
  });

  it('accepts a follow-up with an assistant tool call and the tool result', async () => {
    const messages = [
      { role: 'system', content: 'You answer weather questions.' },
      { role: 'user', content: 'What is the weather in Paris?' },
      {
        role: 'assistant', content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature_c":21,"sky":"clear"}' },
    ];
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, max_tokens: 8, top_k: 20 });
    assert.equal(r.choices[0].message.role, 'assistant');
    assertToolCalls(r.choices[0].message);
    // The tool call and its result are part of the prompt.
    const bare = await client.chat.completions.create({ model: MODEL, messages: messages.slice(0, 2), tools: TOOLS, max_tokens: 1 });
    assert.ok(r.usage.prompt_tokens > bare.usage.prompt_tokens);
  });

  it('accepts thinking through chat_template_kwargs', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: USER, max_tokens: 8, top_k: 20, chat_template_kwargs: { thinking: true }, reasoning_effort: 'high',
    });
    const m = r.choices[0].message;
    assert.ok(m.reasoning_content === undefined || typeof m.reasoning_content === 'string');
    assert.equal(typeof m.content, 'string');
  });
});

// Structured outputs hold whatever the weights: the model here is random, so every reply below is the grammar's
// doing. Schemas are bounded (enums, booleans, maxLength) so that a reply ends well inside max_tokens.
describe('structured outputs and tool_choice', () => {
  const BOUNDED_TOOLS = [
    { type: 'function', function: { name: 'set_light', parameters: { type: 'object',
      properties: { room: { type: 'string', enum: ['kitchen', 'hall'] }, on: { type: 'boolean' } }, required: ['room', 'on'] } } },
    { type: 'function', function: { name: 'ping', parameters: { type: 'object', properties: {} } } },
  ];

  it('follows a JSON schema at temperature 1', async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' }, mood: { enum: ['calm', 'stormy'] } }, required: ['ok', 'mood'] };
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        model: MODEL, messages: USER, temperature: 1, seed, max_tokens: 400,
        response_format: { type: 'json_schema', json_schema: { name: 'sea', schema, strict: true } },
      });
      const [c] = r.choices;
      if (c.finish_reason === 'length') continue;  // whitespace runs may be long; the grammar still held
      const value = JSON.parse(c.message.content);
      assert.equal(typeof value.ok, 'boolean', c.message.content);
      assert.ok(['calm', 'stormy'].includes(value.mood), c.message.content);
      assert.deepEqual(Object.keys(value).sort(), ['mood', 'ok']);
    }
  });

  it('follows a regex and a choice list on both endpoints', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: 'Code:', max_tokens: 12, temperature: 1, seed: 4,
                                                structured_outputs: { regex: '[A-F]{3}-[0-9]{2}' } });
    assert.match(r.choices[0].text, /^[A-F]{3}-[0-9]{2}$/);
    const c = await client.chat.completions.create({ model: MODEL, messages: USER, temperature: 1, seed: 5, max_tokens: 12,
                                                     structured_outputs: { choice: ['left', 'right'] } });
    assert.ok(['left', 'right'].includes(c.choices[0].message.content), c.choices[0].message.content);
  });

  it('tool_choice required and named force a call that follows the schema; none forbids one', async () => {
    for (const [tool_choice, names] of [['required', ['set_light', 'ping']],
                                        [{ type: 'function', function: { name: 'set_light' } }, ['set_light']]]) {
      const r = await client.chat.completions.create({ model: MODEL, messages: USER, tools: BOUNDED_TOOLS, tool_choice,
                                                       temperature: 1, seed: 6, max_tokens: 200, parallel_tool_calls: false });
      const [c] = r.choices;
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0].function;
      assert.ok(names.includes(call.name), call.name);
      const args = JSON.parse(call.arguments);
      if (call.name === 'set_light') {
        assert.ok(['kitchen', 'hall'].includes(args.room), call.arguments);
        assert.equal(typeof args.on, 'boolean', call.arguments);
      }
    }
    const none = await client.chat.completions.create({ model: MODEL, messages: USER, tools: BOUNDED_TOOLS, tool_choice: 'none',
                                                        temperature: 1, seed: 7, max_tokens: 24 });
    assert.ok(!none.choices[0].message.tool_calls?.length);
    assert.ok(!(none.choices[0].message.content ?? '').includes('DSML'));
  });

  it('rejects a bad regex, grammar or schema with 400 naming the field and the position', async () => {
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER, structured_outputs: { regex: '[a-' } }),
                      { status: 400, param: 'structured_outputs.regex' });
    await assert.rejects(client.completions.create({ model: MODEL, prompt: 'x', structured_outputs: { grammar: 'root ::= "a" |\n  ( b' } }),
                         (e) => e.status === 400 && /2:\d+/.test(e.message));
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER,
                                                       response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'number', multipleOf: 2 } } } }),
                      { status: 400, param: 'response_format.json_schema.schema' });
  });
});

describe('completions', () => {
  it('completes text and token-id prompts, batched, with n', async () => {
    const r = await client.completions.create({
      model: MODEL, prompt: ['Once upon a time', 'The sea'], n: 2, max_tokens: 5, ignore_eos: true, seed: 3, temperature: 0.8,
      top_k: 20,
    });
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.object, 'text_completion');
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    for (const c of r.choices) {
      assert.equal(typeof c.text, 'string');
      assert.equal(c.finish_reason, 'length');
    }
    assertUsage(r.usage, { completion: 20 });

    const ids = await client.completions.create({ model: MODEL, prompt: [5, 6, 7, 8], max_tokens: 3, ignore_eos: true });
    assert.equal(ids.usage.prompt_tokens, 4);
    assertUsage(ids.usage, { completion: 3 });
  });

  it('defaults to 16 tokens, echoes, and stops at a stop string', async () => {
    const r = await client.completions.create({ model: MODEL, prompt: 'Hello', temperature: 0, ignore_eos: true });
    assertUsage(r.usage, { completion: 16 });
    const echoed = await client.completions.create({ model: MODEL, prompt: 'Hello', temperature: 0, ignore_eos: true, echo: true });
    assert.equal(echoed.choices[0].text, 'Hello' + r.choices[0].text);

    const full = r.choices[0].text;
    const chars = [...full];
    assert.ok(chars.length >= 6, `the greedy text is long enough to cut: ${JSON.stringify(full)}`);
    const stop = chars.slice(3, 5).join('');
    const cut = await client.completions.create({ model: MODEL, prompt: 'Hello', temperature: 0, ignore_eos: true, stop });
    assert.equal(cut.choices[0].finish_reason, 'stop');
    assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(stop)));
  });

  it('streams text and logprobs columns', async () => {
    const request = { model: MODEL, prompt: 'Hello', max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: 2 };
    const whole = await client.completions.create(request);
    const lp = whole.choices[0].logprobs;
    assert.equal(lp.tokens.length, 6);
    assert.equal(lp.token_logprobs.length, 6);
    assert.equal(lp.top_logprobs.length, 6);
    assert.deepEqual(lp.text_offset[0], 0);
    for (let i = 0; i < 6; ++i) {
      assert.ok(lp.token_logprobs[i] <= 0);
      const top = Object.values(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 2);
      assert.ok(Math.abs(Math.max(...top) - lp.token_logprobs[i]) < 1e-6, 'greedy picks the top token');
      if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
    }

    // logprobs 0: the sampled token alone (the legacy API always lists it among the alternatives).
    const zero = (await client.completions.create({ ...request, logprobs: 0, temperature: 0.8, top_k: 20 })).choices[0].logprobs;
    zero.top_logprobs.forEach((top, i) => assert.deepEqual(top, { [zero.tokens[i]]: zero.token_logprobs[i] }));

    const stream = await client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
    let text = '';
    const tokens = [];
    const finish = [];
    let usage;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'text_completion');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.text;
        if (c.logprobs) tokens.push(...c.logprobs.tokens);
        if (c.finish_reason) finish.push(c.finish_reason);
      }
    }
    assert.equal(text, whole.choices[0].text);
    assert.deepEqual(tokens, lp.tokens);
    assert.deepEqual(finish, ['length']);
    assertUsage(usage, { completion: 6 });
  });
});

describe('clients that leave', () => {
  // Leaving is noticed by the server at once; the aborted choice counts as finished_reason="abort".
  const aborted = async () => (await fetchMetrics(server.origin))
    .get(`strata_request_success_total{model_name="${MODEL}",finished_reason="abort"}`);
  // The engine's last event reaches the server's counters a moment after the engine is idle: poll.
  const expectAborted = async (count) => {
    const until = Date.now() + 30_000;
    while ((await aborted()) !== count && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.equal(await aborted(), count);
  };

  it('a non-streamed request given up by the client is aborted', async () => {
    const before = await aborted();
    const controller = new AbortController();
    const pending = client.chat.completions.create(
      { model: MODEL, messages: USER, max_tokens: 900, ignore_eos: true, n: 2, top_k: 20 }, { signal: controller.signal });
    // Leave once both choices are in the engine.
    for (const until = Date.now() + 60_000; ;) {
      const m = await fetchMetrics(server.origin);
      if (m.get('strata_num_requests_running') + m.get('strata_num_requests_waiting') >= 2) break;
      assert.ok(Date.now() < until, 'the request reaches the engine');
      await new Promise((r) => setTimeout(r, 20));
    }
    controller.abort();
    await assert.rejects(pending, (e) => e instanceof OpenAI.APIUserAbortError);
    await expectAborted(before + 2);  // both choices
    await waitForIdleEngine(server.origin, 30_000);
  });

  it('a stream left after a few chunks is aborted', async () => {
    const before = await aborted();
    const stream = await client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 900, ignore_eos: true,
                                                          top_k: 20, stream: true });
    let chunks = 0;
    for await (const chunk of stream) {
      void chunk;
      if (++chunks === 3) break;
    }
    await expectAborted(before + 1);
    await waitForIdleEngine(server.origin, 30_000);
  });
});

describe('errors', () => {
  it('rejects an unknown parameter with 400 naming it', async () => {
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 2, frobnicate: 1 }),
                      { status: 400, param: 'frobnicate', type: 'invalid_request_error' });
    await expectError(client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2, frobnicate: true }),
                      { status: 400, param: 'frobnicate' });
    // Also for a stream: the error comes before any event.
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER, stream: true, frobnicate: 1 }),
                      { status: 400, param: 'frobnicate' });
  });

  it('rejects values out of range with 400 naming the field', async () => {
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER, top_p: 2 }), { status: 400, param: 'top_p' });
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER, n: 5 }), { status: 400, param: 'n' });
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER, temperature: 'hot' }),
                      { status: 400, param: 'temperature' });
    await expectError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }),
                      { status: 400 });
  });

  it('rejects a wrong API key with 401', async () => {
    const wrong = new OpenAI({ baseURL: server.baseURL, apiKey: 'not-the-key', maxRetries: 0 });
    await expectError(wrong.chat.completions.create({ model: MODEL, messages: USER, max_tokens: 2 }),
                      { status: 401, code: 'invalid_api_key' });
    await expectError(wrong.models.list(), { status: 401 });
  });

  it('rejects an unknown model with 404', async () => {
    await expectError(client.chat.completions.create({ model: 'gpt-4o', messages: USER, max_tokens: 2 }),
                      { status: 404, param: 'model', code: 'model_not_found' });
    await expectError(client.completions.create({ model: 'gpt-4o', prompt: 'x', max_tokens: 2 }),
                      { status: 404, code: 'model_not_found' });
  });

  it('rejects a prompt longer than the context with 400', async () => {
    const long = 'many words '.repeat(MAX_MODEL_LEN);
    await expectError(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: long }], max_tokens: 2 }),
                      { status: 400, param: 'messages' });
    await expectError(client.completions.create({ model: MODEL, prompt: Array(MAX_MODEL_LEN).fill(5), max_tokens: 2 }),
                      { status: 400, param: 'prompt' });
    // A prompt that fits, with max_tokens past the context.
    await expectError(client.chat.completions.create({ model: MODEL, messages: USER, max_tokens: MAX_MODEL_LEN }),
                      { status: 400, param: 'max_tokens' });
  });

  it('counts errors in /metrics and stays healthy', async () => {
    const metrics = await fetchMetrics(server.origin);
    assert.ok(metrics.get('strata_http_errors_total') >= 10);
    const health = await fetch(`${server.origin}/health`);
    assert.equal(health.status, 200);
  });
});
