// Soak: 200 concurrent streaming clients against one `strata serve`, a third of them leaving mid-stream at random
// points (after k chunks, after a random delay — possibly before the response has begun — or by resetting the
// TCP connection). Every client that stays must get a complete stream; afterwards the server must be healthy and
// its engine empty: no running or waiting sequence, no state slot or page in use. Run by tests/integration/run.sh
// (ctest: integration.soak).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import OpenAI from 'openai';

import { fetchMetrics, startServer, waitForIdleEngine } from './strata_server.mjs';

const CLIENTS = Number(process.env.STRATA_SOAK_CLIENTS ?? 200);
const SEED = Number(process.env.STRATA_SOAK_SEED ?? Date.now() % 100000);

// A small deterministic generator, so a failing run can be repeated with STRATA_SOAK_SEED.
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ['tide', 'salt', 'harbour', 'gull', 'wave', 'anchor', 'drift', 'storm', 'keel', 'shore', 'mast', 'foam'];

function planClients(random) {
  const pick = (list) => list[Math.floor(random() * list.length)];
  const plans = [];
  for (let i = 0; i < CLIENTS; ++i) {
    // Mostly short prompts, a few of up to ~150 words: every token costs ~15x more in the ASan build.
    const words = 1 + Math.floor(random() ** 3 * 150);
    const text = Array.from({ length: words }, () => pick(WORDS)).join(' ');
    const plan = {
      i,
      chat: random() < 2 / 3,
      text,
      n: random() < 0.1 ? 2 : 1,
      max_tokens: 2 + Math.floor(random() * 5),  // each generated token costs ~90 ms of CPU in the ASan build
      // A stop string ends a choice early and aborts its engine sequence, alongside the clients that leave.
      stop: random() < 0.25 ? [pick(['e', 'a', ' ', 'n'])] : undefined,
      leave: null,
    };
    if (i % 3 === 0) {
      const r = random();
      if (r < 0.5) plan.leave = { kind: 'after_chunks', chunks: Math.floor(random() * (plan.max_tokens + 1)) };
      else if (r < 0.85) plan.leave = { kind: 'after_ms', ms: Math.floor(random() ** 2 * 5000) };
      else plan.leave = { kind: 'reset', afterBytes: random() < 0.5 ? 0 : 1 };
    }
    plans.push(plan);
  }
  return plans;
}

function body(plan) {
  // top_k keeps sampling cheap: without it the sampler sorts the whole 129k-token vocabulary for every token.
  const common = { model: 'soak', max_tokens: plan.max_tokens, n: plan.n, ignore_eos: true, temperature: 0.7,
                   top_k: 40, stop: plan.stop, stream: true, stream_options: { include_usage: true } };
  return plan.chat ? { ...common, messages: [{ role: 'user', content: plan.text }] } : { ...common, prompt: plan.text };
}

// A client that stays: the whole stream, every choice ended once (by its length, or by its stop string), and the
// usage chunk.
async function streamToEnd(client, plan) {
  const create = plan.chat ? client.chat.completions : client.completions;
  const stream = await create.create(body(plan));
  const finish = new Map();
  let usage;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      assert.ok(!finish.has(c.index), `client ${plan.i}: choice ${c.index} continued after its finish_reason`);
      if (c.finish_reason) finish.set(c.index, c.finish_reason);
    }
  }
  assert.equal(finish.size, plan.n, `client ${plan.i}: every choice finishes`);
  const reasons = plan.stop ? ['length', 'stop'] : ['length'];
  for (const reason of finish.values()) assert.ok(reasons.includes(reason), `client ${plan.i}: finish_reason ${reason}`);
  assert.ok(usage, `client ${plan.i}: the usage chunk arrives`);
  if (plan.stop) assert.ok(usage.completion_tokens <= plan.n * plan.max_tokens, `client ${plan.i}`);
  else assert.equal(usage.completion_tokens, plan.n * plan.max_tokens, `client ${plan.i}`);
  return 'complete';
}

// A client that leaves after `chunks` chunks (0: as soon as the response has begun). Leaving the loop aborts the
// fetch, which closes the connection.
async function leaveAfterChunks(client, plan) {
  const create = plan.chat ? client.chat.completions : client.completions;
  const stream = await create.create(body(plan));
  let seen = 0;
  if (plan.leave.chunks === 0) {
    stream.controller.abort();
    return 'left';
  }
  for await (const chunk of stream) {
    void chunk;
    if (++seen >= plan.leave.chunks) break;
  }
  return 'left';
}

