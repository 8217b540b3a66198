// The one reading of a training configuration's settings (api/config_settings.h).

#include "api/config_settings.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/graph.h"
#include "ir/name_suggestion.h"
#include "ir/status_macros.h"

namespace loom::config {

std::string Canonical(absl::string_view key) {
  while (absl::ConsumePrefix(&key, "-")) {
  }
  std::string out(key);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

namespace {

// ", got 'x'", saying when x is a shell variable left unexpanded.
std::string Got(const Setting& s) {
  if (!s.scalar) return ", got a list";
  if (absl::StartsWith(s.value, "$")) {
    return absl::StrCat(", got '", s.value, "' (a shell variable Loom cannot expand: give its value)");
  }
  return absl::StrCat(", got '", s.value, "'");
}

}  // namespace

absl::Status Settings::Add(Setting setting) {
  for (const Setting& s : settings_) {
    if (s.key != setting.key) continue;
    if (s.value == setting.value && s.scalar && setting.scalar) return absl::OkStatus();
    return Error(setting, absl::StrCat("given twice (first at ", s.where, " as '", s.spelled,
                                       "'", s.scalar ? absl::StrCat(": ", s.value) : "", ")"));
  }
  settings_.push_back(std::move(setting));
  return absl::OkStatus();
}

absl::Status Settings::Merge(const Settings& other) {
  for (const Setting& s : other.all()) LOOM_RETURN_IF_ERROR(Add(s));
  return absl::OkStatus();
}

const Setting* Settings::Find(absl::string_view key) const {
  for (const Setting& s : settings_) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

absl::Status Settings::Error(const Setting& s, absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(s.where, ": key '", s.spelled, "': ", what));
}

absl::Status Settings::Int(absl::string_view key, int64_t min, std::optional<int64_t>& out) const {
  const Setting* s = Find(key);
  if (s == nullptr || s->value.empty()) return absl::OkStatus();
  int64_t v = 0;
  if (!s->scalar || !absl::SimpleAtoi(s->value, &v)) {
    return Error(*s, absl::StrCat("expected an integer", Got(*s)));
  }
  if (v < min) return Error(*s, absl::StrCat("must be at least ", min, ", got ", v));
  out = v;
  return absl::OkStatus();
}

absl::Status Settings::Double(absl::string_view key, double min,
                              std::optional<double>& out) const {
  const Setting* s = Find(key);
  if (s == nullptr || s->value.empty()) return absl::OkStatus();
  double v = 0;
  if (!s->scalar || !absl::SimpleAtod(s->value, &v) || !std::isfinite(v)) {
    return Error(*s, absl::StrCat("expected a number", Got(*s)));
  }
  if (v < min) return Error(*s, absl::StrCat("must be at least ", min, ", got ", s->value));
  out = v;
  return absl::OkStatus();
}

absl::Status Settings::Bool(absl::string_view key, std::optional<bool>& out) const {
  const Setting* s = Find(key);
  if (s == nullptr || s->value.empty()) return absl::OkStatus();
  const std::string v = absl::AsciiStrToLower(s->value);
  if (s->scalar && (v == "true" || v == "yes" || v == "on" || v == "1")) {
    out = true;
  } else if (s->scalar && (v == "false" || v == "no" || v == "off" || v == "0")) {
    out = false;
  } else {
    return Error(*s, absl::StrCat("expected true or false", Got(*s)));
  }
  return absl::OkStatus();
}

absl::Status Settings::String(absl::string_view key, std::optional<std::string>& out) const {
  const Setting* s = Find(key);
  if (s == nullptr || s->value.empty()) return absl::OkStatus();
  if (!s->scalar) return Error(*s, "expected a string");
  out = s->value;
  return absl::OkStatus();
}

namespace {

// Keys Loom reads: they shape the plan.
constexpr const char* kRead[] = {
    "loom_model", "model", "name", "tiny", "tensor_model_parallel_size",
    "pipeline_model_parallel_size", "data_parallel_size", "world_size",
    "expert_model_parallel_size", "context_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "num_virtual_stages_per_pipeline_rank", "num_layers_per_virtual_pipeline_stage",
    "num_layers", "seq_length", "micro_batch_size", "global_batch_size",
    "gradient_accumulation_steps", "zero_stage", "sequence_parallel",
    "use_distributed_optimizer", "recompute_activations", "recompute_granularity",
    "recompute_method", "recompute_num_layers", "bf16", "fp16", "fp8", "fp8_format", "clip_grad",
    "optimizer", "optim.name", "encoder_seq_length", "trainer.precision", "trainer.devices", "trainer.num_nodes",
    "attention_dropout", "hidden_dropout"};

// Settings that would change the step, which Loom does not build: accepted only at
// a value that means "off".
struct NotModelled {
  const char* key;
  std::vector<std::string> off;  // lower case
  const char* what;
};
const std::vector<NotModelled>& NotModelledKeys() {
  static const auto* keys = new std::vector<NotModelled>{
      {"hierarchical_context_parallel_sizes", {}, "hierarchical context parallelism"},
      {"cp_comm_type", {"all_gather", "p2p"},
       "a context-parallel exchange other than keys and values all-gathered or passed "
       "around a ring (p2p, planned as all-gathered: the same values, another timing)"},
      {"expert_tensor_parallel_size", {"1"}, "tensor parallelism inside the experts"},
      {"encoder_tensor_model_parallel_size", {"0", "1"}, "an encoder's own parallelism"},
      {"encoder_pipeline_model_parallel_size", {"0", "1"}, "an encoder's own parallelism"},
      {"decoder_first_pipeline_num_layers", {}, "an uneven pipeline split"},
      {"decoder_last_pipeline_num_layers", {}, "an uneven pipeline split"},
      {"pipeline_model_parallel_layout", {}, "an uneven pipeline split"},
      {"account_for_embedding_in_pipeline_split", {"false"}, "an uneven pipeline split"},
      {"account_for_loss_in_pipeline_split", {"false"}, "an uneven pipeline split"},
      {"num_layers_in_first_pipeline_stage", {}, "an uneven pipeline split"},
      {"num_layers_in_last_pipeline_stage", {}, "an uneven pipeline split"},
      {"use_torch_fsdp2", {"false"}, "FSDP (Loom plans ZeRO stages: zero_stage 3)"},
      {"use_megatron_fsdp", {"false"}, "FSDP (Loom plans ZeRO stages: zero_stage 3)"},
      {"data_parallel_sharding_strategy", {"no_shard"}, "FSDP sharding"},
      {"num_distributed_optimizer_instances", {"1"}, "several distributed-optimizer instances"},
      {"grad_reduce_in_bf16", {"false"},
       "gradient reduction in bf16 (Loom's bf16 step reduces the main gradients in f32)"},
      {"fp8_param_gather", {"false"}, "fp8 parameters"},
      {"fp4", {"false"}, "fp4 training"},
      {"moe_aux_loss_coeff", {"0", "0.0"}, "a load-balancing loss"},
      {"moe_z_loss_coeff", {"0", "0.0"}, "a router z-loss"},
      {"sequence_parallel_size", {"1"}, "DeepSpeed-Ulysses sequence parallelism"},
      {"amp", {"false"}, "DeepSpeed's apex AMP"},
  };
  return *keys;
}

// Known keys that do not shape the training step Loom builds (learning-rate
// schedules, data, checkpoints, logging, fusions, communication overlap): named
// as ignored.
constexpr const char* kIgnored[] = {
    // optimizer hyper-parameters and schedules (Loom's step: AdamW at its defaults)
    "lr", "min_lr", "decoupled_lr", "decoupled_min_lr", "lr_decay_style", "lr_decay_iters",
    "lr_decay_samples", "lr_warmup_iters", "lr_warmup_samples", "lr_warmup_fraction",
    "lr_warmup_init", "weight_decay", "start_weight_decay", "end_weight_decay",
    "weight_decay_incr_style", "adam_beta1", "adam_beta2", "adam_eps", "sgd_momentum",
    "train_iters", "train_samples", "exit_interval", "exit_duration_in_mins", "exit_signal_handler",
    "step_batch_size_schedule", "rampup_batch_size", "override_opt_param_scheduler",
    "use_checkpoint_opt_param_scheduler", "override_opt", "no_load_optim", "no_load_rng",
    "finetune", "use_checkpoint_opt", "apply_wd_to_qk_layernorm", "scheduler",
    // initialisation and randomness
    "init_method_std", "init_method_xavier_uniform", "seed", "data_parallel_random_init",
    // data and tokenizer
    "data_path", "train_data_path", "valid_data_path", "test_data_path", "data_cache_path",
    "split", "mock_data", "num_workers", "tokenizer_type", "tokenizer_model", "vocab_file",
    "merge_file", "tiktoken_pattern", "no_mmap_bin_files", "mmap_bin_files",
    "no_create_attention_mask_in_dataloader", "reset_position_ids", "reset_attention_mask",
    "eod_mask_loss", "dataloader_type", "fim_data", "fim_rate", "fim_spm_rate",
    "calculate_per_token_loss", "sft", "data_args_path", "per_split_data_args_path",
    // checkpoints
    "save", "load", "save_interval", "save_retain_interval", "ckpt_format", "async_save",
    "use_persistent_ckpt_worker", "ckpt_fully_parallel_load", "ckpt_fully_parallel_save",
    "no_ckpt_fully_parallel_save", "ckpt_assume_constant_structure", "dist_ckpt_strictness",
    "dist_ckpt_optim_fully_reshardable", "auto_detect_ckpt_format", "async_strategy",
    "async_ckpt_use_cpu_shm", "pretrained_checkpoint", "use_dist_ckpt", "non_persistent_save_interval",
    "checkpoint", "verify_integrity",
    // evaluation and logging
    "eval_iters", "eval_interval", "eval_global_batch_size", "log_interval", "tensorboard_dir",
    "log_throughput", "log_timers_to_tensorboard", "log_memory_to_tensorboard",
    "log_num_zeros_in_grad", "log_params_norm", "log_validation_ppl_to_tensorboard",
    "timing_log_level", "wandb_project", "wandb_exp_name", "wandb_save_dir", "wandb_entity",
    "profile", "profile_step_start", "profile_step_end", "profile_ranks", "steps_per_print",
    "wall_clock_breakdown", "tensorboard", "wandb", "csv_monitor", "comms_logger",
    "flops_profiler", "memory_breakdown", "dump_state", "exp_manager", "nsys_profile",
    "test_mode", "rerun_mode", "error_injection_type", "error_injection_rate",
    "check_weight_hash_across_dp_replicas_interval", "log_loss_scale_to_tensorboard",
    // implementation, fusions, kernels, runtime
    "use_mcore_models", "transformer_impl", "attention_backend", "use_flash_attn",
    "cross_entropy_loss_fusion", "cross_entropy_fusion_impl", "manual_gc", "manual_gc_interval",
    "distributed_backend", "distributed_timeout_minutes", "deterministic_mode",
    "attention_softmax_in_fp32", "empty_unused_memory_level", "use_cpu_initialization",
    "bias_gelu_fusion", "bias_swiglu_fusion", "bias_dropout_fusion", "masked_softmax_fusion",
    "gradient_accumulation_fusion", "persist_layer_norm", "apply_rope_fusion", "rope_fusion",
    "moe_grouped_gemm", "moe_token_dispatcher_type", "moe_permute_fusion", "moe_router_dtype",
    "use_tp_pp_dp_mapping", "disable_gloo_process_groups", "deepspeed", "deepspeed_config",
    "deepspeed_activation_checkpointing", "local_rank", "export_te_mcore_model",
    "enable_cuda_graph", "cuda_graph_scope", "inference_max_seq_length", "trainer.accelerator",
    "trainer.max_steps", "trainer.log_every_n_steps", "trainer.val_check_interval",
    "trainer.limit_val_batches", "trainer.logger", "trainer.enable_checkpointing",
    "trainer.use_distributed_sampler", "trainer.max_epochs", "trainer.max_time",
    "trainer.limit_test_batches", "trainer.accumulate_grad_batches", "trainer.gradient_clip_val",
    "trainer.benchmark", "trainer.enable_model_summary", "trainer.num_sanity_val_steps",
    // communication overlap and scheduling (the same values, another timing)
    "overlap_grad_reduce", "overlap_param_gather", "overlap_param_gather_with_optimizer_step",
    "tp_comm_overlap", "overlap_p2p_communication", "overlap_p2p_communication_warmup_flush",
    "microbatch_group_size_per_virtual_pipeline_stage", "defer_embedding_wgrad_compute",
    "wgrad_deferral_limit", "ddp_average_in_collective", "ddp_bucket_size",
    "align_param_gather", "align_grad_reduce", "delay_wgrad_compute", "cp_comm_type",
    "pipeline.partition", "pipeline.seed_layers", "pipeline.activation_checkpoint_interval",
    "pipeline.pipe_partitioned", "pipeline.grad_partitioned", "communication_data_type",
    "prescale_gradients", "gradient_predivide_factor", "sparse_gradients",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "activation_checkpointing",
    "aio", "data_efficiency", "curriculum_learning", "elasticity", "data_types",
    "zero_optimization", "optimizer.params", "optim", "data", "tokenizer", "env_vars",
    "test_type", "launcher", "peft", "trainer", "pipeline", "tensor_parallel", "scheduler",
    "compression_training", "autotuning", "nebula", "fp16", "bf16", "bfloat16", "amp",
    "zero_optimization", "train_batch_size", "eval_batch_size",
};

// The model's architecture: the zoo model's, whatever the configuration says.
constexpr const char* kArchitecture[] = {
    "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
    "group_query_attention", "kv_channels", "max_position_embeddings", "vocab_size",
    "padded_vocab_size", "make_vocab_size_divisible_by", "normalization", "norm_epsilon",
    "layernorm_epsilon", "swiglu", "squared_relu", "position_embedding_type", "rotary_base",
    "rotary_percent", "rotary_interleaved", "rotary_seq_len_interpolation_factor",
    "use_rotary_position_embeddings", "use_rope_scaling", "rope_scaling_factor",
    "untie_embeddings_and_output_weights", "disable_bias_linear", "add_bias_linear",
    "add_qkv_bias", "apply_layernorm_1p", "apply_query_key_layer_scaling", "qk_layernorm",
    "num_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
    "moe_shared_expert_gate", "moe_router_load_balancing_type", "moe_router_score_function",
    "moe_layer_freq", "moe_router_topk_scaling_factor", "moe_router_enable_expert_bias",
    "moe_router_pre_softmax", "multi_latent_attention", "q_lora_rank", "kv_lora_rank",
    "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "attention_output_gate",
    "use_mup", "mup_base_hidden_size", "encoder_num_layers", "decoder_num_layers",
};

// Words in a key's name that speak of what shapes a plan: an unknown key holding
// one is refused rather than ignored.
constexpr const char* kPlanWords[] = {
    "parallel", "batch", "layers", "seq_len", "seq_length", "precision", "bf16", "fp16", "fp8",
    "recompute", "checkpoint_activations", "zero", "pipeline", "expert", "micro", "world",
    "devices", "nodes", "degree", "clip", "fsdp", "shard", "dropout", "accumulat"};

template <size_t N>
bool In(const char* const (&list)[N], absl::string_view key) {
  return std::find_if(std::begin(list), std::end(list),
                      [&](const char* k) { return key == k; }) != std::end(list);
}

// The known key nearest to `key`, for a suggestion ("" when none is close).
std::string Nearest(absl::string_view key) {
  std::string best;
  int best_distance = 1 << 30;
  auto consider = [&](absl::string_view known) {
    const int d = ir::EditDistance(key, known);
    if (d < best_distance) {
      best_distance = d;
      best = std::string(known);
    }
  };
  for (const char* k : kRead) consider(k);
  for (const NotModelled& n : NotModelledKeys()) consider(n.key);
  const int limit = std::max<int>(2, static_cast<int>(key.size()) / 4);
  return best_distance <= limit ? best : "";
}

// Every key accounted for (see the header); the ignored ones, as written, in
// `ignored`; the architecture's, to be checked against the model, in `architecture`.
absl::Status CheckKeys(const Settings& settings, std::vector<std::string>& ignored,
                       std::vector<ArchitectureSetting>& architecture) {
  for (const Setting& s : settings.all()) {
    const std::string& key = s.key;
    if (In(kRead, key)) continue;
    if (auto it = std::find_if(NotModelledKeys().begin(), NotModelledKeys().end(),
                               [&](const NotModelled& n) { return key == n.key; });
        it != NotModelledKeys().end()) {
      const std::string value = absl::AsciiStrToLower(s.value);
      if (value.empty() || value == "none" || value == "null" ||
          std::find(it->off.begin(), it->off.end(), value) != it->off.end()) {
        ignored.push_back(s.spelled);
        continue;
      }
      return settings.Error(s, absl::StrCat("Loom does not model ", it->what,
                                            "; remove the key or set it to ",
                                            it->off.empty() ? "null" : it->off.front()));
    }
    if (In(kArchitecture, key) && s.scalar) {
      architecture.push_back({s.key, s.spelled, s.value, s.where});
      continue;
    }
    const absl::string_view last = absl::string_view(key).substr(key.rfind('.') + 1);
    if (In(kIgnored, key) || In(kArchitecture, key) || In(kIgnored, last) ||
        absl::StartsWith(key, "no_")) {
      ignored.push_back(s.spelled);
      continue;
    }
    // A section the readers keep whole (optim.lr, data.seq_length) is named by its
    // first part.
    const std::string section = key.substr(0, key.find('.'));
    if (section != key && In(kIgnored, section) && section != "trainer") {
      ignored.push_back(s.spelled);
      continue;
    }
    if (absl::StartsWith(key, "parallelism.")) {
      return settings.Error(
          s, "this is a torchtitan job configuration; Loom's own route reads Megatron-LM and "
             "NeMo YAML, Megatron-LM command lines and DeepSpeed JSON: check a torchtitan job "
             "from its code with python -m loom.torch (docs/torch.md)");
    }
    const std::string nearest = Nearest(key);
    const bool plan_word = std::any_of(std::begin(kPlanWords), std::end(kPlanWords),
                                       [&](const char* w) { return absl::StrContains(key, w); });
    if (!nearest.empty() || plan_word) {
      return settings.Error(
          s, absl::StrCat("unknown key",
                          nearest.empty() ? "" : absl::StrCat(" (did you mean '", nearest, "'?)"),
                          nearest.empty() ? "; it may shape the plan, and Loom does not read it: "
                                            "remove it, or say what it sets"
                                          : ""));
    }
    ignored.push_back(s.spelled);
  }
  return absl::OkStatus();
}

#define LOOM_CONFIG_OK(expr)                  \
  do {                                        \
    if (absl::Status s_ = (expr); !s_.ok()) { \
      return s_;                              \
    }                                         \
  } while (false)

// The step's precision: Megatron-LM's `bf16` / `fp16` switches (DeepSpeed's
// bf16.enabled / fp16.enabled), or NeMo's `trainer.precision`. What Loom does not
// build (fp16 with its loss scaling, fp8, bf16 without master weights) is refused,
// never read as another precision; so are two settings that disagree.
absl::StatusOr<ir::Precision> PrecisionOf(const Settings& settings) {
  std::optional<bool> bf16, fp16, fp8;
  LOOM_CONFIG_OK(settings.Bool("bf16", bf16));
  LOOM_CONFIG_OK(settings.Bool("fp16", fp16));
  if (fp16.value_or(false)) {
    return settings.Error(*settings.Find("fp16"),
                          "fp16 training (with loss scaling) is not supported; use bf16");
  }
  if (const Setting* s = settings.Find("fp8_format"); s != nullptr && !s->value.empty()) {
    return settings.Error(*s, "fp8 training is not supported; remove the key");
  }
  if (const Setting* s = settings.Find("fp8"); s != nullptr && !s->value.empty()) {
    const std::string v = absl::AsciiStrToLower(s->value);
    if (v != "false" && v != "null" && v != "none") {
      return settings.Error(*s, "fp8 training is not supported; remove the key");
    }
  }
  std::optional<ir::Precision> from_switch;
  if (bf16.has_value()) from_switch = *bf16 ? ir::Precision::kBf16 : ir::Precision::kFp32;
  const Setting* n = settings.Find("trainer.precision");
  if (n == nullptr || n->value.empty()) return from_switch.value_or(ir::Precision::kFp32);
  const std::string& value = n->value;
  ir::Precision from_trainer;
  if (value == "bf16" || value == "bf16-mixed") {
    from_trainer = ir::Precision::kBf16;
  } else if (value == "32" || value == "32-true") {
    from_trainer = ir::Precision::kFp32;
  } else if (value == "16" || value == "16-mixed" || value == "16-true") {
    return settings.Error(*n, "fp16 training (with loss scaling) is not supported; use bf16-mixed");
  } else {
    return settings.Error(*n, absl::StrCat("'", value, "' is not supported; expected bf16-mixed "
                                                       "(bf16, with f32 master weights) or 32"));
  }
  if (from_switch.has_value() && *from_switch != from_trainer) {
    return settings.Error(
        *n, absl::StrCat("'", value, "' conflicts with bf16: ", *bf16 ? "true" : "false"));
  }
  return from_trainer;
}

// Megatron-LM's recomputation: whole layers ("full", every layer: method uniform
// with one layer per group, or block over all layers); the attention core alone
// ("selective") is not modelled.
absl::StatusOr<bool> RecomputeOf(const Settings& settings, std::optional<int64_t> layers) {
  std::optional<std::string> granularity, method;
  std::optional<bool> activations;
  std::optional<int64_t> num_layers;
  LOOM_CONFIG_OK(settings.String("recompute_granularity", granularity));
  LOOM_CONFIG_OK(settings.String("recompute_method", method));
  LOOM_CONFIG_OK(settings.Bool("recompute_activations", activations));
  LOOM_CONFIG_OK(settings.Int("recompute_num_layers", 1, num_layers));
  const std::string& origin = settings.origin();
  if (!granularity.has_value()) {
    if (activations.value_or(false)) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": recompute_activations (selective recomputation) is not modelled; set "
                  "recompute_granularity: full"));
    }
    if (method.has_value() || num_layers.has_value()) {
      const Setting* s = settings.Find(method.has_value() ? "recompute_method" : "recompute_num_layers");
      return settings.Error(*s, "needs recompute_granularity: full");
    }
    return false;
  }
  if (*granularity == "selective") {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": recompute_granularity 'selective' (the attention core only) is not "
                "modelled; Loom recomputes whole layers ('full')"));
  }
  if (*granularity != "full") {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": recompute_granularity '", *granularity, "': expected full"));
  }
  // Every layer recomputed: uniform groups of one layer, or a block of all of them.
  const bool every_layer =
      !num_layers.has_value() || (method.value_or("uniform") == "uniform" && *num_layers == 1) ||
      (method == "block" && layers.has_value() && *num_layers >= *layers);
  if (!every_layer) {
    return settings.Error(
        *settings.Find("recompute_num_layers"),
        absl::StrCat("recomputing ", method.value_or("uniform"), " groups of ", *num_layers,
                     " layers is not modelled; Loom recomputes every layer's forward (method "
                     "uniform with recompute_num_layers 1)"));
  }
  return true;
}

}  // namespace

