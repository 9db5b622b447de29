'use strict'
// Development build helper, run by hand in a clone of the cosid repository (it is no npm
// `install` script: the published package installs with no script and no compiler, its addon
// coming from the per-platform package cosid-<platform>). Builds this platform's addon into this
// folder as cosid.<platform>.node, which index.js loads before any per-platform package; does
// nothing when that file exists, unless `node install.js --force`. Needs the repository around
// this folder (the crate path-depends on cosid-core) and a Rust toolchain.
const { existsSync, copyFileSync, renameSync } = require('node:fs')
const { join, dirname } = require('node:path')
const { spawnSync } = require('node:child_process')
const { binaryName } = require('./platform.js')

const target = join(__dirname, binaryName())
const force = process.argv.includes('--force')

function fail(message) {
  console.error(`cosid: ${message}`)
  process.exit(1)
}

if (existsSync(target) && !force) process.exit(0)

const manifest = join(__dirname, 'Cargo.toml')
const workspace = join(__dirname, '..', '..', 'Cargo.toml')
if (!existsSync(manifest) || !existsSync(workspace) || !existsSync(join(__dirname, '..', '..', 'cosid-core'))) {
  fail(
    `no cosid source tree around ${__dirname} to build ${binaryName()} from; run this in ` +
      'bindings/node of a clone of the cosid repository, with Rust installed',
  )
}

const cargo = process.env.CARGO || 'cargo'
if (spawnSync(cargo, ['--version'], { stdio: 'ignore' }).status !== 0) {
  fail(`building the addon from source needs cargo, and '${cargo}' did not run; install Rust (rustup) and retry`)
}

// In a development checkout (npm ci in this folder) @napi-rs/cli is installed: build with it,
// which also regenerates index.d.ts. A consumer's install has no dev dependencies: plain cargo.
let cliPackage
try {
  cliPackage = require.resolve('@napi-rs/cli/package.json', { paths: [__dirname] })
} catch {
  cliPackage = null
}
if (cliPackage) {
  const bin = join(dirname(cliPackage), require(cliPackage).bin.napi)
  const args = [bin, 'build', '--platform', '--release', '--no-js']
  console.error(`cosid: building the native addon from source (napi ${args.slice(1).join(' ')})...`)
  const build = spawnSync(process.execPath, args, { cwd: __dirname, stdio: 'inherit' })
  if (build.status !== 0) fail(`napi build failed (exit status ${build.status})`)
  if (!existsSync(target)) fail(`napi build wrote no ${target}`)
  process.exit(0)
}

console.error(`cosid: building the native addon from source (cargo build --release -p cosid-node)...`)
const build = spawnSync(cargo, ['build', '--release', '-p', 'cosid-node', '--manifest-path', manifest], {
  stdio: 'inherit',
})
if (build.status !== 0) fail(`cargo build failed (exit status ${build.status})`)

const meta = spawnSync(cargo, ['metadata', '--format-version', '1', '--no-deps', '--manifest-path', manifest], {
  encoding: 'utf8',
  maxBuffer: 64 * 1024 * 1024,
})
if (meta.status !== 0) fail(`cargo metadata failed: ${meta.stderr}`)
const targetDir = JSON.parse(meta.stdout).target_directory
const lib = { linux: 'libcosid_node.so', darwin: 'libcosid_node.dylib', win32: 'cosid_node.dll' }[process.platform]
if (!lib) fail(`unsupported platform ${process.platform}`)
const built = join(targetDir, 'release', lib)
if (!existsSync(built)) fail(`cargo built nothing at ${built}`)
// Copy then rename: a process that has the old addon loaded keeps a valid mapping.
copyFileSync(built, `${target}.tmp`)
renameSync(`${target}.tmp`, target)
console.error(`cosid: built ${target}`)
