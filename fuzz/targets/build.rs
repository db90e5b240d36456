//! `cfg(homeadam_unoptimized)` when built without optimization, as core/build.rs sets it (whose
//! `rerun-if-changed=build.rs` would name a missing file if shared through `package.build`, and
//! so rebuild this crate on every run): the mutation tests run fewer mutants there.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(homeadam_unoptimized)");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("OPT_LEVEL").as_deref() == Ok("0") {
        println!("cargo::rustc-cfg=homeadam_unoptimized");
    }
}
