'use strict'
// The platform part of the native addon's file name, as `napi build --platform` writes it:
// cosid.<platform>-<arch>[-<abi>].node, e.g. cosid.linux-x64-gnu.node.

function isMusl() {
  if (process.platform !== 'linux') return false
  try {
    const report = process.report && process.report.getReport()
    const header = report && (typeof report === 'string' ? JSON.parse(report) : report).header
    return !(header && header.glibcVersionRuntime)
  } catch {
    return false
  }
}

function platformTriple() {
  const { platform, arch } = process
  if (platform === 'linux') return `linux-${arch}-${isMusl() ? 'musl' : 'gnu'}`
  if (platform === 'win32') return `win32-${arch}-msvc`
  return `${platform}-${arch}`
}

module.exports = { platformTriple, binaryName: () => `cosid.${platformTriple()}.node` }
