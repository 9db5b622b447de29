'use strict'
// Development build helper, run by hand in a clone of the cosid repository (it is no npm
// `install` script: the published package installs with no script and no compiler, its addon
// coming from the per-platform package cosid-<platform>). Builds this platform's addon into this
// folder as cosid.<platform>.node, which index.js loads before any per-platform package; does
// nothing when that file exists, unless `node install.js --force` (`npm run build`; further
// arguments go to cargo, e.g. `--features bench-hooks`). Needs the repository around this folder
// (the crate path-depends on cosid-core) and a Rust toolchain.
const { existsSync, copyFileSync, renameSync, mkdtempSync, writeFileSync, rmSync } = require('node:fs')
const { join } = require('node:path')
const { tmpdir } = require('node:os')
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

// One cargo build, in the workspace's target folder (cargo's own, or CARGO_TARGET_DIR), for this
// machine without --target: the dependencies compiled for the command line (`cargo build
// --release`) are the addon's too. `napi build` would pass --target, which puts every
// dependency in target/<triple>/ and compiles them all once more.
//
// In a development checkout (npm ci in this folder) @napi-rs/cli is installed: the build also
// records the #[napi] declarations (NAPI_TYPE_DEF_TMP_FOLDER, a fresh folder, so the addon's
// crate is compiled again and records them all), from which the CLI's own generator writes
// index.d.ts as `napi build` would. A consumer's install has no dev dependencies: no types.
let cli
try {
  cli = require.resolve('@napi-rs/cli', { paths: [__dirname] })
} catch {
  cli = null
}
const extra = process.argv.slice(2).filter((a) => a !== '--force')
const env = { ...process.env }
let typeDefs = null
if (cli) {
  typeDefs = mkdtempSync(join(tmpdir(), 'cosid-napi-types-'))
  env.NAPI_TYPE_DEF_TMP_FOLDER = typeDefs
}
const args = ['build', '--release', '-p', 'cosid-node', '--manifest-path', manifest, ...extra]
console.error(`cosid: building the native addon from source (cargo ${args.join(' ')})...`)
const build = spawnSync(cargo, args, { stdio: 'inherit', env })
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

if (typeDefs) {
  // index.d.ts from the recorded declarations, with the options of package.json's `napi`
  // section, as `napi build --platform --no-js` writes it.
  const napi = require('./package.json').napi || {}
  const { generateTypeDef } = require(cli)
  generateTypeDef({
    typeDefDir: typeDefs,
    cwd: __dirname,
    configDtsHeader: napi.dtsHeader,
    configDtsHeaderFile: napi.dtsHeaderFile,
    constEnum: napi.constEnum,
    runtimeStringEnum: napi.runtimeStringEnum,
    declareBindingTarget: false,
  })
    .then(({ dts }) => {
      if (!dts) fail(`the build recorded no #[napi] declarations in ${typeDefs}; index.d.ts is unchanged`)
      writeFileSync(join(__dirname, 'index.d.ts.tmp'), dts)
      renameSync(join(__dirname, 'index.d.ts.tmp'), join(__dirname, 'index.d.ts'))
      rmSync(typeDefs, { recursive: true, force: true })
      console.error(`cosid: wrote ${join(__dirname, 'index.d.ts')}`)
    })
    .catch((e) => fail(`could not write index.d.ts: ${e && e.stack ? e.stack : e}`))
}