absl::StatusOr<TrainConfig> FromSettings(const Settings& settings) {
  TrainConfig c;
  LOOM_CONFIG_OK(CheckKeys(settings, c.ignored, c.architecture));
  for (const Setting& s : settings.all()) {
    if (In(kRead, s.key)) c.read.push_back(s.key);
  }
  const std::string& origin = settings.origin();
  std::optional<std::string> name, model, optimizer, optim_name;
  LOOM_CONFIG_OK(settings.String("loom_model", name));
  if (const Setting* m = settings.Find("model"); m != nullptr && m->scalar) {
    LOOM_CONFIG_OK(settings.String("model", model));
  }
  if (!name.has_value()) name = model;
  if (!name.has_value()) LOOM_CONFIG_OK(settings.String("name", name));
  if (name.has_value()) c.model.name = *name;
  std::optional<bool> tiny, sp, distributed;
  LOOM_CONFIG_OK(settings.Bool("tiny", tiny));
  c.model.tiny = tiny.value_or(false);
  LOOM_ASSIGN_OR_RETURN(c.model.precision, PrecisionOf(settings));
  // The optimizer: Megatron-LM's adam is AdamW (decoupled weight decay), as
  // DeepSpeed's Adam / AdamW and NeMo's fused and distributed Adam are.
  LOOM_CONFIG_OK(settings.String("optimizer", optimizer));
  LOOM_CONFIG_OK(settings.String("optim.name", optim_name));
  for (const auto& [key, value] : {std::pair{"optimizer", optimizer}, {"optim.name", optim_name}}) {
    if (!value.has_value()) continue;
    const std::string v = absl::AsciiStrToLower(*value);
    if (v != "adam" && v != "adamw" && v != "fused_adam" && v != "distributed_fused_adam" &&
        v != "fusedadam") {
      return settings.Error(*settings.Find(key),
                            absl::StrCat("optimizer '", *value, "' is not modelled; Loom's step "
                                         "updates with AdamW"));
    }
  }
  std::optional<double> clip, attention_dropout, hidden_dropout;
  LOOM_CONFIG_OK(settings.Double("clip_grad", 0, clip));
  if (clip.has_value()) c.model.max_grad_norm = *clip;
  LOOM_CONFIG_OK(settings.Double("attention_dropout", 0, attention_dropout));
  LOOM_CONFIG_OK(settings.Double("hidden_dropout", 0, hidden_dropout));
  for (const char* key : {"attention_dropout", "hidden_dropout"}) {
    const std::optional<double>& p = key[0] == 'a' ? attention_dropout : hidden_dropout;
    if (p.has_value() && *p != 0) {
      return settings.Error(*settings.Find(key),
                            "dropout is not modelled (Loom's step has none); set it to 0.0");
    }
  }
  std::optional<int64_t> tp, pp, dp, world, ep, cp, vpp, vpp_ranks, layers_per_virtual, layers,
      seq, micro, global, accumulation, zero;
  LOOM_CONFIG_OK(settings.Int("tensor_model_parallel_size", 1, tp));
  LOOM_CONFIG_OK(settings.Int("pipeline_model_parallel_size", 1, pp));
  LOOM_CONFIG_OK(settings.Int("data_parallel_size", 1, dp));
  LOOM_CONFIG_OK(settings.Int("world_size", 1, world));
  LOOM_CONFIG_OK(settings.Int("expert_model_parallel_size", 1, ep));
  LOOM_CONFIG_OK(settings.Int("context_parallel_size", 1, cp));
  LOOM_CONFIG_OK(settings.Int("virtual_pipeline_model_parallel_size", 1, vpp));
  LOOM_CONFIG_OK(settings.Int("num_virtual_stages_per_pipeline_rank", 1, vpp_ranks));
  LOOM_CONFIG_OK(settings.Int("num_layers_per_virtual_pipeline_stage", 1, layers_per_virtual));
  LOOM_CONFIG_OK(settings.Int("num_layers", 1, layers));
  LOOM_CONFIG_OK(settings.Int("seq_length", 1, seq));
  if (!seq.has_value()) LOOM_CONFIG_OK(settings.Int("encoder_seq_length", 1, seq));  // NeMo
  LOOM_CONFIG_OK(settings.Int("micro_batch_size", 1, micro));
  LOOM_CONFIG_OK(settings.Int("global_batch_size", 1, global));
  LOOM_CONFIG_OK(settings.Int("gradient_accumulation_steps", 1, accumulation));
  LOOM_CONFIG_OK(settings.Int("zero_stage", 0, zero));
  LOOM_CONFIG_OK(settings.Bool("sequence_parallel", sp));
  LOOM_CONFIG_OK(settings.Bool("use_distributed_optimizer", distributed));

  // NeMo: the job's size is trainer.devices x trainer.num_nodes.
  std::optional<int64_t> devices, nodes;
  LOOM_CONFIG_OK(settings.Int("trainer.devices", 1, devices));
  LOOM_CONFIG_OK(settings.Int("trainer.num_nodes", 1, nodes));
  if (devices.has_value()) {
    const int64_t job = *devices * nodes.value_or(1);
    if (world.has_value() && *world != job) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": world_size ", *world, " differs from trainer.devices x "
          "trainer.num_nodes (", *devices, " x ", nodes.value_or(1), ")"));
    }
    world = job;
  }

  ParallelConfig& p = c.parallel;
  p.tp = static_cast<int>(tp.value_or(1));
  p.pp = static_cast<int>(pp.value_or(1));
  p.ep = static_cast<int>(ep.value_or(1));
  p.cp = static_cast<int>(cp.value_or(1));
  p.sp = sp.value_or(false);
  // Megatron-LM: world = dp x cp x tp x pp.
  const int64_t model_parallel = int64_t{p.tp} * p.pp * p.cp;
  if (dp.has_value()) {
    p.dp = static_cast<int>(*dp);
    if (world.has_value() && *dp * model_parallel != *world) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": data x context x tensor x pipeline parallel size (", *dp, " x ", p.cp,
          " x ", p.tp, " x ", p.pp, ") is not the job's ", *world, " devices"));
    }
  } else if (world.has_value()) {
    if (*world % model_parallel != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": world_size ", *world, " is not a multiple of context x tensor x "
          "pipeline parallel size ", model_parallel));
    }
    p.dp = static_cast<int>(*world / model_parallel);
  } else if (global.has_value() && micro.has_value() && accumulation.has_value()) {
    // DeepSpeed: train_batch_size = micro batch x accumulation steps x dp.
    if (*global % (*micro * *accumulation) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": the global batch ", *global, " is not a multiple of the micro-batch size x "
          "accumulation steps (", *micro, " x ", *accumulation, ")"));
    }
    p.dp = static_cast<int>(*global / (*micro * *accumulation));
  }
  if (layers.has_value()) {
    if (*layers > ir::kMaxLayers) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": num_layers ", *layers, " is above ", ir::kMaxLayers));
    }
    c.model.layers = static_cast<int>(*layers);
  }
  if (seq.has_value()) c.model.seq = *seq;
  if (vpp.has_value() && vpp_ranks.has_value() && *vpp != *vpp_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": virtual_pipeline_model_parallel_size ", *vpp,
        " and num_virtual_stages_per_pipeline_rank ", *vpp_ranks, " disagree"));
  }
  if (!vpp.has_value()) vpp = vpp_ranks;
  if (vpp.has_value()) {
    p.vpp = static_cast<int>(*vpp);
  } else if (layers_per_virtual.has_value()) {
    if (!layers.has_value() || *layers % (p.pp * *layers_per_virtual) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": num_layers_per_virtual_pipeline_stage needs num_layers, a multiple "
          "of it times pipeline_model_parallel_size"));
    }
    p.vpp = static_cast<int>(*layers / (p.pp * *layers_per_virtual));
  }
  // Batches: micro_batch_size sequences per data-parallel rank and micro-batch;
  // global_batch_size over the whole step; accumulation steps, when given, agree.
  const int64_t per_micro = micro.value_or(1);
  c.model.batch = per_micro * p.dp;
  int64_t microbatches = accumulation.value_or(1);
  if (global.has_value()) {
    if (*global % (per_micro * p.dp) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": global_batch_size ", *global, " is not a multiple of "
          "micro_batch_size x data-parallel size (", per_micro, " x ", p.dp, ")"));
    }
    microbatches = *global / (per_micro * p.dp);
    if (accumulation.has_value() && *accumulation != microbatches) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": gradient_accumulation_steps ", *accumulation, " disagrees with the global "
          "batch ", *global, " over micro_batch_size x data-parallel size (", per_micro, " x ",
          p.dp, " makes ", microbatches, ")"));
    }
  }
  if (microbatches > ir::kMaxMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, ": ", microbatches, " micro-batches of micro_batch_size x data-parallel size (",
        per_micro, " x ", p.dp, "), above ", ir::kMaxMicrobatches));
  }
  p.microbatches = static_cast<int>(microbatches);
  // Megatron's distributed optimizer shards the optimizer states over the dp group.
  p.zero = static_cast<int>(zero.value_or(distributed.value_or(false) ? 1 : 0));
  if (optim_name == "distributed_fused_adam") p.zero = std::max(p.zero, 1);
  if (p.zero > 3) {
    return settings.Error(*settings.Find("zero_stage"), absl::StrCat(p.zero, " is above 3"));
  }
  LOOM_ASSIGN_OR_RETURN(p.recompute, RecomputeOf(settings, layers));
  // A configuration that names its model is checked now; one that does not (a
  // DeepSpeed file, a command line) when the model is given (CheckArchitecture).
  if (!c.model.name.empty()) LOOM_CONFIG_OK(CheckArchitecture(c));
  return c;
}

}  // namespace loom::config
