// The API: creating a runtime every way, the id methods, generators, stats, events, close.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { copyFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { cosid, tempDir, memoryConfig, sqliteConfig, expectError, packageDir } from './helpers.mjs'

const { Runtime, Generator, toBase62, fromBase62 } = cosid

test('Runtime.create accepts an object, a YAML string, a JSON string and a file path', async () => {
  const dir = tempDir()
  const db = join(dir, 'slots.db')
  const yaml = `cosid:\n  namespace: forms\n  machine:\n    lease:\n      store: sqlite://${db}\n      bits: 3\n`
  const file = join(dir, 'cosid.yaml')
  writeFileSync(file, yaml)
  const runtimes = [
    await Runtime.create(sqliteConfig(db, { namespace: 'forms' })),
    await Runtime.create(yaml),
    await Runtime.create(JSON.stringify(sqliteConfig(db, { namespace: 'forms' }))),
    await Runtime.create(file),
  ]
  const slots = runtimes.map((rt) => rt.stats().slot)
  assert.equal(new Set(slots).size, 4, `four runtimes on one store hold four slots: ${slots}`)
  for (const rt of runtimes) {
    assert.ok(rt instanceof Runtime)
    assert.equal(rt.namespace, 'forms')
    assert.equal(typeof rt.next(), 'bigint')
    await rt.close()
  }
})

test('Runtime.create() with no configuration uses the embedded default under XDG_STATE_HOME', async () => {
  const rt = await Runtime.create()
  assert.equal(rt.namespace, 'default')
  assert.ok(existsSync(join(process.env.XDG_STATE_HOME, 'cosid', 'slots.db')))
  assert.equal(typeof rt.next(), 'bigint')
  await rt.close()
  const again = await Runtime.create(null)
  assert.equal(again.namespace, 'default')
  await again.close()
})

test('next() returns unique, strictly increasing bigints of the runtime slot', async () => {
  const rt = await Runtime.create(memoryConfig())
  const slot = rt.stats().slot
  let last = -1n
  for (let i = 0; i < 20000; i++) {
    const id = rt.next()
    assert.equal(typeof id, 'bigint')
    assert.ok(id > last, `id ${id} after ${last}`)
    last = id
  }
  assert.equal(rt.parse(last).slot, slot)
  assert.equal(rt.stats().idsIssued, 20000)
  await rt.close()
})

test('nextBatch(n) returns n fresh increasing ids in a BigUint64Array; nextBatch(0) is empty', async () => {
  const rt = await Runtime.create(memoryConfig())
  const before = rt.next()
  const batch = rt.nextBatch(10000)
  assert.ok(batch instanceof BigUint64Array)
  assert.equal(batch.length, 10000)
  assert.ok(batch[0] > before)
  for (let i = 1; i < batch.length; i++) assert.ok(batch[i] > batch[i - 1])
  assert.ok(rt.next() > batch[batch.length - 1])
  assert.equal(rt.nextBatch(0).length, 0)
  assert.equal(rt.nextBatch(65536).length, 65536)
  await rt.close()
})

test('nextStr() and toBase62/fromBase62 round-trip and sort like the ids', async () => {
  const rt = await Runtime.create(memoryConfig())
  const texts = [rt.nextStr(), rt.nextStr(), await rt.nextStrAsync()]
  for (const t of texts) assert.match(t, /^[0-9A-Za-z]{11}$/)
  assert.deepEqual([...texts].sort(), texts)
  const ids = texts.map(fromBase62)
  assert.ok(ids[0] < ids[1] && ids[1] < ids[2])
  for (const [i, id] of ids.entries()) assert.equal(toBase62(id), texts[i])
  assert.equal(toBase62(0n), '00000000000')
  assert.equal(fromBase62(toBase62(18446744073709551615n)), 18446744073709551615n)
  await rt.close()
})

test('parse(id) gives id, timestamp, time, slot and sequence', async () => {
  const rt = await Runtime.create(memoryConfig())
  const [a, b] = [rt.next(), rt.next()]
  const info = rt.parse(b)
  assert.deepEqual(Object.keys(info), ['id', 'timestamp', 'time', 'slot', 'sequence'])
  assert.equal(info.id, b)
  assert.equal(typeof info.timestamp, 'number')
  assert.equal(info.time, new Date(info.timestamp).toISOString())
  assert.ok(Math.abs(info.timestamp - Date.now()) < 600_000, 'the id was issued about now')
  assert.equal(info.slot, rt.stats().slot)
  const pa = rt.parse(a)
  assert.ok(pa.timestamp < info.timestamp || pa.sequence < info.sequence)
  const l = rt.layout
  assert.deepEqual(
    [l.unit, l.timestampBits, l.nodeBits, l.sequenceBits, l.epochMs],
    ['ms', 41, 10, 12, Date.parse('2019-12-24T16:00:00Z')],
  )
  await rt.close()
})

