// The addon reaches every store: Redis, PostgreSQL, etcd and MariaDB servers started for the run
// (scripts/test-node runs the tests under scripts/with-test-servers, which sets
// COSID_TEST_*_URL). A test whose server is not named fails: a store test is never skipped.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { cosid, expectError, ids } from './helpers.mjs'

const { Runtime } = cosid
const KINDS = ['redis', 'postgres', 'etcd', 'mysql']

function storeUrl(kind) {
  const name = `COSID_TEST_${kind.toUpperCase()}_URL`
  const url = (process.env[name] || '').trim()
  if (!url) {
    throw new Error(
      `${name} is not set: run these tests through scripts/test-node (it starts the servers), or ` +
        `with scripts/with-test-servers ${kind} node --test ..., or point ${name} at a server the tests may use`,
    )
  }
  return url
}

const config = (store, namespace, lease = {}) => ({
  cosid: { namespace, machine: { lease: { store, bits: 4, ...lease } } },
})
const freshNamespace = () => `node-${randomUUID().slice(0, 12)}`

for (const kind of KINDS) {
  test(`${kind}: runtimes on one namespace hold different slots and issue disjoint ids`, async () => {
    const store = storeUrl(kind)
    const namespace = freshNamespace()
    const a = await Runtime.create(config(store, namespace))
    const b = await Runtime.create(config(store, namespace))
    try {
      const slotA = a.stats().slot
      const slotB = b.stats().slot
      assert.notEqual(slotA, slotB)
      const idsA = [...ids(a.nextBatch(5000)), a.next().toString()]
      const idsB = [...ids(b.nextBatch(5000)), b.next().toString()]
      assert.equal(new Set([...idsA, ...idsB]).size, idsA.length + idsB.length)
      for (const id of idsA) assert.equal(a.parse(BigInt(id)).slot, slotA)
      for (const id of idsB) assert.equal(b.parse(BigInt(id)).slot, slotB)
    } finally {
      await a.close()
      await b.close()
    }
  })

  test(`${kind}: a released slot is taken again by the next runtime`, async () => {
    const store = storeUrl(kind)
    const namespace = freshNamespace()
    // One slot only (bits 0): the second runtime starts only because close() released it.
    const first = await Runtime.create(config(store, namespace, { bits: 0 }))
    const last = first.next()
    await first.close()
    const second = await Runtime.create(config(store, namespace, { bits: 0, 'acquire-timeout': '5s' }))
    try {
      assert.equal(second.stats().slot, 0)
      assert.ok(second.next() > last)
    } finally {
      await second.close()
    }
  })
}

for (const store of [
  'redis://127.0.0.1:1',
  'postgres://cosid@127.0.0.1:1/cosid',
  'etcd://127.0.0.1:1',
  'mysql://cosid@127.0.0.1:1/cosid',
]) {
  test(`${store}: an unreachable store is COSID_ERR_STORE naming it (the addon has its client)`, async () => {
    const error = await expectError(
      Runtime.create(config(store, freshNamespace(), { 'acquire-timeout': '300ms' })),
      Error,
      'COSID_ERR_STORE',
      '127.0.0.1:1',
    )
    assert.ok(!String(error.message).includes('feature'), error.message)
  })
}
