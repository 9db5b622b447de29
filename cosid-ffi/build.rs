//! Gives libcosid.so its SONAME, so programs linked against it record the ABI they need and the
//! loader refuses an incompatible library instead of calling into it. Before 1.0 every minor
//! version may break the ABI (`libcosid.so.0.1`); from 1.0 on, every major one (`libcosid.so.1`).
//! scripts/install-c installs the matching symbolic links.

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        let major = env!("CARGO_PKG_VERSION_MAJOR");
        let minor = env!("CARGO_PKG_VERSION_MINOR");
        let soname = if major == "0" {
            format!("libcosid.so.0.{minor}")
        } else {
            format!("libcosid.so.{major}")
        };
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