test('named generators share the slot and each have their own id space', async () => {
  const rt = await Runtime.create(memoryConfig())
  const orders = rt.generator('orders')
  assert.ok(orders instanceof Generator)
  assert.equal(orders.name, 'orders')
  assert.equal(rt.generator('').name, '')
  const a = orders.next()
  const b = rt.generator('orders').next()
  assert.ok(b > a, 'the same name is the same generator')
  assert.equal(orders.parse(a).slot, rt.stats().slot)
  assert.equal(typeof orders.nextStr(), 'string')
  assert.equal(orders.nextBatch(3).length, 3)
  assert.equal(typeof (await orders.nextAsync()), 'bigint')
  assert.equal((await orders.nextBatchAsync(5)).length, 5)
  await rt.close()
  await expectError(() => orders.next(), Error, 'COSID_ERR_CLOSED')
})

test('nextAsync() and nextBatchAsync(n) resolve with fresh ids', async () => {
  const rt = await Runtime.create(memoryConfig())
  const a = await rt.nextAsync()
  const batch = await rt.nextBatchAsync(100000)
  assert.equal(batch.length, 100000)
  assert.ok(batch[0] > a)
  for (let i = 1; i < batch.length; i++) assert.ok(batch[i] > batch[i - 1])
  assert.ok((await rt.nextAsync()) > batch[batch.length - 1])
  await rt.close()
})

test('the id methods are own properties; the prototype methods behave the same', async () => {
  const rt = await Runtime.create(memoryConfig())
  for (const m of ['next', 'nextStr', 'nextBatch', 'parse', 'nextAsync', 'nextStrAsync', 'nextBatchAsync']) {
    assert.equal(typeof rt[m], 'function')
    assert.ok(Object.hasOwn(rt, m), `${m} is an own property`)
    assert.equal(typeof Runtime.prototype[m], 'function')
  }
  const viaPrototype = Runtime.prototype.next.call(rt)
  assert.ok(rt.next() > viaPrototype)
  assert.equal(Runtime.prototype.nextBatch.call(rt, 4).length, 4)
  assert.equal(Runtime.prototype.parse.call(rt, viaPrototype).id, viaPrototype)
  // A detached method keeps working: its generator travels with it.
  const next = rt.next
  assert.equal(typeof next(), 'bigint')
  await rt.close()
})

test('stats() counts issued ids and describes the bound window', async () => {
  const rt = await Runtime.create(memoryConfig())
  rt.nextBatch(100)
  rt.next()
  const s = rt.stats()
  assert.equal(s.idsIssued, 101)
  assert.equal(s.acquisitions, 1)
  assert.equal(s.bound, true)
  assert.ok(s.ceilingMs > s.floorMs)
  assert.equal(s.slot, rt.parse(rt.next()).slot)
  await rt.close()
  assert.equal(rt.stats().bound, false)
  // No slot is bound: null, as Python's Stats.slot is None (not the released slot's number).
  assert.equal(rt.stats().slot, null)
})

// The stats fields as the README documents them: the core's names (the C struct's members and
// Python's Stats attributes) in camelCase, in the core's order.
const DOCUMENTED_STATS_FIELDS = ['idsIssued', 'waits', 'renewals', 'renewalFailures', 'acquisitions',
  'slotsLost', 'clockSkewEvents', 'slot', 'bound', 'floorMs', 'ceilingMs']

test('stats() carries exactly the core fields in camelCase, as received and as index.d.ts declares them', async () => {
  const rt = await Runtime.create(memoryConfig())
  rt.next()
  const s = rt.stats()
  assert.deepEqual(Object.keys(s), DOCUMENTED_STATS_FIELDS)
  for (const key of DOCUMENTED_STATS_FIELDS) {
    assert.equal(typeof s[key], key === 'bound' ? 'boolean' : 'number', key)
  }
  assert.equal(s.idsIssued, 1)
  await rt.close()
  assert.deepEqual(Object.keys(rt.stats()), DOCUMENTED_STATS_FIELDS, 'the same keys once closed')
  const dts = readFileSync(join(packageDir, 'index.d.ts'), 'utf8')
  const body = dts.split('export interface Stats {')[1].split('\n}')[0]
  assert.deepEqual([...body.matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1]), DOCUMENTED_STATS_FIELDS)
})

