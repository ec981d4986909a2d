/* llama_hf.c — LLaMA in Hugging Face's layout (LlamaForCausalLM): the fused wqkv and w13 written as the
 * separate q, k, v, gate and up projections, q's and k's rows reordered per head for the rotation of
 * halves that class applies (rotate_half) where the family rotates adjacent pairs, and the config.json
 * that class reads. collage_model_export_safetensors (export.c) writes a checkpoint through this table. */
#include "collage_data.h"
#include "llama_plan.h"
#include "model.h"
#include <stddef.h>
#include <stdio.h>

/* The blocks of wqkv's and w13's rows (llama_tensors: q, k, v stacked; w1 (gate), w3 (up) stacked). */
enum { P_Q = 1, P_K, P_V, P_GATE, P_UP };

static void llama_rows(const collage_model_config *c, int part, size_t *row0, size_t *nrows) {
    const size_t hs = (size_t)(c->channels / c->num_heads), q = (size_t)c->num_heads * hs;
    const size_t kv = (size_t)c->num_kv_heads * hs, H = (size_t)c->hidden_dim;
    switch (part) {
    case P_Q: *row0 = 0; *nrows = q; break;
    case P_K: *row0 = q; *nrows = kv; break;
    case P_V: *row0 = q + kv; *nrows = kv; break;
    case P_GATE: *row0 = 0; *nrows = H; break;
    case P_UP: *row0 = H; *nrows = H; break;
    default: *row0 = *nrows = 0; break;
    }
}

/* In LlamaForCausalLM.state_dict() order. nn.Linear keeps (out, in) as the family does: no transposes.
 * lm_head.weight only for an untied output (a tied one is tied on load, tie_word_embeddings). */
static const collage_export_tensor LLAMA_HF[] = {
    {"model.embed_tokens.weight", LT_EMB, 0, 1, 0, 0, 0},
    {"model.layers.%d.self_attn.q_proj.weight", LT_WQKV, 0, 0, P_Q, 1, 0},
    {"model.layers.%d.self_attn.k_proj.weight", LT_WQKV, 0, 0, P_K, 1, 0},
    {"model.layers.%d.self_attn.v_proj.weight", LT_WQKV, 0, 0, P_V, 0, 0},
    {"model.layers.%d.self_attn.o_proj.weight", LT_WO, 0, 0, 0, 0, 0},
    {"model.layers.%d.mlp.gate_proj.weight", LT_W13, 0, 0, P_GATE, 0, 0},
    {"model.layers.%d.mlp.up_proj.weight", LT_W13, 0, 0, P_UP, 0, 0},
    {"model.layers.%d.mlp.down_proj.weight", LT_W2, 0, 0, 0, 0, 0},
    {"model.layers.%d.input_layernorm.weight", LT_ATTN_NORM, 0, 0, 0, 0, 0},
    {"model.layers.%d.post_attention_layernorm.weight", LT_FFN_NORM, 0, 0, 0, 0, 0},
    {"model.norm.weight", LT_NORM, 0, 0, 0, 0, 0},
    {"lm_head.weight", LT_OUT, 0, 1, 0, 0, 1},
};

/* What the model computes, in LlamaConfig's words: SiLU-gated MLP, RMSNorm's eps and the rotary base from
 * the config, no biases, no rope scaling. The GPT-2 tokenizer's <|endoftext|> where the vocabulary is
 * GPT-2's; none for another tokenizer's. */
static int llama_config_json(const collage_model_config *c, const char *dtype, char *buf, size_t cap) {
    char eot[16] = "null";
    if (c->vocab_size == COLLAGE_GPT2_VOCAB_SIZE) snprintf(eot, sizeof eot, "%d", COLLAGE_GPT2_EOT);
    return snprintf(buf, cap,
                    "{\n"
                    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                    "  \"model_type\": \"llama\",\n"
                    "  \"vocab_size\": %d,\n"
                    "  \"hidden_size\": %d,\n"
                    "  \"intermediate_size\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n"
                    "  \"num_attention_heads\": %d,\n"
                    "  \"num_key_value_heads\": %d,\n"
                    "  \"max_position_embeddings\": %d,\n"
                    "  \"hidden_act\": \"silu\",\n"
                    "  \"rms_norm_eps\": %.9g,\n"
                    "  \"rope_theta\": %.17g,\n"
                    "  \"rope_scaling\": null,\n"
                    "  \"attention_bias\": false,\n"
                    "  \"attention_dropout\": 0.0,\n"
                    "  \"initializer_range\": 0.02,\n"
                    "  \"tie_word_embeddings\": %s,\n"
                    "  \"bos_token_id\": %s,\n"
                    "  \"eos_token_id\": %s,\n"
                    "  \"torch_dtype\": \"%s\"\n"
                    "}\n",
                    c->vocab_size, c->channels, c->hidden_dim, c->num_layers, c->num_heads, c->num_kv_heads,
                    c->max_seq_len, c->norm_eps, c->rope_theta, c->untied ? "false" : "true", eot, eot, dtype);
}

