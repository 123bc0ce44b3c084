//! Finds libflashattn and tells rustc how to link it.
//!
//! Order: `FLASHATTN_LIB_DIR` (a directory holding libflashattn.so), then `pkg-config --libs flashattn`
//! (PKG_CONFIG_PATH is honoured, so a build tree or a private prefix works), then the linker's default search path.
//! pkg-config is run as a command so that the crate has no build dependency.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=FLASHATTN_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG");

    if let Some(dir) = env::var_os("FLASHATTN_LIB_DIR") {
        let dir = Path::new(&dir);
        if !dir.is_dir() {
            panic!("FLASHATTN_LIB_DIR={} is not a directory", dir.display());
        }
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=dylib=flashattn");
        println!("cargo:lib_dir={}", dir.display());
        return;
    }

    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_string());
    match Command::new(&pkg_config).args(["--libs", "flashattn"]).output() {
        Ok(out) if out.status.success() => {
            let libs = String::from_utf8_lossy(&out.stdout).into_owned();
            let mut linked = false;
            // Only the flag forms a .pc file for a shared library uses; anything else is passed to the linker as is.
            for flag in libs.split_whitespace() {
                if let Some(dir) = flag.strip_prefix("-L") {
                    println!("cargo:rustc-link-search=native={}", dir);
                    println!("cargo:lib_dir={}", dir);
                } else if let Some(lib) = flag.strip_prefix("-l") {
                    println!("cargo:rustc-link-lib=dylib={}", lib);
                    linked |= lib == "flashattn";
                } else {
                    println!("cargo:rustc-link-arg={}", flag);
                }
            }
            if !linked {
                panic!("`{} --libs flashattn` printed no -lflashattn: {}", pkg_config, libs.trim());
            }
        }
        Ok(out) => {
            // Installed outside pkg-config's path (or pkg-config has no flashattn.pc): leave it to the linker, which
            // then reports a missing -lflashattn plainly; say here how to point at the library.
            println!(
                "cargo:warning=pkg-config found no flashattn ({}); set FLASHATTN_LIB_DIR or PKG_CONFIG_PATH if the \
                 link fails",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            println!("cargo:rustc-link-lib=dylib=flashattn");
        }
        Err(err) => {
            println!(
                "cargo:warning=could not run {} ({}); set FLASHATTN_LIB_DIR if the link fails",
                pkg_config, err
            );
            println!("cargo:rustc-link-lib=dylib=flashattn");
        }
    }
}
