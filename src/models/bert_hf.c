/* bert_hf.c — BERT in Hugging Face's layout (BertForMaskedLM): the fused qkv matrix and bias written as
 * the separate query, key and value layers, the masked-LM head's transform and bias, and the
 * config.json that class reads. collage_model_export_safetensors (export.c) writes a checkpoint through
 * this table. */
#include "bert.h"
#include "model.h"
#include <stddef.h>
#include <stdio.h>

/* The blocks of qkv's rows (q, k, v stacked, C each). */
enum { P_Q = 1, P_K, P_V };

static void bert_rows(const collage_model_config *c, int part, size_t *row0, size_t *nrows) {
    const size_t C = (size_t)c->channels;
    *row0 = part >= P_Q && part <= P_V ? (size_t)(part - P_Q) * C : 0;
    *nrows = part >= P_Q && part <= P_V ? C : 0;
}

/* In BertForMaskedLM.state_dict() order. nn.Linear keeps (out, in) as the family does: no transposes.
 * The decoder's weight is tied to the word embeddings and its bias to cls.predictions.bias on load. */
static const collage_export_tensor BERT_HF[] = {
    {"bert.embeddings.word_embeddings.weight", BERT_WTE, 0, 1, 0, 0, 0},
    {"bert.embeddings.position_embeddings.weight", BERT_WPE, 0, 0, 0, 0, 0},
    {"bert.embeddings.token_type_embeddings.weight", BERT_WTT, 0, 0, 0, 0, 0},
    {"bert.embeddings.LayerNorm.weight", BERT_LNEW, 0, 0, 0, 0, 0},
    {"bert.embeddings.LayerNorm.bias", BERT_LNEB, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.attention.self.query.weight", BERT_QKVW, 0, 0, P_Q, 0, 0},
    {"bert.encoder.layer.%d.attention.self.query.bias", BERT_QKVB, 0, 0, P_Q, 0, 0},
    {"bert.encoder.layer.%d.attention.self.key.weight", BERT_QKVW, 0, 0, P_K, 0, 0},
    {"bert.encoder.layer.%d.attention.self.key.bias", BERT_QKVB, 0, 0, P_K, 0, 0},
    {"bert.encoder.layer.%d.attention.self.value.weight", BERT_QKVW, 0, 0, P_V, 0, 0},
    {"bert.encoder.layer.%d.attention.self.value.bias", BERT_QKVB, 0, 0, P_V, 0, 0},
    {"bert.encoder.layer.%d.attention.output.dense.weight", BERT_ATTPROJW, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.attention.output.dense.bias", BERT_ATTPROJB, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.attention.output.LayerNorm.weight", BERT_LN1W, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.attention.output.LayerNorm.bias", BERT_LN1B, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.intermediate.dense.weight", BERT_FCW, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.intermediate.dense.bias", BERT_FCB, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.output.dense.weight", BERT_FCPROJW, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.output.dense.bias", BERT_FCPROJB, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.output.LayerNorm.weight", BERT_LN2W, 0, 0, 0, 0, 0},
    {"bert.encoder.layer.%d.output.LayerNorm.bias", BERT_LN2B, 0, 0, 0, 0, 0},
    {"cls.predictions.bias", BERT_OUTB, 0, 1, 0, 0, 0},
    {"cls.predictions.transform.dense.weight", BERT_HEADW, 0, 0, 0, 0, 0},
    {"cls.predictions.transform.dense.bias", BERT_HEADB, 0, 0, 0, 0, 0},
    {"cls.predictions.transform.LayerNorm.weight", BERT_HEADLNW, 0, 0, 0, 0, 0},
    {"cls.predictions.transform.LayerNorm.bias", BERT_HEADLNB, 0, 0, 0, 0, 0},
};

/* What the model computes, in BertConfig's words: GELU's tanh form ("gelu_new"), LayerNorm's 1e-5,
 * absolute learned positions, one token type, the MLP 4·C wide, no dropout, the output tied to the word
 * embeddings. No padding token: collage's tokenizers have none (the mask token is the last id). */
static int bert_config_json(const collage_model_config *c, const char *dtype, char *buf, size_t cap) {
    return snprintf(buf, cap,
                    "{\n"
                    "  \"architectures\": [\"BertForMaskedLM\"],\n"
                    "  \"model_type\": \"bert\",\n"
                    "  \"vocab_size\": %d,\n"
                    "  \"hidden_size\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n"
                    "  \"num_attention_heads\": %d,\n"
                    "  \"intermediate_size\": %d,\n"
                    "  \"hidden_act\": \"gelu_new\",\n"
                    "  \"hidden_dropout_prob\": 0.0,\n"
                    "  \"attention_probs_dropout_prob\": 0.0,\n"
                    "  \"max_position_embeddings\": %d,\n"
                    "  \"type_vocab_size\": 1,\n"
                    "  \"layer_norm_eps\": 1e-05,\n"
                    "  \"position_embedding_type\": \"absolute\",\n"
                    "  \"initializer_range\": 0.02,\n"
                    "  \"tie_word_embeddings\": true,\n"
                    "  \"pad_token_id\": null,\n"
                    "  \"torch_dtype\": \"%s\"\n"
                    "}\n",
                    c->vocab_size, c->channels, c->num_layers, c->num_heads, 4 * c->channels, c->max_seq_len, dtype);
}

/* Reading BertConfig (import.c): the sizes, and the settings collage's BERT computes one way only; the
 * defaults are BertConfig's (its gelu and ε 1e-12 are refused: a config for collage says gelu_new, 1e-05). */
#define F(x) offsetof(collage_hf_config, x)
static const collage_hf_key BERT_KEYS[] = {
    {"vocab_size", COLLAGE_HF_INT, F(vocab), "30522", 0, 0},
    {"hidden_size", COLLAGE_HF_INT, F(channels), "768", 0, 0},
    {"num_hidden_layers", COLLAGE_HF_INT, F(layers), "12", 0, 0},
    {"num_attention_heads", COLLAGE_HF_INT, F(heads), "12", 0, 0},
    {"intermediate_size", COLLAGE_HF_INT, F(inner), "3072", 0, 0},
    {"max_position_embeddings", COLLAGE_HF_INT, F(ctx), "512", 0, 0},
    {"type_vocab_size", COLLAGE_HF_INT, F(type_vocab), "2", 0, 0},
    {"tie_word_embeddings", COLLAGE_HF_TIED, F(untied), "true", 0, 0},
    {"hidden_act", COLLAGE_HF_FIXED, 0, "\"gelu\"", "\"gelu_new\"", "collage's BERT computes gelu_new (GELU's tanh form)"},
    {"layer_norm_eps", COLLAGE_HF_FIXED, 0, "1e-12", "1e-05", "collage's BERT normalises with epsilon 1e-05"},
    {"position_embedding_type", COLLAGE_HF_FIXED, 0, "\"absolute\"", "\"absolute\"",
     "collage's BERT learns absolute positions"},
    {"is_decoder", COLLAGE_HF_FIXED, 0, "false", "false", "collage's BERT is an encoder"},
    {"add_cross_attention", COLLAGE_HF_FIXED, 0, "false", "false", "collage's BERT has no cross-attention"},
};
#undef F

static int bert_from_hf(const collage_hf_config *h, collage_model_config *c, char *why, size_t cap) {
    if (h->inner != 4 * h->channels)
        return snprintf(why, cap, "intermediate_size is %d; collage's BERT MLP is 4 * hidden_size = %d wide", h->inner,
                        4 * h->channels), 0;
    if (h->type_vocab != 1) return snprintf(why, cap, "type_vocab_size is %d; collage's BERT has one token type", h->type_vocab), 0;
    if (h->untied) return snprintf(why, cap, "tie_word_embeddings is false; collage's BERT ties its output to the word embeddings"), 0;
    *c = (collage_model_config){.family = COLLAGE_FAMILY_BERT, .max_seq_len = h->ctx, .num_layers = h->layers,
                                .num_heads = h->heads, .channels = h->channels};
    return 1;
}

static const collage_hf_tie BERT_TIES[] = {{"cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"},
                                           {"cls.predictions.decoder.bias", "cls.predictions.bias"}};

const collage_export_layout collage__bert_hf = {
    .what = "Hugging Face BertForMaskedLM",
    .tensors = BERT_HF,
    .n_tensors = (int)(sizeof BERT_HF / sizeof BERT_HF[0]),
    .config_json = bert_config_json,
    .rows = bert_rows,
    .model_type = "bert",
    .arch = "BertForMaskedLM",
    .keys = BERT_KEYS,
    .n_keys = (int)(sizeof BERT_KEYS / sizeof BERT_KEYS[0]),
    .from_hf = bert_from_hf,
    .ties = BERT_TIES,
    .n_ties = 2,
};
