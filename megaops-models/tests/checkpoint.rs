//! Checkpoint loading, presets, random weights, the Hugging Face writer and the
//! tokenizer, on the CPU with files written to a temporary folder.

use megaops::bf16;
use megaops_kernels::rope::RopeScaling;
use megaops_models::checkpoint::{Checkpoint, WeightSource, tensor_specs};
use megaops_models::presets::{PRESETS, RandomWeights, preset, with_layers, write_hf_folder};
use megaops_models::tokenizer::Tokenizer;
use megaops_models::{Config, ModelError};
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh, empty folder under the system's temporary folder.
fn temp_dir(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "megaops-models-test-{}-{}-{what}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `tensors` (name, dtype, shape, little-endian bytes) as a safetensors file.
fn write_safetensors(path: &Path, tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dtype, shape, data)| (name.clone(), TensorView::new(*dtype, shape.clone(), data).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

fn bf16_bytes(values: &[bf16]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect()
}

/// Every tensor of `weights` for `config` as BF16 safetensors entries.
fn entries(config: &Config, weights: &dyn WeightSource) -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
    tensor_specs(config)
        .into_iter()
        .map(|(name, shape)| {
            let data = bf16_bytes(&weights.get(&name, &shape).unwrap());
            (name, Dtype::BF16, shape, data)
        })
        .collect()
}

/// A checkpoint folder with `config` and the given weight entries.
fn folder(what: &str, config: &Config, tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) -> PathBuf {
    let dir = temp_dir(what);
    std::fs::write(dir.join("config.json"), serde_json::to_string(config).unwrap()).unwrap();
    write_safetensors(&dir.join("model.safetensors"), tensors);
    dir
}

fn tiny() -> Config {
    preset("tiny").unwrap()
}

// ---------------------------------------------------------------- config.json parsing

const QWEN3_0_6B: &str = r#"{
  "architectures": [
    "Qwen3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}"#;

const LLAMA_3_2_1B: &str = r#"{
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}"#;

/// Qwen3-0.6B as transformers 5.x saves it: `dtype`, `rope_parameters` holding
/// `rope_theta`, no top-level `rope_theta`.
const QWEN3_0_6B_V5: &str = r#"{
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "dtype": "bfloat16",
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_types": ["full_attention", "full_attention"],
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
  "sliding_window": null,
  "tie_word_embeddings": true,
  "transformers_version": "5.0.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}"#;

/// Llama-3.1-8B's original file: no `head_dim`, the 3.1 rope scaling.
const LLAMA_3_1_8B: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}"#;

#[test]
fn parses_qwen3_0_6b_config() {
    let c = Config::from_json(QWEN3_0_6B).unwrap();
    assert_eq!(c, preset("qwen3-0.6b").unwrap());
    assert_eq!((c.head_dim(), c.num_kv_heads(), c.group_size()), (128, 8, 2));
    assert_eq!((c.q_dim(), c.kv_dim(), c.qkv_dim()), (2048, 1024, 4096));
    assert_eq!(c.rope_base(), 1e6);
    assert_eq!(c.rope_scaling_kind().unwrap(), RopeScaling::None);
    assert_eq!(c.eos_ids(), vec![151645]);
    assert!(c.tie_word_embeddings);
}

#[test]
fn parses_llama_3_2_1b_config_with_rope_scaling() {
    let c = Config::from_json(LLAMA_3_2_1B).unwrap();
    assert_eq!(c, preset("llama-3.2-1b").unwrap());
    assert_eq!((c.head_dim(), c.group_size()), (64, 4));
    assert_eq!(c.rope_base(), 500_000.0);
    assert_eq!(
        c.rope_scaling_kind().unwrap(),
        RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0
        }
    );
}

#[test]
fn parses_llama_3_1_8b_config_without_head_dim() {
    let c = Config::from_json(LLAMA_3_1_8B).unwrap();
    assert_eq!(c.head_dim(), 128);
    let p = preset("llama-3.1-8b").unwrap();
    assert_eq!(
        (c.weight_bytes(), c.rope_scaling_kind().unwrap()),
        (p.weight_bytes(), p.rope_scaling_kind().unwrap())
    );
}

#[test]
fn parses_transformers_5_config() {
    let c = Config::from_json(QWEN3_0_6B_V5).unwrap();
    assert_eq!(c.rope_base(), 1e6);
    assert_eq!(c.rope_scaling_kind().unwrap(), RopeScaling::None);
    assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
    assert_eq!(c.weight_bytes(), preset("qwen3-0.6b").unwrap().weight_bytes());

    // Llama-3.2 in the 5.x form: the llama3 scaling and the base in `rope_parameters`.
    let mut v: serde_json::Value = serde_json::from_str(LLAMA_3_2_1B).unwrap();
    let o = v.as_object_mut().unwrap();
    let mut rope = o.remove("rope_scaling").unwrap();
    rope["rope_theta"] = o.remove("rope_theta").unwrap();
    o.insert("rope_parameters".into(), rope);
    let dtype = o.remove("torch_dtype").unwrap();
    o.insert("dtype".into(), dtype);
    let c = Config::from_json(&v.to_string()).unwrap();
    assert_eq!(c.rope_base(), 500_000.0);
    assert!(matches!(
        c.rope_scaling_kind().unwrap(),
        RopeScaling::Llama3 { factor: 32.0, .. }
    ));
    assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
}

