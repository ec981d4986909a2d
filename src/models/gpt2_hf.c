/* gpt2_hf.c — GPT-2 in Hugging Face's layout (GPT2LMHeadModel): the name of every tensor, its Conv1D
 * weights stored as (in, out) where llm.c stores (out, in), and the config.json that class reads.
 * collage_model_export_safetensors (export.c) writes a checkpoint through this table. */
#include "collage_data.h"
#include "gpt2.h"
#include "model.h"
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

const collage_export_layout collage__gpt2_hf = {
    .what = "Hugging Face GPT2LMHeadModel",
    .tensors = GPT2_HF,
    .n_tensors = (int)(sizeof GPT2_HF / sizeof GPT2_HF[0]),
    .config_json = gpt2_config_json,
};
