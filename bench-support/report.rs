//! What every skein benchmark prints besides its own figures: the machine
//! it ran on, the load at the time, and rounding for JSON. Shared by the
//! bench binaries of several crates with `#[path]`, so it has no crate of
//! its own.

use serde_json::{Value, json};
use std::process::Command;

/// Cores, CPU model, rustc, OS, architecture and profile, plus `extra`
/// (an object of bench-specific settings).
pub fn machine(extra: Value) -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        });
    let rustc = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .arg("--version")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string());
    let mut machine = json!({
        "nproc": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu_model": cpu,
        "rustc": rustc,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
    });
    if let (Some(fields), Value::Object(extra)) = (machine.as_object_mut(), extra) {
        fields.extend(extra);
    }
    machine
}

/// The 1, 5 and 15 minute load averages, as one string.
#[allow(dead_code, reason = "not every bench reports the load")]
pub fn loadavg() -> Value {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map_or(Value::Null, |text| {
            json!(
                text.split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        })
}

/// `x` to three decimals, for readable JSON.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