/// `tiny` as transformers 5.17 saves it (`AutoConfig.from_pretrained` of the folder
/// `write_hf_folder` wrote, then `save_pretrained`).
const TINY_SAVED_BY_TRANSFORMERS_5: &str = r#"{
  "architectures": [
    "Qwen3ForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 128,
  "initializer_range": 0.02,
  "intermediate_size": 256,
  "layer_types": [
    "full_attention",
    "full_attention"
  ],
  "max_position_embeddings": 512,
  "max_window_layers": 2,
  "model_type": "qwen3",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pad_token_id": null,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "rope_theta": 1000000.0,
    "rope_type": "default"
  },
  "sliding_window": null,
  "tie_word_embeddings": true,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 517
}"#;

/// `tiny-llama` as transformers 5.17 saves it (the rope parameters merged into
/// `rope_parameters`).
const TINY_LLAMA_SAVED_BY_TRANSFORMERS_5: &str = r#"{
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "bfloat16",
  "eos_token_id": null,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 192,
  "initializer_range": 0.02,
  "intermediate_size": 384,
  "max_position_embeddings": 512,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 6,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pad_token_id": null,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_parameters": {
    "factor": 8.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 128,
    "rope_theta": 500000.0,
    "rope_type": "llama3"
  },
  "tie_word_embeddings": false,
  "transformers_version": "5.17.0",
  "use_cache": true,
  "vocab_size": 331
}"#;

#[test]
fn parses_configs_saved_by_transformers_5() {
    let c = Config::from_json(TINY_SAVED_BY_TRANSFORMERS_5).unwrap();
    let mut want = tiny();
    (want.rope_theta, want.rope_parameters) = (None, c.rope_parameters.clone());
    assert_eq!(c, want);
    assert_eq!(c.rope_base(), 1e6);
    let c = Config::from_json(TINY_LLAMA_SAVED_BY_TRANSFORMERS_5).unwrap();
    let want = preset("tiny-llama").unwrap();
    assert_eq!(c.rope_scaling_kind().unwrap(), want.rope_scaling_kind().unwrap());
    assert_eq!(c.rope_base(), want.rope_base());
    assert_eq!(tensor_specs(&c), tensor_specs(&want));
    assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
}

#[test]
fn parses_configs_that_spell_a_setting_twice() {
    // `torch_dtype` beside `dtype`, `type` beside `rope_type`: both occur in saved files.
    let mut v: serde_json::Value = serde_json::from_str(LLAMA_3_2_1B).unwrap();
    v["dtype"] = "bfloat16".into();
    v["rope_scaling"]["type"] = "llama3".into();
    let c = Config::from_json(&v.to_string()).unwrap();
    assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
    assert!(matches!(c.rope_scaling_kind().unwrap(), RopeScaling::Llama3 { .. }));
    // A legacy `type` alone still names the scaling.
    let mut v: serde_json::Value = serde_json::from_str(LLAMA_3_2_1B).unwrap();
    let rope = v["rope_scaling"].as_object_mut().unwrap();
    rope.remove("rope_type");
    rope.insert("type".into(), "llama3".into());
    let c = Config::from_json(&v.to_string()).unwrap();
    assert!(matches!(c.rope_scaling_kind().unwrap(), RopeScaling::Llama3 { .. }));
}

/// `QWEN3_0_6B` with `edit` applied, parsed.
fn edited(edit: impl FnOnce(&mut serde_json::Value)) -> Result<Config, ModelError> {
    let mut v: serde_json::Value = serde_json::from_str(QWEN3_0_6B).unwrap();
    edit(&mut v);
    Config::from_json(&v.to_string())
}

fn unsupported(r: Result<Config, ModelError>) -> String {
    match r {
        Err(e @ ModelError::Unsupported(_)) => e.to_string(),
        other => panic!("expected ModelError::Unsupported, got {other:?}"),
    }
}

#[test]
fn rejects_unsupported_architectures() {
    let msg = unsupported(edited(|v| {
        v["architectures"] = serde_json::json!(["MistralForCausalLM"]);
        v["model_type"] = "mistral".into();
    }));
    assert!(msg.contains("MistralForCausalLM") && msg.contains("mistral"), "{msg}");
    // Class and model_type that disagree.
    unsupported(edited(|v| v["model_type"] = "llama".into()));
    unsupported(edited(|v| v["architectures"] = serde_json::json!(["Qwen2ForCausalLM"])));
}

#[test]
fn rejects_unsupported_head_dims_and_groups() {
    let msg = unsupported(edited(|v| v["head_dim"] = 96.into()));
    assert!(msg.contains("head_dim 96"), "{msg}");
    // 32 query heads over 2 kv heads: groups of 16.
    let msg = unsupported(edited(|v| {
        v["num_attention_heads"] = 32.into();
        v["num_key_value_heads"] = 2.into();
    }));
    assert!(msg.contains("32 query heads over 2 kv heads"), "{msg}");
    // 16 query heads over 6 kv heads does not divide.
    let msg = unsupported(edited(|v| v["num_key_value_heads"] = 6.into()));
    assert!(msg.contains("16 query heads over 6 kv heads"), "{msg}");
    // Other unsupported settings.
    unsupported(edited(|v| v["hidden_act"] = "gelu".into()));
    unsupported(edited(|v| v["attention_bias"] = true.into()));
    unsupported(edited(|v| {
        v["rope_scaling"] = serde_json::json!({"rope_type": "yarn", "factor": 4.0})
    }));
    assert!(matches!(
        edited(|v| v["num_hidden_layers"] = 0.into()),
        Err(ModelError::Config(_))
    ));
    assert!(matches!(
        edited(|v| v["rope_scaling"] = serde_json::json!({"rope_type": "llama3", "factor": 8.0})),
        Err(ModelError::Config(m)) if m.contains("low_freq_factor")
    ));
    assert!(matches!(
        edited(|v| {
            v.as_object_mut().unwrap().remove("hidden_size");
        }),
        Err(ModelError::Json { .. })
    ));
}

// ---------------------------------------------------------------- checkpoint errors

