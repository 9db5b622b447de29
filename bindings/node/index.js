'use strict'
// Loads the native addon built for this platform (by `npm install` from source, or shipped
// prebuilt in the package) and re-exports it. Types: index.d.ts.
const { join } = require('node:path')
const { binaryName } = require('./platform.js')

const file = join(__dirname, binaryName())
let native
try {
  native = require(file)
} catch (e) {
  if (e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(file)) {
    throw new Error(
      `cosid: the native addon ${file} is missing: this package has no build for this platform. ` +
        'Reinstall it where a Rust toolchain (cargo) is on PATH so its install script builds the ' +
        'addon, or build it in the package folder with `node install.js`.',
    )
  }
  throw e
}

// Runtimes still open when this thread's process (or worker thread) exits are closed there,
// synchronously, releasing their slots: on a normal end, process.exit(), or a signal whose
// handler calls process.exit(). Nothing can run on SIGKILL, on a signal without a handler (the
// default SIGTERM and SIGINT actions end the process at once) or on a crash: those slots are
// free again once the lease's ttl runs out.
process.on('exit', () => native._closeAtExit())

// Listed one by one so that `import { Runtime } from 'cosid'` works from ES modules.
module.exports.Runtime = native.Runtime
module.exports.Generator = native.Generator
module.exports.toBase62 = native.toBase62
module.exports.fromBase62 = native.fromBase62
module.exports.noop = native.noop
