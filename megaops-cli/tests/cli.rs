//! The `megaops` command as a user runs it: Hugging Face fixtures made by transformers
//! reproduced token for token (on the CPU backend without a GPU), presets, and one-line
//! errors for bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `megaops` with a tune cache of its own (none), so a user's cache cannot change
/// what the tests see.
fn megaops(args: &[&str]) -> Output {
    let no_cache = std::env::temp_dir().join(format!("megaops-cli-no-tune-cache-{}.json", std::process::id()));
    megaops_with_cache(args, &no_cache)
}

fn megaops_with_cache(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_megaops"))
        .args(args)
        .env("MEGAOPS_TUNE_CACHE", cache)
        .output()
        .expect("the megaops binary runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn stdout_json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "megaops failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is one JSON object ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn tokens(v: &serde_json::Value) -> Vec<Vec<u64>> {
    serde_json::from_value(v["tokens"].clone()).expect("a `tokens` list per sequence")
}

/// The transformers fixture: its greedy tokens for a batch of prompts, reproduced (with
/// `extra` arguments to `generate`).
fn check_fixture(name: &str, extra: &[&str]) {
    let dir = fixture(name);
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).expect("reference.json"))
            .expect("JSON");
    let prompts = dir.join("reference.prompts.json");
    std::fs::write(&prompts, reference["prompts"].to_string()).expect("write prompts");
    let new = reference["max_new_tokens"]
        .as_u64()
        .expect("max_new_tokens")
        .to_string();
    let d = dir.to_str().expect("utf-8 path");
    let p = prompts.to_str().expect("utf-8 path");
    let mut args = vec![
        "generate",
        "--model",
        d,
        "--prompt-file",
        p,
        "--max-new-tokens",
        &new,
        "--ignore-eos",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = megaops(&args);
    let _ = std::fs::remove_file(&prompts);
    let got = stdout_json(&out);
    let want: Vec<Vec<u64>> = serde_json::from_value(reference["tokens"].clone()).expect("reference tokens");
    assert_eq!(tokens(&got), want, "{name}: transformers' greedy tokens");
}

#[test]
fn reproduces_the_transformers_qwen3_fixture() {
    check_fixture("tiny-qwen3", &[]);
}

#[test]
fn reproduces_the_transformers_llama_fixture() {
    check_fixture("tiny-llama", &[]);
}

/// `--prefill-site` sets the prefill plan's knobs as `--site` sets the decode step's: the
/// norms' warp-per-row configs in both still give transformers' tokens, and a norm config
/// that does not exist is refused before anything runs.
#[test]
fn generate_takes_prefill_and_decode_site_overrides() {
    check_fixture(
        "tiny-qwen3",
        &["--prefill-site", "norm:config=3", "--site", "norm:config=2"],
    );
    // Checked as the arguments are read (clap's error and hint).
    for flag in ["--prefill-site", "--site"] {
        let out = megaops(&[
            "generate",
            "--preset",
            "tiny",
            "--prompt-ids",
            "1,2,3",
            flag,
            "norm:config=99",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.starts_with("error: invalid value")
                && stderr.contains("the norms' configs are 0 to 4"),
            "{flag}: {stderr}"
        );
    }
}

#[test]
fn generates_with_a_preset_and_says_where_it_runs() {
    let out = megaops(&[
        "generate",
        "--preset",
        "tiny",
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "8",
        "--ignore-eos",
        "--json",
    ]);
    let v = stdout_json(&out);
    let t = tokens(&v);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].len(), 8);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if v["backend"] == "cpu" {
        assert!(
            stderr.contains("CPU backend"),
            "says it runs on the CPU backend: {stderr}"
        );
    }
    // The same request twice gives the same tokens (seeded weights, greedy).
    assert_eq!(
        tokens(&stdout_json(&megaops(&[
            "generate",
            "--preset",
            "tiny",
            "--prompt-ids",
            "1,2,3",
            "--max-new-tokens",
            "8",
            "--ignore-eos",
            "--json"
        ]))),
        t
    );
}

fn fails_with(args: &[&str], needle: &str) {
    let out = megaops(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains(needle),
        "{args:?}: `{stderr}` should end in one error line mentioning `{needle}`"
    );
}