#[test]
fn missing_config_is_an_io_error_naming_it() {
    let dir = temp_dir("no-config");
    match Checkpoint::open(&dir) {
        Err(ModelError::Io { path, .. }) => assert_eq!(path, dir.join("config.json")),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn missing_weights_are_an_io_error_naming_them() {
    let dir = temp_dir("no-weights");
    std::fs::write(dir.join("config.json"), QWEN3_0_6B).unwrap();
    let e = Checkpoint::open(&dir).unwrap_err();
    let msg = e.to_string();
    match e {
        ModelError::Io { path, .. } => assert_eq!(path, dir.join("model.safetensors")),
        other => panic!("expected Io, got {other:?}"),
    }
    assert!(msg.contains("model.safetensors.index.json"), "{msg}");
}

#[test]
fn malformed_files_are_errors_naming_them() {
    let dir = temp_dir("malformed");
    std::fs::write(dir.join("config.json"), "{ not json").unwrap();
    assert!(matches!(Checkpoint::open(&dir), Err(ModelError::Json { path, .. }) if path == dir.join("config.json")));

    std::fs::write(dir.join("config.json"), serde_json::to_string(&tiny()).unwrap()).unwrap();
    for bytes in [&b"garbage"[..], &[200, 0, 0, 0, 0, 0, 0, 0, b'{', b'}'][..], &[][..]] {
        std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
        match Checkpoint::open(&dir) {
            Err(e @ ModelError::Safetensors { .. }) => {
                assert!(e.to_string().contains("model.safetensors"), "{e}")
            }
            other => panic!("expected Safetensors, got {other:?}"),
        }
    }
}

#[test]
fn missing_tensor_names_tensor_and_folder() {
    let config = tiny();
    let mut tensors = entries(&config, &RandomWeights::new(config.clone(), 1));
    tensors.retain(|(name, ..)| name != "model.layers.1.self_attn.k_norm.weight");
    let dir = folder("missing-tensor", &config, &tensors);
    let ckpt = Checkpoint::open(&dir).unwrap();
    let e = ckpt.get("model.layers.1.self_attn.k_norm.weight", &[64]).unwrap_err();
    assert!(
        matches!(&e, ModelError::MissingTensor { path, name } if *path == dir && name == "model.layers.1.self_attn.k_norm.weight"),
        "{e:?}"
    );
    assert!(e.to_string().contains(&dir.display().to_string()));
    assert!(matches!(ckpt.check_tensors(), Err(ModelError::MissingTensor { .. })));
    // The untied head of a tied model is not in the file either.
    assert!(matches!(
        ckpt.get("lm_head.weight", &[517, 128]),
        Err(ModelError::MissingTensor { .. })
    ));
}

#[test]
fn misshaped_tensor_names_tensor_expected_and_found() {
    let config = tiny();
    let mut tensors = entries(&config, &RandomWeights::new(config.clone(), 1));
    let bad = tensors
        .iter_mut()
        .find(|t| t.0 == "model.layers.0.mlp.up_proj.weight")
        .unwrap();
    bad.2 = vec![128, 256]; // transposed
    let dir = folder("misshaped", &config, &tensors);
    let ckpt = Checkpoint::open(&dir).unwrap();
    let e = ckpt.get("model.layers.0.mlp.up_proj.weight", &[256, 128]).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(&e, ModelError::TensorShape { name, expected, found }
            if name == "model.layers.0.mlp.up_proj.weight" && *expected == [256, 128] && *found == [128, 256]),
        "{e:?}"
    );
    assert!(
        msg.contains("model.layers.0.mlp.up_proj.weight") && msg.contains("[256, 128]") && msg.contains("[128, 256]"),
        "{msg}"
    );
    assert!(matches!(ckpt.check_tensors(), Err(ModelError::TensorShape { .. })));
}

#[test]
fn unsupported_dtype_is_an_error() {
    let config = tiny();
    let mut tensors = entries(&config, &RandomWeights::new(config.clone(), 1));
    let norm = tensors.iter_mut().find(|t| t.0 == "model.norm.weight").unwrap();
    norm.1 = Dtype::I32;
    norm.3 = vec![0; 4 * 128];
    let dir = folder("i32", &config, &tensors);
    let ckpt = Checkpoint::open(&dir).unwrap();
    let e = ckpt.get("model.norm.weight", &[128]).unwrap_err();
    assert!(
        matches!(&e, ModelError::TensorDtype { name, dtype } if name == "model.norm.weight" && dtype == "I32"),
        "{e:?}"
    );
    assert!(matches!(ckpt.check_tensors(), Err(ModelError::TensorDtype { .. })));
    assert_eq!(ckpt.tensor_dtype("model.norm.weight").as_deref(), Some("I32"));
}

// ---------------------------------------------------------------- conversion, shards

#[test]
fn f16_and_f32_convert_to_nearest_bf16_ties_to_even() {
    let config = tiny();
    let mut tensors = entries(&config, &RandomWeights::new(config.clone(), 1));
    let ulp = 2f32.powi(-7); // bf16 spacing in [1, 2)
    let f32s: Vec<f32> = vec![
        1.0,
        1.0 + ulp / 2.0,       // tie, 1.0 is even: down
        1.0 + 3.0 * ulp / 2.0, // tie, 1 + 2 ulp is even: up
        1.0 + ulp / 2.0 + 1e-6,
        -2.5,
        f32::INFINITY,
        1e-40,
        65504.0,
    ];
    let f32_expected = [
        1.0,
        1.0,
        1.0 + 2.0 * ulp,
        1.0 + ulp,
        -2.5,
        f32::INFINITY,
        1e-40,
        65536.0,
    ];
    let mut norm_f32: Vec<f32> = (0..128).map(|i| i as f32 * 0.013).collect();
    norm_f32[..f32s.len()].copy_from_slice(&f32s);
    let f16s: Vec<half::f16> = (0..128).map(|i| half::f16::from_f32(1.0 + i as f32 / 1024.0)).collect();
    for (name, dtype, data) in [
        (
            "model.norm.weight",
            Dtype::F32,
            norm_f32.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
        ),
        (
            "model.layers.0.input_layernorm.weight",
            Dtype::F16,
            f16s.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
    ] {
        let t = tensors.iter_mut().find(|t| t.0 == name).unwrap();
        (t.1, t.3) = (dtype, data);
    }
    let dir = folder("convert", &config, &tensors);
    let ckpt = Checkpoint::open(&dir).unwrap();
    ckpt.check_tensors().unwrap();
    let got = ckpt.get("model.norm.weight", &[128]).unwrap();
    for (i, want) in f32_expected.iter().enumerate() {
        assert_eq!(
            got[i].to_bits(),
            bf16::from_f32(*want).to_bits(),
            "element {i}: {} → {}",
            f32s[i],
            got[i]
        );
    }
    for (g, x) in got.iter().zip(&norm_f32).skip(f32s.len()) {
        assert_eq!(*g, bf16::from_f32(*x));
    }
    // f16 1 + i/1024: 10 mantissa bits onto 7, ties (i ≡ 4 mod 8) to even.
    let got = ckpt.get("model.layers.0.input_layernorm.weight", &[128]).unwrap();
    for (i, g) in got.iter().enumerate() {
        let (q, r) = (i / 8, i % 8);
        let rounded = match r {
            0..4 => q,
            4 => q + (q & 1),
            _ => q + 1,
        };
        assert_eq!(g.to_f32(), 1.0 + rounded as f32 / 128.0, "f16 element {i}");
    }
    // F32 and F16 are counted as stored.
    let bytes: u64 = tensors.iter().map(|t| t.3.len() as u64).sum();
    assert_eq!(ckpt.total_bytes(), bytes);
}

#[test]
fn loads_a_sharded_checkpoint() {
    let config = preset("tiny-llama").unwrap();
    let weights = RandomWeights::new(config.clone(), 7);
    let all = entries(&config, &weights);
    let (first, second) = all.split_at(all.len() / 2);
    let dir = temp_dir("sharded");
    std::fs::write(dir.join("config.json"), serde_json::to_string(&config).unwrap()).unwrap();
    let names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    write_safetensors(&dir.join(names[0]), first);
    write_safetensors(&dir.join(names[1]), second);
    let weight_map: serde_json::Map<String, serde_json::Value> = first
        .iter()
        .map(|t| (t.0.clone(), names[0].into()))
        .chain(second.iter().map(|t| (t.0.clone(), names[1].into())))
        .collect();
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();

    let ckpt = Checkpoint::open(&dir).unwrap();
    ckpt.check_tensors().unwrap();
    assert_eq!(ckpt.config(), &config);
    assert_eq!(ckpt.dir(), dir.as_path());
    let mut expected: Vec<String> = all.iter().map(|t| t.0.clone()).collect();
    expected.sort();
    assert_eq!(ckpt.tensor_names(), expected);
    assert!(expected.contains(&"lm_head.weight".to_string()));
    assert_eq!(ckpt.total_bytes(), config.weight_bytes() as u64);
    for (name, shape) in tensor_specs(&config) {
        assert_eq!(
            ckpt.get(&name, &shape).unwrap(),
            weights.get(&name, &shape).unwrap(),
            "{name}"
        );
    }

    // An index naming a tensor its shard lacks.
    let mut index = index;
    index["weight_map"]["model.extra.weight"] = names[1].into();
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let e = Checkpoint::open(&dir).unwrap_err();
    assert!(
        matches!(&e, ModelError::Safetensors { reason, .. } if reason.contains("model.extra.weight")),
        "{e:?}"
    );
    // A missing shard.
    index["weight_map"]["model.extra.weight"] = "model-00003-of-00002.safetensors".into();
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    assert!(
        matches!(Checkpoint::open(&dir), Err(ModelError::Io { path, .. }) if path.ends_with("model-00003-of-00002.safetensors"))
    );
    // A shard outside the folder.
    index["weight_map"]["model.extra.weight"] = "../elsewhere.safetensors".into();
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    assert!(matches!(Checkpoint::open(&dir), Err(ModelError::Safetensors { .. })));
}

// ---------------------------------------------------------------- writer round trip

#[test]
fn hf_folder_round_trips_random_weights() {
    for name in ["tiny", "tiny-llama"] {
        let config = preset(name).unwrap();
        let weights = RandomWeights::new(config.clone(), 42);
        let dir = temp_dir(name);
        write_hf_folder(&config, &weights, &dir).unwrap();
        let ckpt = Checkpoint::open(&dir).unwrap();
        assert_eq!(ckpt.config(), &config, "{name}");
        ckpt.check_tensors().unwrap();
        let specs = tensor_specs(&config);
        let mut names: Vec<String> = specs.iter().map(|s| s.0.clone()).collect();
        names.sort();
        assert_eq!(ckpt.tensor_names(), names);
        assert_eq!(
            names.contains(&"lm_head.weight".to_string()),
            !config.tie_word_embeddings
        );
        assert_eq!(ckpt.total_bytes(), config.weight_bytes() as u64);
        for (t, shape) in &specs {
            assert_eq!(
                ckpt.get(t, shape).unwrap(),
                weights.get(t, shape).unwrap(),
                "{name}: {t}"
            );
        }
        // What transformers reads.
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        assert_eq!(json["torch_dtype"], "bfloat16");
        assert_eq!(json["architectures"][0], config.architectures[0].as_str());
        assert_eq!(json["head_dim"], 64);
        assert_eq!(json["num_key_value_heads"], 2);
        assert!(json["rope_theta"].is_number());
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(
            metadata
                .metadata()
                .as_ref()
                .and_then(|m| m.get("format"))
                .map(String::as_str),
            Some("pt")
        );
    }
}

/// A source that fails on one tensor.
struct Failing(RandomWeights);

impl WeightSource for Failing {
    fn get(&self, name: &str, shape: &[usize]) -> megaops_models::Result<Vec<bf16>> {
        if name == "model.layers.1.mlp.up_proj.weight" {
            return Err(ModelError::Request("injected".into()));
        }
        self.0.get(name, shape)
    }
}

#[test]
fn writer_reports_a_failing_source_and_leaves_no_weights() {
    let config = tiny();
    let dir = temp_dir("failing");
    let e = write_hf_folder(&config, &Failing(RandomWeights::new(config.clone(), 1)), &dir).unwrap_err();
    assert!(matches!(&e, ModelError::Request(m) if m == "injected"), "{e:?}");
    assert!(!dir.join("model.safetensors").exists());
}

// ---------------------------------------------------------------- presets, random weights

#[test]
fn presets_validate_with_the_released_parameter_counts() {
    let params = |name: &str| preset(name).unwrap().weight_bytes() / 2;
    let expected = [
        ("qwen3-0.6b", 596_049_920),
        ("qwen3-1.7b", 1_720_574_976),
        ("qwen3-4b", 4_022_468_096),
        ("qwen3-8b", 8_190_735_360),
        ("llama-3.2-1b", 1_235_814_400),
        ("llama-3.2-3b", 3_212_749_824),
        ("llama-3.1-8b", 8_030_261_248),
        (
            "tiny",
            517 * 128 + 128 + 2 * (2 * 128 + 128 * 512 + 256 * 128 + 3 * 128 * 256 + 2 * 64),
        ),
        (
            "tiny-llama",
            2 * 331 * 192 + 192 + 2 * (2 * 192 + 192 * 640 + 384 * 192 + 3 * 192 * 384),
        ),
    ];
    assert_eq!(expected.len(), PRESETS.len());
    for (name, n) in expected {
        assert!(PRESETS.contains(&name));
        assert_eq!(params(name), n, "{name}");
        let c = preset(name).unwrap();
        c.validate().unwrap();
        let total: usize = tensor_specs(&c).iter().map(|(_, s)| s.iter().product::<usize>()).sum();
        assert_eq!(total, n, "{name}: tensor_specs and Config::weight_bytes disagree");
        assert_eq!(c.torch_dtype.as_deref(), Some("bfloat16"));
    }
    // Spot checks of the released files' values.
    let q = preset("qwen3-8b").unwrap();
    assert_eq!(
        (
            q.tie_word_embeddings,
            q.head_dim(),
            q.vocab_size,
            q.max_position_embeddings
        ),
        (false, 128, 151_936, 40_960)
    );
    assert_eq!(
        (q.rope_base(), q.rms_norm_eps, q.bos_token_id, q.eos_ids()),
        (1e6, 1e-6, Some(151_643), vec![151_645])
    );
    for (name, factor, tied) in [
        ("llama-3.2-1b", 32.0, true),
        ("llama-3.2-3b", 32.0, true),
        ("llama-3.1-8b", 8.0, false),
    ] {
        let l = preset(name).unwrap();
        assert!(
            matches!(l.rope_scaling_kind().unwrap(), RopeScaling::Llama3 { factor: f, .. } if f == factor),
            "{name}"
        );
        assert_eq!(
            (l.tie_word_embeddings, l.rope_base(), l.rms_norm_eps),
            (tied, 500_000.0, 1e-5),
            "{name}"
        );
        assert_eq!(
            (l.vocab_size, l.max_position_embeddings, l.bos_token_id, l.eos_ids()),
            (128_256, 131_072, Some(128_000), vec![128_001])
        );
    }
    for name in ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b"] {
        assert!(preset(name).unwrap().tie_word_embeddings, "{name}");
    }
    let t = preset("tiny-llama").unwrap();
    assert_eq!((t.group_size(), t.q_dim(), t.tie_word_embeddings), (3, 384, false));
    assert_eq!(preset("TINY").unwrap(), tiny());
}

#[test]
fn unknown_preset_lists_the_presets() {
    let msg = preset("qwen3-32b").unwrap_err().to_string();
    assert!(msg.contains("qwen3-32b"), "{msg}");
    for name in PRESETS {
        assert!(msg.contains(name), "{msg}");
    }
}

#[test]
fn with_layers_overrides_the_layer_count() {
    let c = with_layers(preset("qwen3-8b").unwrap(), 2).unwrap();
    assert_eq!(c.num_hidden_layers, 2);
    c.validate().unwrap();
    assert!(tensor_specs(&c).iter().all(|(n, _)| !n.starts_with("model.layers.2.")));
    assert!(matches!(with_layers(tiny(), 0), Err(ModelError::Config(_))));
}

#[test]
fn tensor_specs_list_the_checkpoint_keys_in_order() {
    let specs = tensor_specs(&tiny());
    let layer0: Vec<(&str, Vec<usize>)> = specs[1..12].iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
    assert_eq!(specs[0], ("model.embed_tokens.weight".to_string(), vec![517, 128]));
    assert_eq!(
        layer0,
        vec![
            ("model.layers.0.input_layernorm.weight", vec![128]),
            ("model.layers.0.self_attn.q_proj.weight", vec![256, 128]),
            ("model.layers.0.self_attn.k_proj.weight", vec![128, 128]),
            ("model.layers.0.self_attn.v_proj.weight", vec![128, 128]),
            ("model.layers.0.self_attn.o_proj.weight", vec![128, 256]),
            ("model.layers.0.self_attn.q_norm.weight", vec![64]),
            ("model.layers.0.self_attn.k_norm.weight", vec![64]),
            ("model.layers.0.post_attention_layernorm.weight", vec![128]),
            ("model.layers.0.mlp.gate_proj.weight", vec![256, 128]),
            ("model.layers.0.mlp.up_proj.weight", vec![256, 128]),
            ("model.layers.0.mlp.down_proj.weight", vec![128, 256]),
        ]
    );
    assert_eq!(specs.len(), 1 + 2 * 11 + 1);
    assert_eq!(specs.last().unwrap().0, "model.norm.weight");
    // Llama: no q/k norms, an untied head last.
    let llama = tensor_specs(&preset("tiny-llama").unwrap());
    assert_eq!(llama.len(), 1 + 2 * 9 + 2);
    assert!(
        llama
            .iter()
            .all(|(n, _)| !n.contains("q_norm") && !n.contains("k_norm"))
    );
    assert_eq!(llama.last().unwrap(), &("lm_head.weight".to_string(), vec![331, 192]));
}

#[test]
fn random_weights_are_deterministic_and_scaled() {
    let config = tiny();
    let a = RandomWeights::new(config.clone(), 5);
    let b = RandomWeights::new(config.clone(), 5);
    let c = RandomWeights::new(config.clone(), 6);
    let q = "model.layers.0.self_attn.q_proj.weight";
    let k = "model.layers.1.self_attn.q_proj.weight";
    assert_eq!(a.get(q, &[256, 128]).unwrap(), b.get(q, &[256, 128]).unwrap());
    assert_ne!(a.get(q, &[256, 128]).unwrap(), c.get(q, &[256, 128]).unwrap());
    assert_ne!(a.get(q, &[256, 128]).unwrap(), a.get(k, &[256, 128]).unwrap());
    assert_eq!((a.seed(), a.config()), (5, &config));

    for (name, shape) in tensor_specs(&config) {
        let w: Vec<f64> = a.get(&name, &shape).unwrap().iter().map(|v| v.to_f64()).collect();
        let mean = w.iter().sum::<f64>() / w.len() as f64;
        let var = w.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / w.len() as f64;
        if shape.len() == 1 {
            assert!(w.iter().all(|x| (0.5..1.5).contains(x)), "{name}");
            assert!((mean - 1.0).abs() < 0.1 && var > 0.05, "{name}: mean {mean}, var {var}");
        } else {
            let gain = if name.contains("o_proj") || name.contains("down_proj") {
                4.0
            } else {
                1.0
            };
            let want = gain / shape[1] as f64;
            assert!((var / want - 1.0).abs() < 0.1, "{name}: variance {var}, want {want}");
            assert!(mean.abs() < 0.1 * want.sqrt(), "{name}: mean {mean}");
        }
    }

    // Only the config's tensors, with their shapes.
    assert!(
        matches!(a.get("lm_head.weight", &[517, 128]), Err(ModelError::MissingTensor { name, .. }) if name == "lm_head.weight")
    );
    assert!(matches!(
        a.get("model.layers.2.mlp.up_proj.weight", &[256, 128]),
        Err(ModelError::MissingTensor { .. })
    ));
    assert!(matches!(
        a.get("model.norm.weight", &[64]),
        Err(ModelError::TensorShape { expected, found, .. }) if expected == [64] && found == [128]
    ));
}

/// Logits of the random `tiny` models straight from the embedding (final norm, LM head):
/// of order 1 and with many different argmaxes.
#[test]
fn random_weights_give_logits_of_order_one() {
    for name in ["tiny", "tiny-llama"] {
        let config = preset(name).unwrap();
        let w = RandomWeights::new(config.clone(), 3);
        let (v, h) = (config.vocab_size, config.hidden_size);
        let f = |t: &str, s: &[usize]| -> Vec<f64> { w.get(t, s).unwrap().iter().map(|x| x.to_f64()).collect() };
        let embed = f("model.embed_tokens.weight", &[v, h]);
        let head = if config.tie_word_embeddings {
            embed.clone()
        } else {
            f("lm_head.weight", &[v, h])
        };
        let norm = f("model.norm.weight", &[h]);
        let mut argmaxes = std::collections::BTreeSet::new();
        let mut sum_sq = 0.0;
        let mut max_abs: f64 = 0.0;
        let tokens = 64;
        for t in 0..tokens {
            let x = &embed[t * h..(t + 1) * h];
            let rms = (x.iter().map(|a| a * a).sum::<f64>() / h as f64 + config.rms_norm_eps).sqrt();
            let y: Vec<f64> = x.iter().zip(&norm).map(|(a, g)| a / rms * g).collect();
            let logits: Vec<f64> = (0..v)
                .map(|r| head[r * h..(r + 1) * h].iter().zip(&y).map(|(a, b)| a * b).sum())
                .collect();
            sum_sq += logits.iter().map(|l| l * l).sum::<f64>();
            max_abs = logits.iter().fold(max_abs, |m, l| m.max(l.abs()));
            let best = (0..v).max_by(|&i, &j| logits[i].total_cmp(&logits[j])).unwrap();
            argmaxes.insert(best);
        }
        let std = (sum_sq / (tokens * v) as f64).sqrt();
        assert!((0.7..3.0).contains(&std), "{name}: logit std {std}");
        assert!(max_abs < 60.0, "{name}: largest logit {max_abs}");
        assert!(
            argmaxes.len() > tokens / 2,
            "{name}: {} distinct argmaxes of {tokens}",
            argmaxes.len()
        );
    }
}

// ---------------------------------------------------------------- tokenizer

/// A byte-level BPE `tokenizer.json` in the form of Qwen3's and Llama-3's: the Llama-3
/// split regex (with a look-ahead, so the pure-Rust regex engine is exercised), byte-level
/// alphabet, a few merges, and one special added token.
fn byte_level_bpe_json() -> String {
    // GPT-2's byte → char table.
    let mut printable: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut chars: Vec<u32> = printable.clone();
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            printable.push(b);
            chars.push(256 + extra);
            extra += 1;
        }
    }
    let mut vocab = serde_json::Map::new();
    for c in &chars {
        let id = vocab.len();
        vocab.insert(char::from_u32(*c).unwrap().to_string(), id.into());
    }
    let merges = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"];
    for m in merges {
        let id = vocab.len();
        vocab.insert(m.replace(' ', ""), id.into());
    }
    let special = vocab.len();
    let pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{"id": special, "content": "<|end|>", "single_word": false, "lstrip": false,
                          "rstrip": false, "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
        ]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    })
    .to_string()
}

