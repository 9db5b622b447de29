// A `cosid next --follow` twin written against the Node addon (bindings/node), for the chaos
// harness:
//
//   node nodeworker.js --store URL --namespace NS --owner-key K --ttl 2s --tolerance 500ms --rate 1000
//
// Prints one decimal id a line until SIGTERM or SIGINT, then closes the runtime (the slot is
// released with the last id) and exits 0. Errors the keeper is working on (slot lost, window
// closed, clock behind, timeout) are reported once per code on stderr as `cosid: waiting: …` and
// retried; any other is `cosid: error: …` and exit 1. Every keeper event is printed on stderr as
// `cosid: event: KIND: MESSAGE`.
'use strict'
const fs = require('fs')
const path = require('path')

const args = {}
for (let i = 2; i + 1 < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1]
for (const k of ['store', 'namespace', 'owner-key']) {
  if (!args[k]) {
    process.stderr.write(`cosid: error: --${k} is required\n`)
    process.exit(64)
  }
}
const addon = process.env.COSID_NODE_ADDON || path.join(__dirname, '..', '..', 'bindings', 'node')
const { Runtime } = require(addon)
const TRANSIENT = new Set(['COSID_ERR_SLOT_LOST', 'COSID_ERR_WINDOW_CLOSED', 'COSID_ERR_CLOCK_BEHIND', 'COSID_ERR_TIMEOUT'])

let stop = false
process.on('SIGTERM', () => { stop = true })
process.on('SIGINT', () => { stop = true })

async function main () {
  const ttl = args.ttl || '2s'
  const config = {
    cosid: {
      namespace: args.namespace,
      machine: { lease: { store: args.store, 'owner-key': args['owner-key'], ttl, tolerance: args.tolerance || '500ms', 'acquire-timeout': ttl } }
    }
  }
  let rt
  try {
    rt = await Runtime.create(config)
  } catch (e) {
    process.stderr.write(`cosid: error: ${e.code || ''}: ${e.message}\n`)
    return e.code === 'COSID_ERR_CONFIG' ? 1 : 2 // as cworker.c: 1 names a store this build lacks
  }
  rt.on('*', (e) => process.stderr.write(`cosid: event: ${e.kind}: ${e.message}\n`))
  const rate = Number(args.rate || 1000)
  const start = process.hrtime.bigint()
  let issued = 0
  let lastCode = null
  let code = 0
  const out = []
  const flush = () => { if (out.length) { fs.writeSync(1, out.join('')); out.length = 0 } }
  while (!stop) {
    const elapsed = Number(process.hrtime.bigint() - start) / 1e9
    let due = Math.floor(elapsed * rate) - issued
    if (due <= 0) {
      flush()
      await new Promise((resolve) => setTimeout(resolve, 1))
      continue
    }
    try {
      while (due-- > 0 && !stop) {
        out.push(`${rt.next()}\n`)
        issued++
        lastCode = null
      }
    } catch (e) {
      flush()
      if (TRANSIENT.has(e.code)) {
        if (e.code !== lastCode) process.stderr.write(`cosid: waiting: ${e.code}: ${e.message}\n`)
        lastCode = e.code
        await new Promise((resolve) => setTimeout(resolve, 10))
        continue
      }
      process.stderr.write(`cosid: error: ${e.code || ''}: ${e.message}\n`)
      code = 1
      break
    }
    flush()
    await new Promise((resolve) => setImmediate(resolve))
  }
  flush()
  await rt.close()
  return code
}

main().then((c) => process.exit(c), (e) => {
  process.stderr.write(`cosid: error: ${e && e.stack}\n`)
  process.exit(1)
})
