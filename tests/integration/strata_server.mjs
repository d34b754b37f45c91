// Starts a real `strata serve` process for the integration tests and reads its /metrics.
//
// The environment comes from tests/integration/run.sh: STRATA_BINARY (the strata executable) and STRATA_MODEL_DIR
// (a tiny random checkpoint with the DeepSeek tokenizer, written by `strata model init`).
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import assert from 'node:assert/strict';

const LISTENING = /listening on http:\/\/127\.0\.0\.1:(\d+)/;

// The ASan build loads the 70 MB checkpoint much more slowly than a release build.
const START_TIMEOUT_MS = 120_000;

function required_env(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (run the integration tests through tests/integration/run.sh)`);
  return value;
}

// A running server. `args` are extra `strata serve` flags; the port is always picked by the server (--port 0).
export async function startServer(args = []) {
  const binary = required_env('STRATA_BINARY');
  const model = required_env('STRATA_MODEL_DIR');
  const child = spawn(binary, ['serve', '--model', model, '--port', '0', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, OMP_WAIT_POLICY: process.env.OMP_WAIT_POLICY ?? 'PASSIVE' },
  });
  // Never leave a server behind, whatever happens to the test process (a failure, a timeout's signal).
  const killOnExit = () => child.kill('SIGKILL');
  process.on('exit', killOnExit);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.once(signal, () => process.exit(1));

  let output = '';
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      process.off('exit', killOnExit);
      resolve({ code, signal });
    });
  });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`strata serve did not start within ${START_TIMEOUT_MS} ms:\n${output}`)),
                             START_TIMEOUT_MS);
    const onData = (data) => {
      output += data.toString();
      const m = LISTENING.exec(output);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`strata serve exited (code ${code}, signal ${signal}) before listening:\n${output}`));
    });
  });

  const origin = `http://127.0.0.1:${port}`;
  return {
    port,
    origin,
    baseURL: `${origin}/v1`,
    output: () => output,
    // CPU seconds the server has used so far (user + system; Linux /proc).
    cpuSeconds() {
      const fields = readFileSync(`/proc/${child.pid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
      return (Number(fields[11]) + Number(fields[12])) / 100;  // utime, stime (fields 14, 15) in clock ticks
    },
    // SIGTERM, then the exit status: a clean shutdown (and, in the ASan build, no leak report) exits with 0.
    async stop(timeoutMs = 60_000) {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const status = await exited;
      clearTimeout(timer);
      return status;
    },
    // Asserts that the server is still running, then stops it and asserts a clean exit.
    async stopCleanly() {
      assert.equal(child.exitCode, null, `strata serve died during the test:\n${output}`);
      const { code, signal } = await this.stop();
      assert.equal(signal, null, `strata serve ended by ${signal}:\n${output}`);
      assert.equal(code, 0, `strata serve exited with ${code}:\n${output}`);
      assert.match(output, /strata serve: stopped/);
    },
  };
}

// The samples of a Prometheus text exposition: name → the sum over every label set, and 'name{labels}' → the
// value of that one sample (labels as the server writes them, e.g. 'strata_http_errors_total{model_name="m",status="400"}').
export function parseMetrics(text) {
  const values = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/.exec(line);
    assert.ok(m, `malformed metrics line: ${line}`);
    const value = { '+Inf': Infinity, '-Inf': -Infinity }[m[3]] ?? Number(m[3]);
    assert.ok(!Number.isNaN(value) || m[3] === 'NaN', `malformed metrics value: ${line}`);
    values.set(m[1], (values.get(m[1]) ?? 0) + value);
    if (m[2]) values.set(m[1] + m[2], value);
  }
  return values;
}

export async function fetchMetrics(origin) {
  const res = await fetch(`${origin}/metrics`);
  assert.equal(res.status, 200);
  return parseMetrics(await res.text());
}

// Polls /metrics until the engine is idle — no running or waiting sequence, no state slot or page in use — or the
// deadline passes (aborts reach the engine asynchronously). Returns the last metrics seen.
export async function waitForIdleEngine(origin, deadlineMs = 30_000) {
  const until = Date.now() + deadlineMs;
  const idleKeys = ['strata_num_requests_running', 'strata_num_requests_waiting', 'strata_state_pool_used_slots',
                    'strata_state_pool_used_blocks'];
  for (;;) {
    const metrics = await fetchMetrics(origin);
    const busy = idleKeys.filter((k) => metrics.get(k) !== 0);
    if (busy.length === 0) return metrics;
    if (Date.now() > until)
      assert.fail(`the engine is not idle ${deadlineMs} ms after the last client: ${busy.map((k) => `${k}=${metrics.get(k)}`)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
