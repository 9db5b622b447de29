'use strict'
// Where the native addon for this platform lives. Its platform part is the one
// `napi build --platform` writes, <platform>-<arch>[-<abi>], e.g. linux-x64-gnu:
//   - a development build in this folder: cosid.linux-x64-gnu.node (`npm run build`);
//   - a published install: the package cosid-linux-x64-gnu, one of the main package's
//     optionalDependencies (npm installs only the one whose os/cpu/libc fields match).

// The platforms with a prebuilt package (the folders of npm/).
const PREBUILT = ['linux-x64-gnu', 'linux-x64-musl', 'linux-arm64-gnu', 'linux-arm64-musl']

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

module.exports = {
  PREBUILT,
  platformTriple,
  binaryName: () => `cosid.${platformTriple()}.node`,
  packageName: () => `cosid-${platformTriple()}`,
}