#[test]
fn bad_input_is_one_error_line() {
    let missing = std::env::temp_dir().join("megaops-no-such-model");
    let m = missing.to_str().expect("utf-8");
    fails_with(&["generate", "--model", m, "--prompt-ids", "1"], "config.json");
    fails_with(&["generate", "--preset", "gpt-5", "--prompt-ids", "1"], "gpt-5");
    fails_with(
        &["generate", "--preset", "tiny", "--prompt-ids", "1", "--batch", "17"],
        "batch 17",
    );
    fails_with(
        &[
            "generate",
            "--preset",
            "tiny",
            "--prompt-ids",
            "1",
            "--max-new-tokens",
            "600",
        ],
        "context",
    );
    fails_with(&["generate", "--preset", "tiny", "--prompt", "hello"], "tokenizer");
    fails_with(&["generate", "--preset", "tiny", "--prompt-ids", "9999"], "vocabulary");
    // An unsupported architecture, from a folder with only a config.
    let dir = std::env::temp_dir().join(format!("megaops-cli-gpt2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("config.json"),
        r#"{"architectures":["GPT2LMHeadModel"],"model_type":"gpt2","hidden_size":64,"intermediate_size":256,"num_hidden_layers":2,"num_attention_heads":2,"rms_norm_eps":1e-5,"max_position_embeddings":64,"vocab_size":100}"#,
    )
    .expect("write");
    fails_with(&["info", "--model", dir.to_str().expect("utf-8")], "GPT2LMHeadModel");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn info_reports_sizes() {
    let out = megaops(&["info", "--preset", "qwen3-0.6b", "--json"]);
    let v = stdout_json(&out);
    assert_eq!(v["architecture"], "Qwen3ForCausalLM");
    let bytes = v["weight_bytes"].as_u64().expect("weight_bytes");
    assert!(
        (1_150_000_000..1_250_000_000).contains(&bytes),
        "Qwen3-0.6B has ~0.6 B bf16 parameters: {bytes}"
    );
    assert_eq!(v["kv_bytes_per_token"], 28 * 2 * 2 * 8 * 128);
}

/// `megaops bench` arguments of one short, overlapped tiny-preset decode row at batch 1
/// (4-token prompts, one prefill rep; the caller adds `--new-tokens`).
const TINY_DECODE_ROW: &[&str] = &[
    "--presets",
    "tiny",
    "--workloads",
    "short-decode",
    "--batches",
    "1",
    "--modes",
    "overlapped",
    "--prompt-len",
    "4",
    "--prefill-reps",
    "1",
];

/// Runs `megaops bench` with `args` and `--json` into a file of its own (`tag` names it),
/// checks that it succeeded and returns its output and JSON rows.
fn bench_rows(tag: &str, args: &[&str]) -> (std::process::Output, Vec<serde_json::Value>) {
    let json = std::env::temp_dir().join(format!("megaops-bench-{tag}-{}.jsonl", std::process::id()));
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json.to_str().expect("utf-8")]);
    let out = megaops(&all);
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).expect("the JSON file");
    let _ = std::fs::remove_file(&json);
    let rows = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    (out, rows)
}

