//! `cfg(homeadam_unoptimized)` for the tests when the crate is built without optimization
//! (`cargo test`'s dev profile): there they run smaller cases, since the optimized profiles run
//! the full ones (`cargo xtask test` runs the `ci` profile: optimized, with debug assertions and
//! overflow checks on, so `debug_assertions` cannot tell the two apart).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(homeadam_unoptimized)");
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("OPT_LEVEL").as_deref() == Ok("0") {
        println!("cargo::rustc-cfg=homeadam_unoptimized");
    }
}
