// Shared by the test files: the addon under test, temporary directories, configurations.
import { createRequire } from 'node:module'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, dirname } from 'node:path'
import { fileURLToPath } from 'node:url'

export const packageDir = join(dirname(fileURLToPath(import.meta.url)), '..')
const require = createRequire(join(packageDir, 'index.js'))
export const cosid = require(packageDir)

const made = []
/** A fresh temporary directory, removed when the process exits. */
export function tempDir(label = 'cosid-node-') {
  const dir = mkdtempSync(join(tmpdir(), label))
  made.push(dir)
  return dir
}
process.on('exit', () => {
  for (const d of made) rmSync(d, { recursive: true, force: true })
})

// Never the user's real default store: the embedded default lives under XDG_STATE_HOME.
process.env.XDG_STATE_HOME = tempDir('cosid-node-state-')

let memoryStores = 0
/** A configuration object on a fresh in-memory store. */
export function memoryConfig({ namespace = 'test', bits = 3, snowflake } = {}) {
  const cosidSection = {
    namespace,
    machine: { lease: { store: `memory:node-test-${process.pid}-${++memoryStores}`, bits } },
  }
  if (snowflake) cosidSection.snowflake = snowflake
  return { cosid: cosidSection }
}

/** A configuration object on the SQLite file `db`. */
export function sqliteConfig(db, { namespace = 'test', bits = 3, lease = {} } = {}) {
  return { cosid: { namespace, machine: { lease: { store: `sqlite://${db}`, bits, ...lease } } } }
}

/** Asserts that `fn` throws (or the promise rejects) an error of class `type` with `code`. */
export async function expectError(fnOrPromise, type, code, messagePart) {
  let error
  try {
    const r = typeof fnOrPromise === 'function' ? fnOrPromise() : fnOrPromise
    if (r && typeof r.then === 'function') await r
  } catch (e) {
    error = e
  }
  if (!error) throw new Error(`expected ${type.name} ${code}, but nothing was thrown`)
  if (!(error instanceof type) || error.code !== code || (messagePart && !String(error.message).includes(messagePart))) {
    throw new Error(
      `expected ${type.name} with code ${code}${messagePart ? ` mentioning '${messagePart}'` : ''}, got ` +
        `${error.constructor.name} ${error.code}: ${error.message}`,
    )
  }
  return error
}

/** A decimal string of every id, for sets of ids across processes. */
export const ids = (arr) => Array.from(arr, (x) => x.toString())

/** Runs `node args...`; resolves with { code, signal, stdout, stderr }; kills it after `limitMs`. */
export function runNode(args, limitMs = 60_000) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: process.env })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => (stdout += d))
    child.stderr.on('data', (d) => (stderr += d))
    const killer = setTimeout(() => child.kill('SIGKILL'), limitMs)
    child.on('error', reject)
    child.on('exit', (code, signal) => {
      clearTimeout(killer)
      resolve({ code, signal, stdout, stderr })
    })
  })
}
