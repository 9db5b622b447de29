// The Node benchmark: cosid's next() beside crypto.randomUUID(), uuid v7(), @sapphire/snowflake,
// nodejs-snowflake and the floor (an empty native call), all in one run.
//
//   cd bindings/node && npm ci && npm run build -- --features bench-hooks
//   node bench/bench.mjs            # COSID_BENCH_QUICK=1 for a short smoke run
//
// The floor needs the addon's benchmark hooks (the `bench-hooks` cargo feature: a hidden
// `__bench` export of the native addon, never in a published build); rebuild without the
// feature afterwards if this folder's addon is used for anything else.
//
// Per-call cases: the best and the median of BURSTS bursts of CALLS back-to-back calls (after a
// warm-up), in ns per call; batch cases: per id. The best burst is the cost of the call itself on
// a machine shared with other work; the median shows the noise. "Sustained" cases run many calls
// in a row and so include the layout's cap (4,096 ids per ms per generator with the default
// 41/10/12 layout: 244 ns per id). "dups" counts ids issued twice among DUP_N back-to-back calls.
import { createRequire } from 'node:module'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir, cpus, loadavg } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const require = createRequire(import.meta.url)
const { Runtime } = require('..')
const { binaryName } = require('../platform.js')
// The development build in the package folder, the one `require('..')` loads.
const noop = require(join(dirname(fileURLToPath(import.meta.url)), '..', binaryName())).__bench?.noop
if (typeof noop !== 'function') {
  console.error(
    'bench: the addon has no benchmark hooks; build it with: ' +
      'npm run build -- --features bench-hooks',
  )
  process.exit(1)
}
const { v7: uuidv7 } = await import('uuid')
const { Snowflake: SapphireSnowflake } = require('@sapphire/snowflake')
const { Snowflake: WasmSnowflake } = require('nodejs-snowflake')

const quick = process.env.COSID_BENCH_QUICK === '1'
const BURSTS = quick ? 30 : 300
const CALLS = 2000
const DUP_N = quick ? 100_000 : 1_000_000

const state = mkdtempSync(join(tmpdir(), 'cosid-bench-'))
process.env.XDG_STATE_HOME = state
const lease = (name) => ({ store: `memory:bench-${name}`, bits: 3 })
// 19 sequence bits (524,288 ids per ms): a loop of calls measures the call, not the layout's cap.
const wide = await Runtime.create({
  cosid: {
    namespace: 'bench',
    snowflake: { 'timestamp-bits': 41, 'node-bits': 3, 'sequence-bits': 19 },
    machine: { lease: lease('wide') },
  },
})
const standard = await Runtime.create({ cosid: { namespace: 'bench', machine: { lease: lease('std') } } })

const sapphire = new SapphireSnowflake(new Date('2020-01-01T00:00:00Z'))
const wasm = new WasmSnowflake({ custom_epoch: Date.parse('2020-01-01T00:00:00Z'), instance_id: 1 })

const sink = new Array(1024)
function burst(fn, calls) {
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < calls; i++) sink[i & 1023] = fn()
  return Number(process.hrtime.bigint() - t0)
}

function countDups(fn, perCall) {
  const seen = new Set()
  let issued = 0
  for (let i = 0; i < DUP_N / perCall; i++) {
    const v = fn()
    if (perCall === 1) {
      seen.add(v)
      issued++
    } else {
      for (const x of v) seen.add(x)
      issued += v.length
    }
  }
  return String(issued - seen.size)
}

function bench(name, fn, { bursts = BURSTS, calls = CALLS, perCall = 1, dups = true, pauseMs = 1 } = {}) {
  return async () => {
    burst(fn, calls * 10) // warm-up: JIT and inline caches
    const t = []
    for (let b = 0; b < bursts; b++) {
      t.push(burst(fn, calls) / (calls * perCall))
      // A short pause between bursts: a layout-capped generator starts the next burst in a fresh
      // millisecond, and every case sees the same pattern of calls.
      if (pauseMs) await new Promise((r) => setTimeout(r, pauseMs))
    }
    t.sort((a, b) => a - b)
    return { name, best: t[0], median: t[t.length >> 1], dups: dups ? countDups(fn, perCall) : '-' }
  }
}

const sustained = (name, fn, { total, perCall = 1 }) => async () => {
  const ns = burst(fn, total / perCall) / total
  return { name, best: ns, median: ns, dups: '-' }
}

const cases = [
  bench('floor: empty native call, `noop()`', () => noop(), { dups: false }),
  bench('**cosid `rt.next()`** (41/3/19 layout)', () => wide.next()),
  bench('cosid `rt.next()` (default 41/10/12 layout, 1000-call bursts)', () => standard.next(), { calls: 1000, pauseMs: 2 }),
  bench('cosid `rt.nextStr()` (41/3/19)', () => wide.nextStr(), { dups: false }),
  bench('cosid via a `#[napi]` class method, `Runtime.prototype.next.call(rt)`', () => Runtime.prototype.next.call(wide), {
    bursts: Math.ceil(BURSTS / 5),
    dups: false,
  }),
  bench('`crypto.randomUUID()`', () => crypto.randomUUID()),
  bench('`uuid` `v7()`', () => uuidv7()),
  bench('`@sapphire/snowflake` `generate()`', () => sapphire.generate()),
  bench('`nodejs-snowflake` `getUniqueID()`', () => wasm.getUniqueID()),
  bench('**cosid `rt.nextBatch(4096)`**, per id (41/3/19)', () => wide.nextBatch(4096), {
    calls: 20,
    perCall: 4096,
    bursts: Math.ceil(BURSTS / 3),
  }),
  sustained('cosid `rt.next()` sustained, default layout (200k calls in a row)', () => standard.next(), { total: 200_000 }),
  sustained('cosid `rt.nextBatch(4096)` sustained, default layout (200 batches in a row)', () => standard.nextBatch(4096), {
    total: 4096 * 200,
    perCall: 4096,
  }),
]

const load = loadavg()[0].toFixed(1)
const rows = []
for (const c of cases) rows.push(await c())
await wide.close()
await standard.close()
rmSync(state, { recursive: true, force: true })

const cpu = cpus()[0]?.model ?? 'unknown CPU'
console.log(`node ${process.version}, ${cpu}, ${cpus().length} cores, load average ${load} at start`)
console.log()
console.log(`| what | best ns | median ns | dups in ${DUP_N.toLocaleString('en-US')} |`)
console.log('| --- | ---: | ---: | ---: |')
for (const r of rows) console.log(`| ${r.name} | ${r.best.toFixed(1)} | ${r.median.toFixed(1)} | ${r.dups} |`)