#[test]
fn bench_writes_one_json_row_per_run() {
    let (out, rows) = bench_rows(
        "rows",
        &[
            "--presets",
            "tiny",
            "--workloads",
            "short-decode,prefill",
            "--batches",
            "2",
            "--prompt-len",
            "4",
            "--new-tokens",
            "3",
            "--prefill-reps",
            "1",
        ],
    );
    // Decode and prefill in three modes; the graph modes replay a captured prefill.
    let runs: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["workload"].as_str().unwrap_or("?").into(),
                r["mode"].as_str().unwrap_or("?").into(),
            )
        })
        .collect();
    let expected = [
        ("short-decode", "overlapped"),
        ("short-decode", "serial"),
        ("short-decode", "eager"),
        ("prefill", "overlapped"),
        ("prefill", "serial"),
        ("prefill", "eager"),
    ];
    assert_eq!(runs, expected.map(|(w, m)| (w.to_string(), m.to_string())).to_vec());
    for r in &rows {
        assert_eq!(r["model"], "tiny");
        assert_eq!(r["batch"], 2);
        assert_eq!(r["prompt_len"], 4);
        assert!(r["prefill_ms"].as_f64().is_some_and(|t| t > 0.0), "{r}");
        assert_eq!(r["prefill_graph"], r["mode"] != "eager", "{r}");
        assert!(r["tokens_per_s"].as_f64().is_some_and(|t| t > 0.0), "{r}");
        if r["workload"] == "prefill" {
            assert!(r["step_ms"].is_null(), "{r}");
            assert_eq!(r["new_tokens"], 1);
        } else {
            assert_eq!(r["new_tokens"], 3);
            let step = r["step_ms"].as_f64().expect("a step time");
            assert!(step > 0.0 && r["step_gbps"].as_f64().is_some(), "{r}");
            // tokens/s is the batch over the step time.
            let tps = r["tokens_per_s"].as_f64().expect("tokens/s");
            assert!((tps - 2.0 / (step * 1e-3)).abs() < 1e-6 * tps, "{r}");
        }
    }
    for r in &rows {
        assert_eq!(r["norm_fusion"], false, "{r}");
        assert_eq!(r["rope_fusion"], true, "{r}");
        assert!(
            r.get("site_overrides").is_none() && r["one_chunk_on_lane"] == true && r["at_defaults"] == true,
            "{r}"
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| short-decode | 2 | eager |"), "{stdout}");
    assert!(!stdout.contains("norm fusion on"), "{stdout}");
}

/// A row run with `--streams` at the default count still ran the defaults; another count
/// did not.
#[test]
fn bench_rows_at_the_default_stream_count_are_at_the_defaults() {
    for (streams, at_defaults) in [("2", true), ("3", false)] {
        let args = [TINY_DECODE_ROW, &["--new-tokens", "2", "--streams", streams]].concat();
        let (_, rows) = bench_rows(&format!("streams{streams}"), &args);
        assert!(!rows.is_empty());
        assert!(rows.iter().all(|r| r["at_defaults"] == at_defaults), "{rows:?}");
    }
}

/// `--norm-fusion` runs the decode steps' add + RMSNorms inside the projections,
/// `--no-rope-fusion` their QK-norm + RoPE before attention; the rows and the table say so,
/// and the rows name the begin rule and poll spin that `--begin-rule` / `--poll-spin-ns`
/// set.
#[test]
fn bench_can_switch_the_fusions() {
    let switches: &[&str] = &[
        "--new-tokens",
        "3",
        "--norm-fusion",
        "--no-rope-fusion",
        "--begin-rule",
        "wait-kernel",
        "--poll-spin-ns",
        "2000",
        "--site",
        "attn.o:placement=alone",
        "--site",
        "mlp.down:placement=alone,splits=1",
    ];
    let (out, rows) = bench_rows("nf", &[TINY_DECODE_ROW, switches].concat());
    let row = &rows[0];
    assert_eq!(
        row["site_overrides"],
        serde_json::json!(["attn.o:placement=alone", "mlp.down:splits=1,placement=alone"]),
        "{row}"
    );
    assert_eq!(row["norm_fusion"], true, "{row}");
    assert_eq!(row["rope_fusion"], false, "{row}");
    assert_eq!(row["begin_rule"], "wait-kernel", "{row}");
    assert_eq!(row["poll_spin_ns"], 2000, "{row}");
    assert!(row["step_ms"].as_f64().is_some_and(|t| t > 0.0), "{row}");
    assert!(String::from_utf8_lossy(&out.stdout).contains(
        "(norm fusion on, rope fusion off) (sites: attn.o:placement=alone mlp.down:splits=1,placement=alone)"
    ));
}

#[test]
fn bench_refuses_bad_requests_before_running() {
    // The tiny preset's context (512) cannot hold the long decode's 1024 + 1024 tokens.
    fails_with(
        &[
            "bench",
            "--presets",
            "tiny",
            "--workloads",
            "long-decode",
            "--batches",
            "1",
        ],
        "context",
    );
    fails_with(
        &["bench", "--presets", "tiny", "--workloads", "medium"],
        "unknown workload",
    );
    fails_with(&["bench", "--presets", "tiny", "--modes", "fast"], "unknown mode");
    fails_with(
        &["bench", "--presets", "tiny", "--begin-rule", "eventually"],
        "unknown begin rule `eventually`",
    );
    fails_with(
        &["bench", "--presets", "tiny", "--poll-spin-ns", "5000000000"],
        "longer than the 4s a launch can carry",
    );
    fails_with(
        &["bench", "--presets", "tiny", "--batches", "17", "--prompt-len", "4"],
        "batch 17",
    );
    // `--site` values are checked as the arguments are read (clap's error and hint).
    for (site, says) in [
        ("down:placement=alone", "`down` is not a site (sites: norm, attn.qkv,"),
        ("mlp.down:placement=near", "placement is alone or beside"),
    ] {
        let out = megaops(&["bench", "--presets", "tiny", "--site", site]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.starts_with("error: invalid value") && stderr.contains(says),
            "{site}: {stderr}"
        );
    }
    fails_with(
        &[&["bench"], TINY_DECODE_ROW, &["--site", "mlp.down:config=999"]].concat(),
        "GEMV config 999 does not exist",
    );
}

/// `--prefill-gemm auto:<GFLOP>` runs the prefill and its row names the backend as it ran;
/// a list of backends times each prefill row on each, back to back, and the table names
/// them per row, while the decode rows run once, with prefills on the first backend.
#[test]
fn bench_prefills_with_auto_gemms() {
    let (out, rows) = bench_rows(
        "auto",
        &[
            "--presets",
            "tiny",
            "--workloads",
            "prefill",
            "--batches",
            "2",
            "--modes",
            "overlapped",
            "--prompt-len",
            "40",
            "--prefill-reps",
            "1",
            "--prefill-gemm",
            "auto:0.01",
        ],
    );
    let row = &rows[0];
    assert_eq!(row["prefill_gemm"], "auto:0.01", "{row}");
    assert!(row["prefill_ms"].as_f64().is_some_and(|t| t > 0.0), "{row}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("(prefill GEMMs: auto:0.01)"));

    let (out, rows) = bench_rows(
        "gemms",
        &[
            "--presets",
            "tiny",
            "--workloads",
            "short-decode,prefill",
            "--batches",
            "2",
            "--modes",
            "overlapped,serial",
            "--prompt-len",
            "40",
            "--new-tokens",
            "2",
            "--prefill-reps",
            "1",
            "--prefill-gemm",
            "cublaslt:2,auto:0.01",
            "--no-one-chunk-on-lane",
        ],
    );
    assert!(
        rows.iter()
            .all(|r| r["one_chunk_on_lane"] == false && r["at_defaults"] == false),
        "{rows:?}"
    );
    let runs: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {} {}", r["workload"], r["mode"], r["prefill_gemm"]).replace('"', ""))
        .collect();
    assert_eq!(
        runs,
        [
            "short-decode overlapped cublaslt:2",
            "short-decode serial cublaslt:2",
            "prefill overlapped cublaslt:2",
            "prefill overlapped auto:0.01",
            "prefill serial cublaslt:2",
            "prefill serial auto:0.01",
        ]
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("| prefill | 2 | overlapped, auto:0.01 |") && !stdout.contains("(prefill GEMMs:"),
        "{stdout}"
    );
}

/// A `--trace` folder's files: Perfetto JSON with `traceEvents` (tile slices named
/// `site: kernel[config]`), PNGs that start with the PNG signature.
fn check_trace_files(dir: &std::path::Path, stem: &str) {
    let text = std::fs::read_to_string(dir.join(format!("{stem}.json"))).expect("the trace JSON");
    let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    assert!(
        events
            .iter()
            .any(|e| e["cat"] == "tile" && e["name"].as_str().is_some_and(|n| n.starts_with("attn.qkv: gemv[BN="))),
        "{stem}: a tile slice names site, operator and config"
    );
    for png in ["timeline", "breakdown"] {
        let bytes = std::fs::read(dir.join(format!("{stem}-{png}.png"))).expect("the PNG");
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 1000,
            "{stem}-{png}.png"
        );
    }
}

#[test]
fn generate_writes_a_trace_of_the_prefill_and_a_decode_step() {
    let dir = std::env::temp_dir().join(format!("megaops-trace-{}", std::process::id()));
    let out = megaops(&[
        "generate",
        "--preset",
        "tiny",
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "3",
        "--ignore-eos",
        "--trace",
        dir.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("decode step: ") && stdout.contains("exposed µs") && stdout.contains("decode_attention_rope["),
        "the breakdown table is printed: {stdout}"
    );
    assert_eq!(
        stdout
            .matches("checked: every tile once, times in order, consumers after producers")
            .count(),
        2,
        "{stdout}"
    );
    check_trace_files(&dir, "prefill");
    check_trace_files(&dir, "decode");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `megaops bench` of one short tiny-preset decode row, overlapped, traced into `dir`,
/// with `extra` arguments; its stdout (the run must succeed).
fn bench_traced(dir: &Path, extra: &[&str]) -> String {
    let mut args = [&["bench"], TINY_DECODE_ROW, &["--new-tokens", "4", "--trace"]].concat();
    args.push(dir.to_str().expect("utf-8"));
    args.extend_from_slice(extra);
    let out = megaops(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn bench_traces_overlapped_rows_and_reports_the_overhead() {
    let dir = std::env::temp_dir().join(format!("megaops-bench-trace-{}", std::process::id()));
    let stdout = bench_traced(&dir, &[]);
    assert!(
        stdout.contains("tracing overhead, tiny short-decode batch 1: "),
        "{stdout}"
    );
    check_trace_files(&dir, "tiny-short-decode-b1-prefill");
    check_trace_files(&dir, "tiny-short-decode-b1-decode");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_traces_the_launches_of_the_row_with_its_overrides() {
    let dir = std::env::temp_dir().join(format!("megaops-bench-trace-site-{}", std::process::id()));
    let stdout = bench_traced(&dir, &["--site", "attn.qkv:config=2"]);
    // Config 2 of the GEMV (the planner picks config 1 for the tiny preset's QKV): the
    // traced decode step runs the override, as the timed row did (its 4-token prefill
    // runs the planners' GEMV, as the timed row's did).
    let (prefill, decode) = stdout.split_once(": decode step: ").expect("a decode step's breakdown");
    assert!(
        decode.contains("attn.qkv: gemv[BN=32, WK=4, U=4, PF=2, MIN_CTAS=0]"),
        "{stdout}"
    );
    assert!(!decode.contains("attn.qkv: gemv[BN=64"), "{stdout}");
    assert!(
        prefill.contains("attn.qkv: gemv[BN=64, WK=2, U=4, PF=2, MIN_CTAS=0]"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tune_refuses_what_it_cannot_time_with_a_clear_error() {
    for (args, needle) in [
        (
            &["tune", "--preset", "tiny", "--workload", "prefill"][..],
            "longer than the model's context of 512",
        ),
        (
            &["tune", "--preset", "tiny", "--workload", "prefill", "--ablation"][..],
            "the ablation is of decode steps",
        ),
        (
            &["tune", "--preset", "tiny", "--hold", "tile"][..],
            "unknown knob family `tile`",
        ),
        (
            &["tune", "--preset", "tiny", "--prefill-gemm", "cublaslt"][..],
            "--prefill-gemm applies to --workload prefill",
        ),
        (
            &[
                "tune",
                "--preset",
                "tiny",
                "--workload",
                "prefill",
                "--prefill-gemm",
                "cublaslt:65",
            ][..],
            "1 to 64 chunks",
        ),
        (
            &[
                "tune",
                "--preset",
                "tiny",
                "--workload",
                "prefill",
                "--prefill-gemm",
                "auto:much",
            ][..],
            "`auto:<GFLOP>`",
        ),
        (&["tune", "--preset", "tiny", "--json", "rows.jsonl"][..], "--ablation"),
        (
            &["tune", "--preset", "tiny", "--ablation", "--hold", "prefetch"][..],
            "'--ablation' cannot be used with '--hold",
        ),
    ] {
        let out = megaops(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn tune_ablation_times_each_held_family_and_writes_rows_and_a_plot() {
    let dir = std::env::temp_dir().join(format!("megaops-cli-ablation-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let (cache, json, png) = (
        dir.join("tune.json"),
        dir.join("ablation.jsonl"),
        dir.join("ablation.png"),
    );
    let path = |p: &Path| p.to_str().expect("utf-8 path").to_string();
    let out = megaops_with_cache(
        &[
            "tune",
            "--preset",
            "tiny",
            "--layers",
            "1",
            "--budget-s",
            "1",
            "--replays",
            "2",
            "--ablation",
            "--json",
            &path(&json),
            "--plot",
            &path(&png),
        ],
        &cache,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("tiny: graph-level tuning ablation (short-decode, whole model)"),
        "{stdout}"
    );

    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&json)
        .expect("the rows")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON row"))
        .collect();
    let settings: Vec<&str> = rows.iter().map(|r| r["setting"].as_str().expect("setting")).collect();
    assert_eq!(
        settings,
        [
            "full tuning",
            "no graph-level tuning",
            "no prefetch tuning",
            "no padding / split tuning",
            "no release tuning",
            "no stream tuning",
            "no data-tile tuning",
            "no fusion tuning",
        ]
    );
    let full = rows[0]["step_ms"].as_f64().expect("step_ms");
    for r in &rows {
        let step = r["step_ms"].as_f64().expect("step_ms");
        assert!(step.is_finite() && step > 0.0, "{r}");
        let slowdown = r["slowdown_vs_full"].as_f64().expect("slowdown");
        assert!((slowdown - step / full).abs() < 1e-9, "{r}");
        assert_eq!(
            (r["batch"].as_u64(), r["layers_tuned"].as_u64()),
            (Some(1), Some(1)),
            "{r}"
        );
        // The line a user reads for each row.
        assert!(
            stdout.contains(&format!(
                "| 1 | {} | {step:.4} |",
                r["setting"].as_str().expect("setting")
            )),
            "{stdout}"
        );
    }
    let plot = std::fs::read(&png).expect("the plot");
    assert!(plot.starts_with(b"\x89PNG"), "not a PNG");
    // The full plan is cached; the held ones are not.
    let show = megaops(&["tune", "--show", "--cache", &path(&cache)]);
    assert!(
        String::from_utf8_lossy(&show.stdout).contains(": 1 tuned plan\n"),
        "{}",
        String::from_utf8_lossy(&show.stdout)
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tune_caches_a_plan_that_generate_uses_and_a_stale_one_is_ignored() {
    let dir = std::env::temp_dir().join(format!("megaops-cli-tune-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cache = dir.join("tune.json");
    std::fs::remove_file(&cache).ok();
    let c = cache.to_str().expect("utf-8 path");
    let out = megaops_with_cache(
        &[
            "tune",
            "--preset",
            "tiny",
            "--layers",
            "1",
            "--batch",
            "1,2",
            "--budget-s",
            "2",
            "--replays",
            "2",
        ],
        &cache,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tune failed: {stderr}");
    assert!(
        stdout.contains("tiny batch 1:") && stdout.contains("tiny batch 2:"),
        "{stdout}"
    );
    assert!(stderr.contains("cached in"), "{stderr}");
    let show = megaops(&["tune", "--show", "--cache", c]);
    let shown = String::from_utf8_lossy(&show.stdout);
    assert!(show.status.success(), "{}", String::from_utf8_lossy(&show.stderr));
    assert!(
        shown.contains("2 tuned plans") && shown.contains("batch 2, short-decode"),
        "{shown}"
    );

    let generate = [
        "generate",
        "--preset",
        "tiny",
        "--prompt-ids",
        "1,2,3",
        "--max-new-tokens",
        "3",
        "--json",
    ];
    let tuned = megaops_with_cache(&generate, &cache);
    assert!(
        String::from_utf8_lossy(&tuned.stderr).contains("using the tuned plan for batch 1, short-decode"),
        "{}",
        String::from_utf8_lossy(&tuned.stderr)
    );
    // The same tokens as without the cache.
    let plain = megaops(&generate);
    assert_eq!(tokens(&stdout_json(&tuned)), tokens(&stdout_json(&plain)));
    let off = megaops_with_cache(&[&generate[..], &["--no-tune-cache"]].concat(), &cache);
    assert!(!String::from_utf8_lossy(&off.stderr).contains("tuned plan"));

    // A plan tuned by another version is stale: said, and not used.
    let text = std::fs::read_to_string(&cache).expect("cache");
    let version = format!("\"version\": \"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(text.contains(&version), "{text}");
    std::fs::write(&cache, text.replace(&version, "\"version\": \"0.0.0-old\"")).expect("write");
    let stale = megaops_with_cache(&generate, &cache);
    let err = String::from_utf8_lossy(&stale.stderr);
    assert!(
        err.contains("ignoring the tuned plan") && err.contains("0.0.0-old"),
        "{err}"
    );
    assert_eq!(tokens(&stdout_json(&stale)), tokens(&stdout_json(&plain)));

    // A file that is not a cache is one error naming it.
    std::fs::write(&cache, "not json").expect("write");
    let bad = megaops_with_cache(&generate, &cache);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tune.json"));
    std::fs::remove_dir_all(&dir).ok();
}
