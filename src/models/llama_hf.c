/* llama_hf.c — LLaMA in Hugging Face's layout (LlamaForCausalLM): the fused wqkv and w13 written as the
 * separate q, k, v, gate and up projections, q's and k's rows reordered per head for the rotation of
 * halves that class applies (rotate_half) where the family rotates adjacent pairs, and the config.json
 * that class reads. collage_model_export_safetensors (export.c) writes a checkpoint through this table. */
#include "collage_data.h"
#include "llama_plan.h"
#include "model.h"
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

const collage_export_layout collage__llama_hf = {
    .what = "Hugging Face LlamaForCausalLM",
    .tensors = LLAMA_HF,
    .n_tensors = (int)(sizeof LLAMA_HF / sizeof LLAMA_HF[0]),
    .config_json = llama_config_json,
    .rows = llama_rows,
};
