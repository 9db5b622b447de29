// Ctrl-C while a wait is pending: a SIGINT handler runs (the synchronous methods never block the
// event loop), and a process whose handler calls close() or process.exit() ends promptly rather
// than after max-wait or acquire-timeout (10 minutes here; runNode kills it long before).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { cosid, tempDir, packageDir, runNode } from './helpers.mjs'

const fixture = join(packageDir, '__test__', 'fixtures', 'sigint.mjs')

test('close() from a SIGINT handler settles pending async waits with COSID_ERR_CLOSED, and the process ends', { timeout: 120_000 }, async () => {
  const r = await runNode([fixture, packageDir, 'async'], 60_000)
  assert.equal(r.signal, null, `the process had to be killed (${r.signal}): a wait kept it alive; stderr: ${r.stderr}`)
  assert.equal(r.code, 0, r.stderr)
  const lines = r.stdout.trim().split('\n')
  assert.deepEqual(JSON.parse(lines.find((l) => l.startsWith('['))), ['COSID_ERR_CLOSED', 'COSID_ERR_CLOSED', 'COSID_ERR_CLOSED'])
  assert.ok(lines.includes('closed'), r.stdout)
})

test('process.exit() from a SIGINT handler ends a process whose Runtime.create() still waits for a slot', { timeout: 120_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  const r = await runNode([fixture, packageDir, 'create', db], 60_000)
  assert.equal(r.signal, null, `the process had to be killed (${r.signal}); stderr: ${r.stderr}`)
  assert.equal(r.code, 0, r.stderr)
  assert.deepEqual(r.stdout.trim().split('\n'), ['exiting'], 'the creation was still waiting when SIGINT came')
  // The holder's slot was released at exit: a runtime that does not wait gets it.
  const rt = await cosid.Runtime.create({
    cosid: { namespace: 'sigint', machine: { lease: { store: `sqlite://${db}`, bits: 0, ttl: '60s', 'acquire-timeout': '0s' } } },
  })
  await rt.close()
})