#[test]
fn tokenizer_round_trips_byte_level_bpe() {
    let dir = temp_dir("tokenizer");
    assert!(Tokenizer::from_dir(&dir).unwrap().is_none());
    std::fs::write(dir.join("tokenizer.json"), byte_level_bpe_json()).unwrap();
    let tok = Tokenizer::from_dir(&dir).unwrap().unwrap();
    assert_eq!(tok.path(), dir.join("tokenizer.json"));
    assert_eq!(tok.vocab_size(), 256 + 9 + 1);
    let hello = tok.token_to_id("hello").unwrap();
    let world = tok.token_to_id("Ġworld").unwrap();
    let end = tok.token_to_id("<|end|>").unwrap();
    assert_eq!(tok.encode("hello world").unwrap(), vec![hello, world]);
    assert_eq!(tok.encode("hello<|end|>").unwrap(), vec![hello, end]);
    for text in [
        "hello world",
        "Héllo,  wörld!\n\n  12345 naïve 日本語 🙂",
        "",
        "   trailing   ",
    ] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
    assert_eq!(tok.decode(&[hello, end]).unwrap(), "hello<|end|>");
    // Ids past the vocabulary (an embedding's padding rows) are skipped.
    assert_eq!(tok.decode(&[hello, 100_000]).unwrap(), "hello");
}

