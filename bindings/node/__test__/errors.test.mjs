// Every error code a Node program can trigger, and bad arguments.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cosid, tempDir, memoryConfig, sqliteConfig, expectError } from './helpers.mjs'

const { Runtime, toBase62, fromBase62 } = cosid

test('COSID_ERR_CONFIG: malformed documents, unknown keys, a path that names no file', async () => {
  await expectError(Runtime.create('cosid: ['), Error, 'COSID_ERR_CONFIG', 'not valid YAML')
  await expectError(Runtime.create({ cosid: { machine: { lease: { tll: '3s' } } } }), Error, 'COSID_ERR_CONFIG', "did you mean 'ttl'")
  await expectError(Runtime.create({ cosid: { machine: { lease: { ttl: 'fast' } } } }), Error, 'COSID_ERR_CONFIG', 'cosid.machine.lease.ttl')
  await expectError(Runtime.create({ namespace: 'x' }), Error, 'COSID_ERR_CONFIG', "'cosid'")
  await expectError(Runtime.create('/no/such/dir/cosid.yaml'), Error, 'COSID_ERR_CONFIG', '/no/such/dir/cosid.yaml')
  await expectError(Runtime.create('  '), Error, 'COSID_ERR_CONFIG', 'empty')
})

test('an object value is taken literally: "${HOME}" is not read from the environment', async () => {
  // ${VAR} expands in configuration text and files only; here the literal text is refused as a
  // namespace for its braces, and the message shows it as given.
  await expectError(Runtime.create(memoryConfig({ namespace: '${HOME}' })), Error, 'COSID_ERR_CONFIG', "namespace '${HOME}'")
})

test('a store URL passed where the configuration goes is not echoed with its password', async () => {
  const e = await expectError(Runtime.create('redis://:S3CRETPW@db.example'), Error, 'COSID_ERR_CONFIG', 'names no existing file')
  assert.ok(!e.message.includes('S3CRETPW'), e.message)
})

test('COSID_ERR_STORE: a SQLite path that cannot be created', async () => {
  await expectError(Runtime.create(sqliteConfig('/proc/x/slots.db')), Error, 'COSID_ERR_STORE', '/proc/x/slots.db')
})

test('COSID_ERR_NAMESPACE_MISMATCH: two runtimes on one SQLite file ask for different tolerances', async () => {
  const db = join(tempDir(), 'slots.db')
  const first = await Runtime.create(sqliteConfig(db, { namespace: 'mm', lease: { tolerance: '1s' } }))
  await expectError(
    Runtime.create(sqliteConfig(db, { namespace: 'mm', lease: { tolerance: '2s' } })),
    Error,
    'COSID_ERR_NAMESPACE_MISMATCH',
    'tolerance',
  )
  await first.close()
})

test('COSID_ERR_EXHAUSTED: the only slot is held and acquire-timeout runs out', async () => {
  const db = join(tempDir(), 'slots.db')
  const holder = await Runtime.create(sqliteConfig(db, { namespace: 'one', bits: 0 }))
  await expectError(
    Runtime.create(sqliteConfig(db, { namespace: 'one', bits: 0, lease: { 'acquire-timeout': '100ms' } })),
    Error,
    'COSID_ERR_EXHAUSTED',
  )
  await holder.close()
  // Released: the slot can be had again.
  const next = await Runtime.create(sqliteConfig(db, { namespace: 'one', bits: 0 }))
  assert.equal(typeof next.next(), 'bigint')
  await next.close()
})

test('COSID_ERR_STATE_FILE: a static slot with a corrupt state file', async () => {
  const dir = tempDir()
  const stateFile = join(dir, 'state')
  writeFileSync(stateFile, 'this is not a cosid state file\n')
  const config = { cosid: { namespace: 'st', machine: { static: { slot: 1, 'state-file': stateFile } } } }
  await expectError(Runtime.create(config), Error, 'COSID_ERR_STATE_FILE', stateFile)
})