// A client that gives up after a delay, wherever its request is: being parsed, queued, or streaming.
async function leaveAfterDelay(client, plan) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), plan.leave.ms);
  try {
    const create = plan.chat ? client.chat.completions : client.completions;
    const stream = await create.create(body(plan), { signal: controller.signal });
    for await (const chunk of stream) void chunk;
    return 'complete';  // finished before the delay
  } catch (e) {
    if (controller.signal.aborted) return 'left';
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

// A raw HTTP client that resets its TCP connection (RST, not FIN): right after sending the request, or once the
// first bytes of the response arrive.
function resetConnection(port, plan) {
  return new Promise((resolve, reject) => {
    const payload = JSON.stringify(body(plan));
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(`POST /v1/${plan.chat ? 'chat/completions' : 'completions'} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
                   `Content-Type: application/json\r\nAuthorization: Bearer soak-key\r\n` +
                   `Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}`);
      if (plan.leave.afterBytes === 0) setImmediate(() => socket.resetAndDestroy());
    });
    socket.on('data', () => socket.resetAndDestroy());
    socket.on('close', () => resolve('left'));
    socket.on('error', (e) => (e.code === 'ECONNRESET' ? resolve('left') : reject(e)));
  });
}

test(`${CLIENTS} concurrent streams, a third leaving mid-stream; the engine ends empty (seed ${SEED})`, { timeout: 600_000 },
     async () => {
  const server = await startServer(['--api-key', 'soak-key', '--served-model-name', 'soak', '--max-model-len', '1024',
                                    '--max-num-seqs', '48', '--shutdown-grace', '5']);
  try {
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'soak-key', maxRetries: 0, timeout: 300_000 });
    const plans = planClients(rng(SEED));

    // Watch the engine while the clients run: it must actually queue sequences and use token blocks.
    const peak = { running: 0, waiting: 0, blocks: 0 };
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const m = await fetchMetrics(server.origin);
        peak.running = Math.max(peak.running, m.get('strata_num_requests_running'));
        peak.waiting = Math.max(peak.waiting, m.get('strata_num_requests_waiting'));
        peak.blocks = Math.max(peak.blocks, m.get('strata_state_pool_used_blocks'));
        await new Promise((r) => setTimeout(r, 50));
      }
    })();

    const started = Date.now();
    const results = await Promise.allSettled(plans.map((plan) => {
      if (!plan.leave) return streamToEnd(client, plan);
      if (plan.leave.kind === 'after_chunks') return leaveAfterChunks(client, plan);
      if (plan.leave.kind === 'after_ms') return leaveAfterDelay(client, plan);
      return resetConnection(server.port, plan);
    }));
    watching = false;
    await watcher;
    const failures = results.flatMap((r, i) => (r.status === 'rejected' ? [`client ${i}: ${r.reason?.stack ?? r.reason}`] : []));
    assert.deepEqual(failures, [], `clients failed:\n${failures.slice(0, 5).join('\n')}`);
    const left = results.filter((r) => r.value === 'left').length;
    console.log(`# ${CLIENTS} clients in ${Date.now() - started} ms, ${left} left early; peak running ${peak.running}, ` +
                `waiting ${peak.waiting}, token blocks ${peak.blocks}; server CPU ${server.cpuSeconds().toFixed(1)} s`);
    assert.ok(left >= CLIENTS / 6, `enough clients left early (${left})`);
    assert.ok(peak.waiting > 0, 'sequences queued behind --max-num-seqs');
    assert.ok(peak.blocks > 0, 'the clients used token blocks');

    // Aborts reach the engine asynchronously: poll until it is empty.
    const idle = await waitForIdleEngine(server.origin, 30_000);
    assert.equal(idle.get('strata_http_errors_total') ?? 0, 0, 'no error responses');
    const health = await fetch(`${server.origin}/health`);
    assert.equal(health.status, 200);
    const after = await client.chat.completions.create({
      model: 'soak', messages: [{ role: 'user', content: 'Still there?' }], max_tokens: 4, ignore_eos: true,
    });
    assert.equal(after.choices[0].finish_reason, 'length');
    assert.equal(after.usage.completion_tokens, 4);
    await waitForIdleEngine(server.origin, 10_000);
    await server.stopCleanly();
  } finally {
    await server.stop();
  }
});

test('SIGTERM with streams in flight: each stream ends with finish_reason "abort" and [DONE]; a clean exit',
     { timeout: 300_000 }, async () => {
  const server = await startServer(['--served-model-name', 'soak', '--shutdown-grace', '1']);
  try {
    const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
    const streams = await Promise.all(Array.from({ length: 6 }, (_, i) => client.chat.completions.create({
      model: 'soak', messages: [{ role: 'user', content: `Stream ${i}` }], max_tokens: 2000, ignore_eos: true, stream: true,
      n: i % 2 + 1,
    })));
    const done = Promise.all(streams.map(async (stream) => {
      const finish = [];
      for await (const chunk of stream) for (const c of chunk.choices) if (c.finish_reason) finish.push(c.finish_reason);
      return finish;
    }));
    await new Promise((r) => setTimeout(r, 300));
    const stopped = server.stopCleanly();  // SIGTERM: the streams have --shutdown-grace 1 s, then are aborted
    const finishes = await done;
    finishes.forEach((finish, i) => assert.deepEqual(finish, Array(i % 2 + 1).fill('abort'), `stream ${i}`));
    await stopped;
  } finally {
    await server.stop();
  }
});
