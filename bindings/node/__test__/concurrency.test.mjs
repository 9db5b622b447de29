// Uniqueness across worker threads and processes sharing one SQLite store, a clean exit after
// close(), and an event loop that keeps running while a runtime is being created.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Worker } from 'node:worker_threads'
import { join } from 'node:path'
import { cosid, tempDir, memoryConfig, sqliteConfig, expectError, packageDir, runNode } from './helpers.mjs'

const { Runtime } = cosid
const fixture = (name) => join(packageDir, '__test__', 'fixtures', name)

test('4 worker threads, each with its own Runtime on one SQLite store, issue no duplicate', { timeout: 180_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  const config = sqliteConfig(db, { namespace: 'workers' })
  const count = 20_000
  const results = await Promise.all(
    [0, 1, 2, 3].map(
      () =>
        new Promise((resolve, reject) => {
          const w = new Worker(fixture('worker.mjs'), { workerData: { packageDir, config, count } })
          w.once('message', resolve)
          w.once('error', reject)
          w.once('exit', (code) => code !== 0 && reject(new Error(`worker exited with ${code}`)))
        }),
    ),
  )
  const all = new Set()
  for (const r of results) {
    assert.equal(r.ids.length, count)
    for (const id of r.ids) all.add(id)
  }
  // A worker that finished early released its slot, and a later one may have taken it: the
  // windows on one slot are disjoint, so that is no duplicate either.
  assert.equal(all.size, 4 * count, 'no id was issued twice')
})

test('4 processes on one SQLite store issue no duplicate', { timeout: 180_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  const config = JSON.stringify(sqliteConfig(db, { namespace: 'procs' }))
  const count = 20_000
  const results = await Promise.all([0, 1, 2, 3].map(() => runNode([fixture('child.mjs'), packageDir, config, String(count)])))
  const all = new Set()
  for (const r of results) {
    assert.equal(r.code, 0, r.stderr)
    const { ids } = JSON.parse(r.stdout)
    assert.equal(ids.length, count + 1000)
    for (const id of ids) all.add(id)
  }
  assert.equal(all.size, 4 * (count + 1000), 'no id was issued twice')
})

test('the process exits on its own after close()', { timeout: 180_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  const config = JSON.stringify(sqliteConfig(db, { namespace: 'exit' }))
  // A generous bound: a process kept alive by a handle is killed and the test fails.
  const r = await runNode([fixture('exit.mjs'), packageDir, config], 60_000)
  assert.equal(r.signal, null, `the process did not exit on its own (killed by ${r.signal}); stderr: ${r.stderr}`)
  assert.equal(r.code, 0, r.stderr)
  assert.equal(r.stdout.trim(), 'closed')
})

test('the event loop keeps running while Runtime.create waits for a slot', { timeout: 180_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  const holder = await Runtime.create(sqliteConfig(db, { namespace: 'busy', bits: 0 }))
  let ticks = 0
  const timer = setInterval(() => ticks++, 20)
  try {
    // The only slot is held: creation retries for acquire-timeout (2 s), off the event loop.
    await expectError(
      Runtime.create(sqliteConfig(db, { namespace: 'busy', bits: 0, lease: { 'acquire-timeout': '2s' } })),
      Error,
      'COSID_ERR_EXHAUSTED',
    )
  } finally {
    clearInterval(timer)
  }
  // A loop blocked for the whole wait would have ticked at most once or twice.
  assert.ok(ticks >= 5, `the 20 ms timer fired ${ticks} times during a 2 s creation`)
  await holder.close()
})

test('a runtime left behind by an exiting worker thread releases its slot', { timeout: 180_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  // One slot; the next runtime waits up to 20 s for it (the lease itself would last 30 s).
  const config = sqliteConfig(db, { namespace: 'abandoned', bits: 0, lease: { 'acquire-timeout': '20s' } })
  const first = await new Promise((resolve, reject) => {
    const w = new Worker(fixture('abandon.mjs'), { workerData: { packageDir, config: JSON.stringify(config) } })
    let id
    w.once('message', (m) => (id = m))
    w.once('error', reject)
    w.once('exit', (code) => (code === 0 ? resolve(id) : reject(new Error(`worker exited with ${code}`))))
  })
  assert.equal(typeof first, 'bigint')
  const rt = await Runtime.create(config)
  assert.ok(rt.next() > first, 'the slot was handed over with its last timestamp as the new floor')
  await rt.close()
})

test('a runtime collected without close() releases its slot, off the event loop', { timeout: 180_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  // The second runtime waits less than the first one's lease (30 s) would take to expire: it
  // starts only if the collected runtime released its slot.
  const config = JSON.stringify(sqliteConfig(db, { namespace: 'collected', bits: 0, lease: { 'acquire-timeout': '10s' } }))
  const r = await runNode(['--expose-gc', fixture('abandon.mjs'), packageDir, config, db])
  assert.equal(r.code, 0, r.stderr)
  const { first, second } = JSON.parse(r.stdout)
  assert.ok(BigInt(second) > BigInt(first))
})

test('close() lets go of the listeners: the runtime object, still alive, no longer holds them', { timeout: 120_000 }, async () => {
  const config = JSON.stringify(memoryConfig({ namespace: 'listeners-after-close' }))
  const r = await runNode(['--expose-gc', fixture('listener_after_close.mjs'), packageDir, config])
  assert.equal(r.code, 0, r.stderr)
  assert.equal(r.stdout.trim(), 'collected')
})
