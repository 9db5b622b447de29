// Node's prefork model, `cluster`: a primary and 4 workers, each with a runtime on one SQLite
// file, issuing ids and then ending with process.exit() (some from a SIGTERM or SIGINT handler) without
// closing the runtime. Every id is distinct and no slot is left held: a runtime still open is
// closed on the process's 'exit' event.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { tempDir, packageDir, runNode } from './helpers.mjs'

const fixture = (name) => join(packageDir, '__test__', 'fixtures', name)

test('cluster: 4 workers issue distinct ids and release their slots at process.exit(), on SIGTERM and SIGINT too', { timeout: 180_000 }, async () => {
  const db = join(tempDir(), 'slots.db')
  const count = 20_000
  const r = await runNode([fixture('cluster.mjs'), packageDir, db, 'cluster', String(count)], 120_000)
  assert.equal(r.signal, null, `the cluster was killed (${r.signal}): stderr: ${r.stderr}`)
  assert.equal(r.code, 0, r.stderr)
  const out = JSON.parse(r.stdout.trim().split('\n').pop())
  assert.equal(out.ids, 4 * count)
  assert.equal(out.distinct, out.ids, 'an id was issued twice')
  // Even workers called process.exit(0); worker 1 got SIGTERM, worker 3 SIGINT, and their
  // handler exited with 0.
  assert.deepEqual(out.exits, [[0, null], [0, null], [0, null], [0, null]])
  assert.equal(out.held, 0, `${out.held} slots still held after every worker exited`)
})
