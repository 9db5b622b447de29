// index.d.ts type-checks a TypeScript program that uses the API (and rejects misuse).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { createRequire } from 'node:module'
import { join, dirname } from 'node:path'
import { packageDir } from './helpers.mjs'

test('index.d.ts types a program that uses the API, and rejects misuse', () => {
  const require = createRequire(join(packageDir, 'package.json'))
  const tsc = join(dirname(require.resolve('typescript/package.json')), 'bin', 'tsc')
  const r = spawnSync(
    process.execPath,
    [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', join(packageDir, '__test__', 'fixtures', 'types.ts')],
    { encoding: 'utf8' },
  )
  assert.equal(r.status, 0, `tsc reported:\n${r.stdout}${r.stderr}`)
})
