/* gpt2_hf.c — GPT-2 in Hugging Face's layout (GPT2LMHeadModel): the name of every tensor, its Conv1D
 * weights stored as (in, out) where llm.c stores (out, in), and the config.json that class reads.
 * collage_model_export_safetensors (export.c) writes a checkpoint through this table. */
#include "collage_data.h"
#include "gpt2.h"
#include "model.h"
#include <stddef.h>
#include <stdio.h>

/* In GPT2LMHeadModel.state_dict() order; lm_head.weight is tied to wte and not written (the class
 * ties it on load, as the published GPT-2 checkpoints rely on). */
static const collage_export_tensor GPT2_HF[] = {
    {"transformer.wte.weight", GPT2_WTE, 0, 1, 0, 0, 0},
    {"transformer.wpe.weight", GPT2_WPE, 0, 0, 0, 0, 0},
    {"transformer.h.%d.ln_1.weight", GPT2_LN1W, 0, 0, 0, 0, 0},
    {"transformer.h.%d.ln_1.bias", GPT2_LN1B, 0, 0, 0, 0, 0},
    {"transformer.h.%d.attn.c_attn.weight", GPT2_QKVW, 1, 0, 0, 0, 0},
    {"transformer.h.%d.attn.c_attn.bias", GPT2_QKVB, 0, 0, 0, 0, 0},
    {"transformer.h.%d.attn.c_proj.weight", GPT2_ATTPROJW, 1, 0, 0, 0, 0},
    {"transformer.h.%d.attn.c_proj.bias", GPT2_ATTPROJB, 0, 0, 0, 0, 0},
    {"transformer.h.%d.ln_2.weight", GPT2_LN2W, 0, 0, 0, 0, 0},
    {"transformer.h.%d.ln_2.bias", GPT2_LN2B, 0, 0, 0, 0, 0},
    {"transformer.h.%d.mlp.c_fc.weight", GPT2_FCW, 1, 0, 0, 0, 0},
    {"transformer.h.%d.mlp.c_fc.bias", GPT2_FCB, 0, 0, 0, 0, 0},
    {"transformer.h.%d.mlp.c_proj.weight", GPT2_FCPROJW, 1, 0, 0, 0, 0},
    {"transformer.h.%d.mlp.c_proj.bias", GPT2_FCPROJB, 0, 0, 0, 0, 0},
    {"transformer.ln_f.weight", GPT2_LNFW, 0, 0, 0, 0, 0},
    {"transformer.ln_f.bias", GPT2_LNFB, 0, 0, 0, 0, 0},
};

/* What the model computes, in GPT2Config's words: GELU's tanh form ("gelu_new"), LayerNorm's 1e-5,
 * attention scaled by 1/sqrt(head size), no dropout, the embedding tied to the output. The GPT-2
 * tokenizer's <|endoftext|> where the vocabulary is GPT-2's; none for another tokenizer's. */
static int gpt2_config_json(const collage_model_config *c, const char *dtype, char *buf, size_t cap) {
    char eot[16] = "null";
    if (c->vocab_size == COLLAGE_GPT2_VOCAB_SIZE) snprintf(eot, sizeof eot, "%d", COLLAGE_GPT2_EOT);
    return snprintf(buf, cap,
                    "{\n"
                    "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                    "  \"model_type\": \"gpt2\",\n"
                    "  \"vocab_size\": %d,\n"
                    "  \"n_positions\": %d,\n"
                    "  \"n_ctx\": %d,\n"
                    "  \"n_embd\": %d,\n"
                    "  \"n_layer\": %d,\n"
                    "  \"n_head\": %d,\n"
                    "  \"n_inner\": null,\n"
                    "  \"activation_function\": \"gelu_new\",\n"
                    "  \"layer_norm_epsilon\": 1e-05,\n"
                    "  \"scale_attn_weights\": true,\n"
                    "  \"resid_pdrop\": 0.0,\n"
                    "  \"embd_pdrop\": 0.0,\n"
                    "  \"attn_pdrop\": 0.0,\n"
                    "  \"initializer_range\": 0.02,\n"
                    "  \"tie_word_embeddings\": true,\n"
                    "  \"bos_token_id\": %s,\n"
                    "  \"eos_token_id\": %s,\n"
                    "  \"torch_dtype\": \"%s\"\n"
                    "}\n",
                    c->vocab_size, c->max_seq_len, c->max_seq_len, c->channels, c->num_layers, c->num_heads, eot,
                    eot, dtype);
}

/* Reading GPT2Config (import.c): the sizes, and the settings collage's GPT-2 computes one way only; the
 * defaults are GPT2Config's. */
#define F(x) offsetof(collage_hf_config, x)
static const collage_hf_key GPT2_KEYS[] = {
    {"vocab_size", COLLAGE_HF_INT, F(vocab), "50257", 0, 0},
    {"n_positions", COLLAGE_HF_INT, F(ctx), "1024", 0, 0},
    {"n_embd", COLLAGE_HF_INT, F(channels), "768", 0, 0},
    {"n_layer", COLLAGE_HF_INT, F(layers), "12", 0, 0},
    {"n_head", COLLAGE_HF_INT, F(heads), "12", 0, 0},
    {"n_inner", COLLAGE_HF_INT, F(inner), "null", 0, 0},
    {"tie_word_embeddings", COLLAGE_HF_TIED, F(untied), "true", 0, 0},
    {"activation_function", COLLAGE_HF_FIXED, 0, "\"gelu_new\"", "\"gelu_new\"",
     "collage's GPT-2 computes gelu_new (GELU's tanh form)"},
    {"layer_norm_epsilon", COLLAGE_HF_FIXED, 0, "1e-05", "1e-05", "collage's GPT-2 normalises with epsilon 1e-05"},
    {"scale_attn_weights", COLLAGE_HF_FIXED, 0, "true", "true", "collage's GPT-2 scales attention by 1/sqrt(head size)"},
    {"scale_attn_by_inverse_layer_idx", COLLAGE_HF_FIXED, 0, "false", "false",
     "collage's GPT-2 does not scale attention by the layer"},
    {"add_cross_attention", COLLAGE_HF_FIXED, 0, "false", "false", "collage's GPT-2 has no cross-attention"},
};
#undef F

static int gpt2_from_hf(const collage_hf_config *h, collage_model_config *c, char *why, size_t cap) {
    if (h->inner && h->inner != 4 * h->channels)
        return snprintf(why, cap, "n_inner is %d; collage's GPT-2 MLP is 4 * n_embd = %d wide", h->inner, 4 * h->channels), 0;
    if (h->untied) return snprintf(why, cap, "tie_word_embeddings is false; collage's GPT-2 ties its output to wte"), 0;
    *c = (collage_model_config){.family = COLLAGE_FAMILY_GPT2, .max_seq_len = h->ctx, .num_layers = h->layers,
                                .num_heads = h->heads, .channels = h->channels};
    return 1;
}

static const collage_hf_tie GPT2_TIES[] = {{"lm_head.weight", "transformer.wte.weight"}};

const collage_export_layout collage__gpt2_hf = {
    .what = "Hugging Face GPT2LMHeadModel",
    .tensors = GPT2_HF,
    .n_tensors = (int)(sizeof GPT2_HF / sizeof GPT2_HF[0]),
    .config_json = gpt2_config_json,
    .model_type = "gpt2",
    .arch = "GPT2LMHeadModel",
    .keys = GPT2_KEYS,
    .n_keys = (int)(sizeof GPT2_KEYS / sizeof GPT2_KEYS[0]),
    .from_hf = gpt2_from_hf,
    .ties = GPT2_TIES,
    .n_ties = 1,
};