test('COSID_ERR_TIMEOUT: next() throws at once when the next time unit is far; nextAsync() waits for it', async () => {
  // One-second units with two ids per unit: the third id of a second is up to a second away.
  const rt = await Runtime.create(
    memoryConfig({ snowflake: { 'timestamp-unit': 's', 'timestamp-bits': 31, 'node-bits': 3, 'sequence-bits': 1 } }),
  )
  let error
  for (let i = 0; i < 100 && !error; i++) {
    try {
      rt.next()
    } catch (e) {
      error = e
    }
  }
  assert.ok(error, 'two ids per second: 100 calls in a row cannot all be served')
  assert.equal(error.code, 'COSID_ERR_TIMEOUT')
  assert.match(error.message, /nextAsync/)
  const waited = await rt.nextAsync()
  assert.equal(typeof waited, 'bigint')
  const batch = await rt.nextBatchAsync(3)
  assert.equal(batch.length, 3)
  assert.ok(batch[0] > waited)
  await rt.close()
})

const havePython = spawnSync('python3', ['-c', 'import sqlite3'], { stdio: 'ignore' }).status === 0

test(
  'COSID_ERR_WINDOW_CLOSED: next() throws at once while the store is locked past the ceiling; nextAsync() waits',
  { skip: havePython ? false : 'needs python3 with sqlite3 to hold the store lock', timeout: 120_000 },
  async () => {
    const db = join(tempDir(), 'slots.db')
    const rt = await Runtime.create(sqliteConfig(db, { namespace: 'wc', lease: { ttl: '300ms', tolerance: '50ms' } }))
    rt.next()
    // Another process holds the database's write lock for 3 s: the keeper cannot renew, the
    // 300 ms window runs out.
    const locker = spawn(
      'python3',
      [
        '-c',
        'import sqlite3,sys,time\n' +
          'c=sqlite3.connect(sys.argv[1],isolation_level=None,timeout=30)\n' +
          "c.execute('BEGIN EXCLUSIVE')\nprint('locked',flush=True)\ntime.sleep(3)\nc.execute('COMMIT')\n",
        db,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    const exited = new Promise((resolve) => locker.on('exit', resolve))
    await new Promise((resolve) => locker.stdout.once('data', resolve))
    let locked = true
    exited.then(() => (locked = false))
    let error
    while (!error && locked) {
      try {
        rt.next()
        await new Promise((resolve) => setTimeout(resolve, 5))
      } catch (e) {
        error = e
      }
    }
    assert.ok(error, 'next() kept issuing for the whole 3 s lock, past a 300 ms window')
    assert.equal(error.code, 'COSID_ERR_WINDOW_CLOSED', error.message)
    assert.match(error.message, /ceiling/)
    // Waits (off the loop) until the lock is gone and the keeper renewed. Many waiting calls
    // queue behind one waiting thread, not a thread each.
    const threads = () => Number(/^Threads:\s+(\d+)/m.exec(readFileSync('/proc/self/status', 'utf8'))[1])
    const before = threads()
    const pending = Array.from({ length: 500 }, (_, i) => (i % 10 ? rt.nextAsync() : rt.nextBatchAsync(10)))
    const during = threads()
    assert.ok(during - before <= 5, `500 waiting calls started ${during - before} threads`)
    assert.equal(await exited, 0)
    const all = new Set()
    for (const r of await Promise.all(pending)) for (const id of typeof r === 'bigint' ? [r] : r) all.add(id)
    assert.equal(all.size, 450 + 50 * 10, 'every waiting call got its own ids')
    await rt.close()
  },
)

test('COSID_ERR_INVALID_ARGUMENT: malformed base-62 text, a bad generator name', async () => {
  await expectError(() => fromBase62('!!'), Error, 'COSID_ERR_INVALID_ARGUMENT', '!!')
  await expectError(() => fromBase62('zzzzzzzzzzz'), Error, 'COSID_ERR_INVALID_ARGUMENT')
  const rt = await Runtime.create(memoryConfig())
  await expectError(() => rt.generator('bad\nname'), Error, 'COSID_ERR_INVALID_ARGUMENT', 'generator name')
  await expectError(() => rt.generator('x'.repeat(200)), Error, 'COSID_ERR_INVALID_ARGUMENT')
  await rt.close()
})

test('bad batch sizes: RangeError or TypeError with a clear message', async () => {
  const rt = await Runtime.create(memoryConfig())
  const code = 'COSID_ERR_INVALID_ARGUMENT'
  await expectError(() => rt.nextBatch(-1), RangeError, code, 'got -1')
  await expectError(() => rt.nextBatch(1e9), RangeError, code, 'from 0 to 65536')
  await expectError(() => rt.nextBatch(65537), RangeError, code, 'nextBatchAsync')
  await expectError(() => rt.nextBatch(1.5), RangeError, code, 'integer')
  await expectError(() => rt.nextBatch(NaN), RangeError, code)
  await expectError(() => rt.nextBatch(Infinity), RangeError, code)
  await expectError(() => rt.nextBatch('3'), TypeError, code, 'must be a number')
  await expectError(() => rt.nextBatch(), TypeError, code, 'undefined')
  await expectError(() => rt.nextBatch(3n), TypeError, code, 'bigint')
  await expectError(rt.nextBatchAsync(-5), RangeError, code)
  await expectError(rt.nextBatchAsync(2 ** 40), RangeError, code, '4194304')
  await rt.close()
})

test('bad ids: TypeError for a non-bigint, RangeError outside 64 bits', async () => {
  const rt = await Runtime.create(memoryConfig())
  const code = 'COSID_ERR_INVALID_ARGUMENT'
  await expectError(() => rt.parse(5), TypeError, code, 'bigint')
  await expectError(() => rt.parse('918653748186710016'), TypeError, code, 'BigInt(s)')
  await expectError(() => rt.parse(), TypeError, code)
  await expectError(() => rt.parse(-1n), RangeError, code, '-1')
  await expectError(() => rt.parse(1n << 64n), RangeError, code, '18446744073709551616')
  await expectError(() => rt.parse(1n << 63n), Error, code, 'wider') // wider than the 63-bit layout
  await expectError(() => toBase62(5), TypeError, code)
  await expectError(() => toBase62(-5n), RangeError, code)
  await expectError(() => fromBase62(5), TypeError, code, 'string')
  await rt.close()
})

test('bad configurations and listeners: TypeError naming the value', async () => {
  const code = 'COSID_ERR_INVALID_ARGUMENT'
  await expectError(Runtime.create(42), TypeError, code, 'got a number')
  await expectError(Runtime.create(true), TypeError, code, 'boolean')
  await expectError(Runtime.create([]), TypeError, code, 'array')
  await expectError(Runtime.create({ cosid: { namespace: () => 'x' } }), TypeError, code, 'config.cosid.namespace')
  await expectError(Runtime.create({ cosid: { namespace: Symbol('x') } }), TypeError, code, 'symbol')
  await expectError(Runtime.create({ cosid: { 'max-wait': NaN } }), TypeError, code, 'finite')
  const cyclic = { cosid: {} }
  cyclic.cosid.self = cyclic
  await expectError(Runtime.create(cyclic), TypeError, code, 'nested')
  const rt = await Runtime.create(memoryConfig())
  await expectError(() => rt.on('nope', () => {}), TypeError, code, 'slot_released')
  await expectError(() => rt.on('slot_lost', 5), TypeError, code, 'function')
  await expectError(() => rt.on(5, () => {}), TypeError, code, 'string')
  await expectError(() => rt.generator(5), TypeError, code, 'string')
  await rt.close()
})

test('configuration objects may hold numbers, booleans, Dates and bigints', async () => {
  const rt = await Runtime.create({
    cosid: {
      namespace: 'typed',
      'max-wait': '1s',
      machine: { lease: { store: `memory:typed-${process.pid}`, bits: 3n, ttl: '10s', 'preferred-slot': 5 } },
    },
  })
  assert.equal(rt.stats().slot, 5)
  await rt.close()
  const dated = await Runtime.create({
    cosid: { namespace: 'dated', snowflake: { epoch: new Date('2020-01-01T00:00:00Z') }, machine: { lease: { store: `memory:dated-${process.pid}`, bits: 3 } } },
  })
  assert.equal(dated.layout.epochMs, Date.parse('2020-01-01T00:00:00Z'))
  await dated.close()
})