#[test]
fn tokenizer_reads_a_word_level_model() {
    let dir = temp_dir("wordlevel");
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3}, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.join("tokenizer.json"), json.to_string()).unwrap();
    let tok = Tokenizer::from_dir(&dir).unwrap().unwrap();
    assert_eq!(tok.encode("The cat sat on the mat").unwrap(), vec![1, 2, 3, 0, 1, 0]);
    assert_eq!(tok.encode_with("the cat", false).unwrap(), vec![1, 2]);
    assert_eq!(tok.decode(&[1, 2, 3]).unwrap(), "the cat sat");
}

#[test]
fn malformed_tokenizer_is_an_error_naming_the_file() {
    let dir = temp_dir("bad-tokenizer");
    std::fs::write(dir.join("tokenizer.json"), r#"{"model": {"type": "Nope"}}"#).unwrap();
    match Tokenizer::from_dir(&dir) {
        Err(e @ ModelError::Tokenizer(_)) => assert!(e.to_string().contains("tokenizer.json"), "{e}"),
        other => panic!("expected Tokenizer, got {other:?}"),
    }
    assert!(matches!(
        Tokenizer::from_file(&dir.join("missing.json")),
        Err(ModelError::Io { path, .. }) if path.ends_with("missing.json")
    ));
}

#[test]
fn checkpoint_helpers() {
    // A config.json from `Config`'s own serializer loads too (the test folders above).
    let c = tiny();
    let back = Config::from_json(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    let map: HashMap<_, _> = tensor_specs(&c).into_iter().collect();
    assert_eq!(map.len(), tensor_specs(&c).len(), "tensor names are unique");
}

/// A real checkpoint folder, named by `MEGAOPS_CHECKPOINT`, opens, has every tensor its
/// config implies, and every tensor reads (`MEGAOPS_CHECKPOINT=dir cargo test -p
/// megaops-models --test checkpoint -- --ignored`).
#[test]
#[ignore = "needs MEGAOPS_CHECKPOINT=<a Hugging Face model folder>"]
fn opens_the_checkpoint_named_by_megaops_checkpoint() {
    let Some(dir) = std::env::var_os("MEGAOPS_CHECKPOINT") else {
        panic!("set MEGAOPS_CHECKPOINT to a Hugging Face model folder");
    };
    let ckpt = Checkpoint::open(Path::new(&dir)).unwrap();
    ckpt.check_tensors().unwrap();
    let specs = tensor_specs(ckpt.config());
    for (name, shape) in &specs {
        let w = ckpt.get(name, shape).unwrap();
        assert!(w.iter().all(|v| v.is_finite()), "{name} has a non-finite value");
    }
    eprintln!(
        "{}: {} tensors ({} used), {} bytes",
        ckpt.dir().display(),
        ckpt.tensor_names().len(),
        specs.len(),
        ckpt.total_bytes()
    );
}

/// A plain f64 forward pass of a Qwen3 / Llama model (the transformers definition: RMSNorm,
/// q/k norms per head for Qwen3, rotate-half RoPE, causal GQA attention, SwiGLU MLP), used
/// to check what random weights make a model do. Returns the last position's logits.
fn reference_logits(config: &Config, w: &dyn WeightSource, tokens: &[u32]) -> Vec<f64> {
    let get =
        |name: &str, shape: &[usize]| -> Vec<f64> { w.get(name, shape).unwrap().iter().map(|x| x.to_f64()).collect() };
    let (h, i, v, d) = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.head_dim(),
    );
    let (hq, hkv, eps) = (config.num_attention_heads, config.num_kv_heads(), config.rms_norm_eps);
    let qwen3 = config.architecture().unwrap() == megaops_models::Architecture::Qwen3;
    let inv_freq =
        megaops_kernels::rope::RopeTable::inv_freq(d, config.rope_base(), config.rope_scaling_kind().unwrap());
    let norm = |x: &[f64], g: &[f64]| -> Vec<f64> {
        let rms = (x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64 + eps).sqrt();
        x.iter().zip(g).map(|(a, g)| a / rms * g).collect()
    };
    // y = W x for W [rows, cols].
    let matvec = |m: &[f64], x: &[f64]| -> Vec<f64> {
        m.chunks_exact(x.len())
            .map(|r| r.iter().zip(x).map(|(a, b)| a * b).sum())
            .collect()
    };
    let rope = |x: &mut [f64], pos: usize| {
        for j in 0..d / 2 {
            let (s, c) = (pos as f64 * inv_freq[j]).sin_cos();
            let (a, b) = (x[j], x[j + d / 2]);
            (x[j], x[j + d / 2]) = (a * c - b * s, b * c + a * s);
        }
    };
    let embed = get("model.embed_tokens.weight", &[v, h]);
    let mut xs: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| embed[t as usize * h..(t as usize + 1) * h].to_vec())
        .collect();
    for l in 0..config.num_hidden_layers {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        let (wq, wk, wv) = (
            get(&p("self_attn.q_proj.weight"), &[hq * d, h]),
            get(&p("self_attn.k_proj.weight"), &[hkv * d, h]),
            get(&p("self_attn.v_proj.weight"), &[hkv * d, h]),
        );
        let wo = get(&p("self_attn.o_proj.weight"), &[h, hq * d]);
        let (qn, kn) = if qwen3 {
            (
                get(&p("self_attn.q_norm.weight"), &[d]),
                get(&p("self_attn.k_norm.weight"), &[d]),
            )
        } else {
            (vec![], vec![])
        };
        let g1 = get(&p("input_layernorm.weight"), &[h]);
        let g2 = get(&p("post_attention_layernorm.weight"), &[h]);
        let (wg, wu, wd) = (
            get(&p("mlp.gate_proj.weight"), &[i, h]),
            get(&p("mlp.up_proj.weight"), &[i, h]),
            get(&p("mlp.down_proj.weight"), &[h, i]),
        );
        let mut qs = vec![];
        let mut ks = vec![];
        let mut vs = vec![];
        for (pos, x) in xs.iter().enumerate() {
            let y = norm(x, &g1);
            let (mut q, mut k) = (matvec(&wq, &y), matvec(&wk, &y));
            for (heads, t, g) in [(hq, &mut q, &qn), (hkv, &mut k, &kn)] {
                for head in t.chunks_exact_mut(d).take(heads) {
                    if qwen3 {
                        let normed = norm(head, g);
                        head.copy_from_slice(&normed);
                    }
                    rope(head, pos);
                }
            }
            qs.push(q);
            ks.push(k);
            vs.push(matvec(&wv, &y));
        }
        for pos in 0..xs.len() {
            let mut attn = vec![0.0; hq * d];
            for head in 0..hq {
                let kvh = head / (hq / hkv);
                let q = &qs[pos][head * d..(head + 1) * d];
                let scores: Vec<f64> = (0..=pos)
                    .map(|t| {
                        q.iter()
                            .zip(&ks[t][kvh * d..(kvh + 1) * d])
                            .map(|(a, b)| a * b)
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for (t, p) in e.iter().enumerate() {
                    for j in 0..d {
                        attn[head * d + j] += p / z * vs[t][kvh * d + j];
                    }
                }
            }
            let o = matvec(&wo, &attn);
            let x = &mut xs[pos];
            x.iter_mut().zip(&o).for_each(|(a, b)| *a += b);
            let y = norm(x, &g2);
            let (g, u) = (matvec(&wg, &y), matvec(&wu, &y));
            let act: Vec<f64> = g.iter().zip(&u).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect();
            let down = matvec(&wd, &act);
            x.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
        }
    }
    let last = norm(xs.last().unwrap(), &get("model.norm.weight", &[h]));
    let head = if config.tie_word_embeddings {
        embed
    } else {
        get("lm_head.weight", &[v, h])
    };
    matvec(&head, &last)
}

/// Greedy decoding of the random tiny models (through the f64 reference above) gives
/// varied tokens with logits of order 1, not one token repeated.
#[test]
fn random_tiny_models_decode_varied_greedy_tokens() {
    for name in ["tiny", "tiny-llama"] {
        let config = preset(name).unwrap();
        let w = RandomWeights::new(config.clone(), 0);
        let mut tokens = vec![1, 2, 3];
        let mut spread = vec![];
        for _ in 0..12 {
            let logits = reference_logits(&config, &w, &tokens);
            let mean = logits.iter().sum::<f64>() / logits.len() as f64;
            spread.push((logits.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / logits.len() as f64).sqrt());
            let best = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
                .unwrap();
            tokens.push(best as u32);
        }
        let generated: std::collections::BTreeSet<u32> = tokens[3..].iter().copied().collect();
        eprintln!("{name}: greedy tokens {:?}, logit std {spread:.2?}", &tokens[3..]);
        assert!(generated.len() >= 4, "{name}: greedy tokens {:?}", &tokens[3..]);
        assert!(
            spread.iter().all(|s| (0.5..5.0).contains(s)),
            "{name}: logit std {spread:?}"
        );
    }
}