test('on(): listeners receive keeper events; slot_released arrives when close() releases the slot', async () => {
  const rt = await Runtime.create(memoryConfig())
  const slot = rt.stats().slot
  const seen = []
  const released = new Promise((resolve) => rt.on('slot_released', resolve))
  rt.on('*', (e) => seen.push(e.kind))
  assert.equal(rt.on('slot_lost', () => {}), rt, 'on() returns the runtime')
  const last = rt.next()
  await rt.close()
  const event = await released
  assert.equal(event.kind, 'slot_released')
  assert.equal(event.slot, slot)
  assert.equal(event.nextFloorMs, rt.parse(last).timestamp, 'the slot is released with the last timestamp')
  assert.match(event.message, /released/)
  assert.ok(seen.includes('slot_released'))
  await expectError(() => rt.on('slot_lost', () => {}), Error, 'COSID_ERR_CLOSED')
})

// The event vocabulary as the README documents it: each kind and its fields, the camelCase of
// the C struct's members and Python's Event attributes (as stats fields are).
const DOCUMENTED_EVENT_FIELDS = {
  slot_acquired: ['slot', 'fence', 'floorMs', 'ceilingMs'],
  slot_lost: ['slot', 'reason'],
  duplicate_owner_key: ['slot', 'key'],
  clock_skew: ['skewMs'],
  renewal_failed: ['slot', 'attempt', 'error'],
  store_reset: ['slot'],
  acquire_failed: ['error'],
  slot_released: ['slot', 'nextFloorMs'],
  window_ahead: ['slot', 'floorMs', 'reason'],
  store_unavailable: ['attempt', 'error', 'waitedMs', 'timeoutMs'],
}

test('events carry exactly the core vocabulary, as received and as index.d.ts declares it', async () => {
  // The kinds on() accepts are the core's (its error lists them).
  const rt = await Runtime.create(memoryConfig())
  await expectError(() => rt.on('nope', () => {}), TypeError, 'COSID_ERR_INVALID_ARGUMENT',
    `events are ${[...Object.keys(DOCUMENTED_EVENT_FIELDS), '*'].join(', ')}`)
  // A received event has kind, message and exactly its kind's fields, under the camelCase of the core's names.
  const received = []
  rt.on('*', (e) => received.push(e))
  const released = new Promise((resolve) => rt.on('slot_released', resolve))
  rt.next()
  await rt.close()
  await released
  assert.ok(received.length >= 1)
  for (const e of received) {
    assert.deepEqual(Object.keys(e), ['kind', 'message', ...DOCUMENTED_EVENT_FIELDS[e.kind]], e.kind)
  }
  // index.d.ts declares RuntimeEvent with exactly the vocabulary's names.
  const dts = readFileSync(join(packageDir, 'index.d.ts'), 'utf8')
  const body = dts.split('export interface RuntimeEvent {')[1].split('\n}')[0]
  const declared = [...body.matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1])
  const every = [...new Set(Object.values(DOCUMENTED_EVENT_FIELDS).flat())]
  assert.deepEqual(declared.sort(), ['kind', 'message', ...every].sort())
  // ... and its kinds, in RuntimeEvent.kind and in on()'s event argument.
  const literals = (text) => [...text.matchAll(/'(\w+|\*)'/g)].map((m) => m[1])
  assert.deepEqual(literals(body.match(/^ {2}kind: (.*)$/m)[1]), Object.keys(DOCUMENTED_EVENT_FIELDS))
  assert.deepEqual(literals(dts.match(/^ {2}on\(event: ([^,]*),/m)[1]), [...Object.keys(DOCUMENTED_EVENT_FIELDS), '*'])
})

test('Runtime.create(config, { onEvent }) sees every event from the first slot_acquired on', async () => {
  const events = []
  let resolveFirst
  const first = new Promise((resolve) => (resolveFirst = resolve))
  const rt = await Runtime.create(memoryConfig(), {
    onEvent: (e) => {
      events.push(e)
      resolveFirst()
    },
  })
  const slot = rt.stats().slot
  await first
  assert.equal(events[0].kind, 'slot_acquired', `the first event: ${events.map((e) => e.kind)}`)
  assert.equal(events[0].slot, slot)
  assert.deepEqual(Object.keys(events[0]), ['kind', 'message', ...DOCUMENTED_EVENT_FIELDS.slot_acquired])
  // The listener stays for the runtime's life, like rt.on('*', listener).
  const released = new Promise((resolve) => rt.on('slot_released', resolve))
  await rt.close()
  await released
  assert.ok(events.some((e) => e.kind === 'slot_released'), `events: ${events.map((e) => e.kind)}`)
})