/* Reading LlamaConfig (import.c): the sizes, ε, θ and the tie, and the settings collage's LLaMA computes
 * one way only; the defaults are LlamaConfig's. transformers 5 keeps θ in rope_parameters, earlier ones
 * beside rope_scaling at the top. */
#define F(x) offsetof(collage_hf_config, x)
static const char NO_SCALING[] = "collage's LLaMA rotates by rope_theta alone (no rope scaling)";
static const collage_hf_key LLAMA_KEYS[] = {
    {"vocab_size", COLLAGE_HF_INT, F(vocab), "32000", 0, 0},
    {"hidden_size", COLLAGE_HF_INT, F(channels), "4096", 0, 0},
    {"intermediate_size", COLLAGE_HF_INT, F(inner), "11008", 0, 0},
    {"num_hidden_layers", COLLAGE_HF_INT, F(layers), "32", 0, 0},
    {"num_attention_heads", COLLAGE_HF_INT, F(heads), "32", 0, 0},
    {"num_key_value_heads", COLLAGE_HF_INT, F(kv_heads), "null", 0, 0},
    {"head_dim", COLLAGE_HF_INT, F(head_dim), "null", 0, 0},
    {"max_position_embeddings", COLLAGE_HF_INT, F(ctx), "2048", 0, 0},
    {"rms_norm_eps", COLLAGE_HF_REAL, F(eps), "1e-06", 0, 0},
    {"rope_theta", COLLAGE_HF_REAL, F(theta), "10000", 0, 0},
    {"rope_parameters.rope_theta", COLLAGE_HF_REAL, F(theta), "", 0, 0},
    {"rope_parameters.rope_type", COLLAGE_HF_FIXED, 0, "\"default\"", "\"default\"", NO_SCALING},
    {"rope_scaling", COLLAGE_HF_FIXED, 0, "null", "null", NO_SCALING},
    {"tie_word_embeddings", COLLAGE_HF_TIED, F(untied), "false", 0, 0},
    {"hidden_act", COLLAGE_HF_FIXED, 0, "\"silu\"", "\"silu\"", "collage's LLaMA gates its MLP with silu"},
    {"attention_bias", COLLAGE_HF_FIXED, 0, "false", "false", "collage's LLaMA has no attention biases"},
    {"mlp_bias", COLLAGE_HF_FIXED, 0, "false", "false", "collage's LLaMA has no MLP biases"},
};
#undef F

static int llama_from_hf(const collage_hf_config *h, collage_model_config *c, char *why, size_t cap) {
    if (h->head_dim && h->head_dim * h->heads != h->channels)
        return snprintf(why, cap, "head_dim is %d; collage's LLaMA heads are hidden_size / num_attention_heads = %d wide",
                        h->head_dim, h->heads ? h->channels / h->heads : 0), 0;
    *c = (collage_model_config){.family = COLLAGE_FAMILY_LLAMA, .max_seq_len = h->ctx, .num_layers = h->layers,
                                .num_heads = h->heads, .channels = h->channels,
                                .num_kv_heads = h->kv_heads ? h->kv_heads : h->heads, .hidden_dim = h->inner,
                                .untied = h->untied, .norm_eps = h->eps, .rope_theta = h->theta};
    return 1;
}

static const collage_hf_tie LLAMA_TIES[] = {{"lm_head.weight", "model.embed_tokens.weight"}};

const collage_export_layout collage__llama_hf = {
    .what = "Hugging Face LlamaForCausalLM",
    .tensors = LLAMA_HF,
    .n_tensors = (int)(sizeof LLAMA_HF / sizeof LLAMA_HF[0]),
    .config_json = llama_config_json,
    .rows = llama_rows,
    .model_type = "llama",
    .arch = "LlamaForCausalLM",
    .keys = LLAMA_KEYS,
    .n_keys = (int)(sizeof LLAMA_KEYS / sizeof LLAMA_KEYS[0]),
    .from_hf = llama_from_hf,
    .ties = LLAMA_TIES,
    .n_ties = 1,
};
