//! `megaops`: generate with a Qwen3 / Llama-3 model on MegaOps (a Hugging Face folder or a
//! preset with random weights), show a model's sizes, write a preset out as a Hugging
//! Face folder, or benchmark workloads end to end. Runs on the GPU when there is one, else on the CPU backend (and says so).

mod args;
mod bench;
mod run;
mod trace;
mod tune;

use clap::Parser;
use megaops_models::ModelError;

fn main() {
    let cli = args::Cli::parse();
    let json = match &cli.command {
        args::Command::Generate(g) => g.json,
        args::Command::Info(i) => i.json,
        _ => false,
    };
    if let Err(e) = run::run(cli) {
        eprintln!("error: {e}");
        if json {
            println!("{}", error_json(&e));
        }
        std::process::exit(1);
    }
}

/// The error as the JSON report of `--json`: `{"error": message}`, and for a tile-wait
/// timeout or deadlock also `headline`, `waits` and `semaphores` (every live `Tiled`
/// tensor with its semaphores against their targets).
fn error_json(e: &ModelError) -> serde_json::Value {
    let mut v = serde_json::json!({ "error": e.to_string() });
    if let ModelError::Runtime(megaops::Error::Sync(f)) = e {
        v["headline"] = serde_json::json!(f.headline);
        v["waits"] = serde_json::json!(f.waits);
        v["semaphores"] = serde_json::to_value(&f.semaphores).unwrap_or(serde_json::Value::Null);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use megaops::testing::cpu_device;
    use megaops::{DynRows, SyncFailure, Tiled};

    #[test]
    fn a_sync_failure_reports_its_semaphores_in_json() {
        let dev = cpu_device(1).expect("cpu device");
        let mut y = Tiled::<f32, DynRows>::new(&dev, &[12, 8], DynRows(4), "y").expect("tiled");
        y.plant_missing_producer("produce", &[4, 0]);
        let failure = SyncFailure {
            headline: "1 tile wait(s) timed out (limit 5.0s)".into(),
            waits: vec!["row_sums CTA (0) waited 5.0 s on y[0] = 0 of 1 signals".into()],
            semaphores: Some(dev.dump_semaphores().expect("dump")),
        };
        let v = error_json(&ModelError::Runtime(megaops::Error::Sync(failure)));
        assert!(v["error"].as_str().is_some_and(|m| m.contains("timed out")), "{v}");
        assert_eq!(v["waits"][0], "row_sums CTA (0) waited 5.0 s on y[0] = 0 of 1 signals");
        let tensors = v["semaphores"]["tensors"].as_array().expect("the dump's tensors");
        let y = tensors.iter().find(|t| t["name"] == "y").expect("y in the dump");
        assert_eq!(y["shape"], serde_json::json!([12, 8]), "{v}");
        let plain = error_json(&ModelError::Request("no".into()));
        assert_eq!(plain, serde_json::json!({ "error": "no" }));
    }
}