test('Runtime.create refuses options it does not know, naming them', async () => {
  await expectError(Runtime.create(memoryConfig(), { onevent: () => {} }), TypeError, 'COSID_ERR_INVALID_ARGUMENT',
    "unknown option 'onevent'; the options are onEvent")
  await expectError(Runtime.create(memoryConfig(), { onEvent: 'log' }), TypeError, 'COSID_ERR_INVALID_ARGUMENT',
    'options.onEvent must be a function')
  await expectError(Runtime.create(memoryConfig(), () => {}), TypeError, 'COSID_ERR_INVALID_ARGUMENT',
    'options must be an object')
  // A string given as the options is never echoed: it may be a store URL with its password.
  const e = await expectError(Runtime.create(memoryConfig(), 'redis://u:hunter2@host/0'), TypeError,
    'COSID_ERR_INVALID_ARGUMENT', 'got a string')
  assert.ok(!e.message.includes('hunter2'), e.message)
  // No options, or none given, is fine.
  for (const options of [undefined, null, {}, { onEvent: undefined }]) {
    await (await Runtime.create(memoryConfig(), options)).close()
  }
})

// The error codes as the README documents them: the C API's status names.
const DOCUMENTED_ERROR_CODES = ['COSID_ERR_CONFIG', 'COSID_ERR_STORE', 'COSID_ERR_WINDOW_CLOSED',
  'COSID_ERR_SLOT_LOST', 'COSID_ERR_CLOCK_BEHIND', 'COSID_ERR_TIMEOUT', 'COSID_ERR_CLOSED',
  'COSID_ERR_FORKED', 'COSID_ERR_INVALID_ARGUMENT', 'COSID_ERR_EXHAUSTED',
  'COSID_ERR_NAMESPACE_MISMATCH', 'COSID_ERR_STATE_FILE', 'COSID_ERR_INTERNAL', 'COSID_ERR_PANIC']

test('index.d.ts exports ErrorCode, the union of the codes errors carry', async () => {
  const dts = readFileSync(join(packageDir, 'index.d.ts'), 'utf8')
  const union = dts.match(/^export type ErrorCode =([^;]*?)(?:\n\n|$)/ms)
  assert.ok(union, 'index.d.ts has no ErrorCode type')
  const codes = [...union[1].matchAll(/'(\w+)'/g)].map((m) => m[1])
  assert.deepEqual(codes, DOCUMENTED_ERROR_CODES)
  // Codes of real errors are among them.
  const seen = [
    await expectError(Runtime.create('cosid: {nope: 1}'), Error, 'COSID_ERR_CONFIG'),
    await expectError(() => cosid.fromBase62('!!'), Error, 'COSID_ERR_INVALID_ARGUMENT'),
  ]
  for (const e of seen) assert.ok(codes.includes(e.code), e.code)
})

test('the benchmark hooks are not part of the package or of a default build of the addon', () => {
  assert.equal(cosid.noop, undefined)
  const require = createRequire(join(packageDir, 'index.js'))
  const native = require(join(packageDir, require(join(packageDir, 'platform.js')).binaryName()))
  assert.equal(native.noop, undefined)
  // A build with the bench-hooks feature (bench/bench.mjs) has them, under a hidden key only.
  assert.ok(!Object.keys(native).includes('__bench'))
})

test('close() stops every method with COSID_ERR_CLOSED; a second close() rejects', async () => {
  const rt = await Runtime.create(memoryConfig())
  rt.next()
  assert.equal(rt.closed, false)
  await rt.close()
  assert.equal(rt.closed, true)
  await expectError(() => rt.next(), Error, 'COSID_ERR_CLOSED')
  await expectError(() => rt.nextStr(), Error, 'COSID_ERR_CLOSED')
  await expectError(rt.nextStrAsync(), Error, 'COSID_ERR_CLOSED')
  await expectError(() => rt.nextBatch(2), Error, 'COSID_ERR_CLOSED')
  await expectError(rt.nextAsync(), Error, 'COSID_ERR_CLOSED')
  await expectError(rt.nextBatchAsync(2), Error, 'COSID_ERR_CLOSED')
  await expectError(() => rt.generator('late'), Error, 'COSID_ERR_CLOSED')
  await expectError(rt.close(), Error, 'COSID_ERR_CLOSED')
  // parse needs no slot
  assert.equal(typeof rt.parse(1n << 22n).timestamp, 'number')
})

test('index.d.ts declares exactly what index.js exports', () => {
  const dts = readFileSync(join(packageDir, 'index.d.ts'), 'utf8')
  const declared = [...dts.matchAll(/^export declare (?:class|function) (\w+)/gm)].map((m) => m[1]).sort()
  // Keys without a value are no export (an index.js line re-exporting a native name the addon
  // no longer has, such as the former benchmark hook `noop`).
  const exported = Object.keys(cosid).filter((k) => cosid[k] !== undefined)
  assert.deepEqual(exported.sort(), declared)
})

test('without a built addon, index.js says what is missing and how to build it', () => {
  const dir = tempDir()
  for (const f of ['index.js', 'platform.js']) copyFileSync(join(packageDir, f), join(dir, f))
  const require = createRequire(join(dir, 'index.js'))
  assert.throws(() => require(dir), (e) => /native addon .*cosid\..*\.node is missing/.test(e.message) && /cargo/.test(e.message))
})
