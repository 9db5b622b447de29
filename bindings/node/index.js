'use strict'
// Loads the native addon for this platform and re-exports it. Types: index.d.ts.
// A development build in this folder (cosid.<platform>.node, from `npm run build`) comes first;
// otherwise the prebuilt package cosid-<platform>, which npm installs as an optional dependency.
const { existsSync } = require('node:fs')
const { join } = require('node:path')
const { PREBUILT, platformTriple, binaryName, packageName } = require('./platform.js')

function load() {
  const local = join(__dirname, binaryName())
  if (existsSync(local)) return require(local)
  const pkg = packageName()
  try {
    return require(pkg)
  } catch (e) {
    if (!(e && e.code === 'MODULE_NOT_FOUND' && String(e.message).includes(`'${pkg}'`))) throw e
  }
  const platform = platformTriple()
  const why = PREBUILT.includes(platform)
    ? `the package ${pkg} is not installed and the development build ${local} is missing. ` +
      `npm installs ${pkg} with cosid as an optional dependency: reinstall cosid on this machine, ` +
      "without --omit=optional (node_modules copied from another platform holds that platform's package)"
    : `there is no prebuilt package ${pkg} (prebuilt: ${PREBUILT.join(', ')}) and the development ` +
      `build ${local} is missing`
  throw new Error(
    `cosid: no native addon for this platform (${platform}): ${why}. Or build the addon from source ` +
      'with cargo: in bindings/node of a clone of the cosid repository, npm ci && npm run build ' +
      '(needs Rust), then install that folder.',
  )
}
const native = load()

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
module.exports.formatId = native.formatId
module.exports.parseId = native.parseId
