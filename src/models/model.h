/* model.h — the family table behind collage_model.h: what one model family provides (its names and
 * presets, objective, shape check, tensors, initialisation, its graphs and its checkpoint format), as a
 * row of function pointers. model.c holds the table and the generic object; each family fills its
 * row in its own file (gpt2.c: collage__gpt2_family, llama.c, bert.c). Private to the library and its
 * tests. */
#ifndef COLLAGE_MODELS_MODEL_H
#define COLLAGE_MODELS_MODEL_H

#include "collage_model.h"
#include "graph_model.h"
#include "nn.h"
#include <stdio.h>

/* The first bytes of a checkpoint file handed to every family's probe (fewer when the file is shorter). */
#define COLLAGE_CKPT_PROBE_BYTES 64

/* One tensor of a family's export layout (export.c): the name the other program gives it, with one %d
 * for the layer where the family's tensor stacks one slice per layer along its first dimension; the
 * family's tensor it comes from (an index into its tensors); transpose: each slice's matrix is written
 * with rows and columns swapped; vocab_rows: only the first vocab_size rows are written (an embedding
 * whose padding rows the other program does not have); part (1, 2, …): only that block of each slice's
 * rows is written, as the layout's rows() says (a fused matrix the other program keeps as several);
 * rope: each head's rows (channels / num_heads of them) are written from adjacent pairs (x[2i],
 * x[2i+1]) to halves (x[i], x[i + hs/2]): rows 0, 2, 4, …, then 1, 3, 5, … of every head (the other
 * program rotates halves where the family rotates adjacent pairs); optional: skipped where the family's
 * configuration has no such tensor (an untied output). */
typedef struct {
    const char *name;
    int tensor;
    int transpose;
    int vocab_rows;
    int part;
    int rope;
    int optional;
} collage_export_tensor;

/* What import.c reads from the other program's config.json before the family turns it into a
 * collage_model_config (from_hf): the sizes as that program states them, 0 for a key that is null. */
typedef struct {
    int vocab, ctx, layers, heads, kv_heads, channels, inner, head_dim, untied, type_vocab;
    double eps, theta;
} collage_hf_config;

/* One key of config.json (import.c): key ("a.b": member b of object a); kind: COLLAGE_HF_INT (a
 * positive integer, or null where dflt is "null", into the int at field, an offsetof in
 * collage_hf_config), COLLAGE_HF_REAL (a positive finite number into the double at field),
 * COLLAGE_HF_TIED (a bool; 1 − it into the int at field: tie_word_embeddings into untied) or
 * COLLAGE_HF_FIXED (what collage computes has no setting: the value must equal fixed, as JSON text,
 * else the folder is refused with why, what collage computes instead); dflt: the value transformers
 * takes when the key is absent, as JSON text ("": absent leaves the field as it is; NULL: required). */
enum { COLLAGE_HF_INT = 1, COLLAGE_HF_REAL, COLLAGE_HF_TIED, COLLAGE_HF_FIXED };
typedef struct {
    const char *key;
    int kind;
    size_t field;
    const char *dflt, *fixed, *why;
} collage_hf_key;

/* A tensor the other program may save beside its twin, tied to it (lm_head.weight beside the embedding):
 * accepted on import where its bits equal the twin's, refused as an untied tensor otherwise. */
typedef struct { const char *alias, *twin; } collage_hf_tie;

/* A family's layout in another program's classes (Hugging Face's for safetensors). The file lists the
 * tensors in table order, except that the entries with %d are written layer by layer where the first
 * of them stands. config_json writes the other program's config for cfg with weights of dtype
 * ("bfloat16" or "float32") into buf, as snprintf does (returns the length it needs). */
typedef struct {
    const char *what;                        /* "Hugging Face GPT2LMHeadModel", for messages */
    const collage_export_tensor *tensors;
    int n_tensors;
    int (*config_json)(const collage_model_config *cfg, const char *dtype, char *buf, size_t cap);
    /* Part k's first row and row count within a slice of the entries with that part (NULL: no parts). */
    void (*rows)(const collage_model_config *cfg, int part, size_t *row0, size_t *nrows);
    /* Reading (import.c): config.json's model_type and the class its architectures must name; the keys
     * read or checked, in order; from_hf: the family's config from what they said (sizes, the vocabulary
     * left to the caller), or 0 with why (naming the key) where collage cannot compute that model; the
     * tensors the class may save tied to another. */
    const char *model_type, *arch;
    const collage_hf_key *keys;
    int n_keys;
    int (*from_hf)(const collage_hf_config *h, collage_model_config *c, char *why, size_t cap);
    const collage_hf_tie *ties;
    int n_ties;
} collage_export_layout;

/* One tensor of the other program's file, cut from the slab by a layout entry: its name, where its
 * elements come from and the shape it is written with. */
typedef struct {
    char name[128];
    size_t src;        /* first element in the slab */
    size_t rows, cols; /* the source matrix (cols = 1 for a vector): rows × cols elements from src */
    int transpose;     /* written as cols × rows */
    size_t rope_hs;    /* rows written from adjacent pairs to halves in heads of this many rows (0: in order) */
    int ndim;          /* 1 or 2, as written */
    size_t begin, end; /* byte range in the data section, es bytes an element */
} collage_export_slice;
/* The tensors of the file for layout L and cfg, per-layer entries expanded layer by layer where the first
 * of them stands, with their byte ranges; *n = count. NULL with a message where the table does not fit
 * the family's tensors. The caller frees it (export.c). */
collage_export_slice *collage__export_expand(const collage_export_layout *L, const collage_model_config *cfg, size_t es,
                                             int *n, char *err, size_t cap);
/* The source row written as row r of a head-permuted tensor: within each head of hs rows, rows 0, 2, 4, …
 * first, then 1, 3, 5, … (pairs (2i, 2i + 1) become (i, i + hs/2)). */
size_t collage__rope_row(size_t r, size_t hs);

typedef struct {
    const char *name;                       /* "gpt2": collage_family_name */
    const char *const *presets;             /* preset names, NULL-terminated */
    collage_objective objective;            /* what it predicts (0: the next token) */
    int added_tokens;                       /* ids it adds after the tokenizer's (a masked-LM family: 1, the mask) */
    /* Configuration. cfg->family is this family's in every call below. */
    collage_status (*preset)(const char *name, collage_model_config *out);  /* COLLAGE_ERR_ARG if not its own */
    int (*pad_vocab)(int vocab_size);       /* rows of the embedding for vocab_size tokens */
    int (*hidden_of)(int dim);              /* the MLP's hidden size for a width (NULL: none in the config) */
    collage_status (*check)(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap);
    /* Tensors in slab order: writes at most cap, returns the total (0 for an invalid config). */
    int (*tensors)(const collage_model_config *cfg, collage_tensor_info *out, int cap);
    collage_status (*init_weights)(const collage_model_config *cfg, uint64_t seed, float *w, size_t n);

    /* The model: graph_model.h's object on the family's graphs (its plan, its float, double and bf16
     * passes; a masked-LM family's on gm_io). collage_model_create checks cfg with check first. */
    const gm_graph *graph;

    /* The checkpoint format. probe: 1 when head (the file's first len bytes) starts a checkpoint of this
     * family. ckpt_what names the format for messages ("llm.c GPT-2, magic 20240326"). Errors name the
     * file. */
    int (*ckpt_probe)(const unsigned char *head, size_t len);
    const char *ckpt_what;
    collage_status (*ckpt_save)(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                                char *err, size_t cap);
    collage_status (*ckpt_read_header)(const char *path, collage_model_config *cfg, int *bf16, char *err, size_t cap);
    collage_status (*ckpt_load)(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                                char *err, size_t cap);
    /* The layout collage_model_export_safetensors writes; NULL: the family cannot be exported yet. */
    const collage_export_layout *hf;
} collage_model_family;

/* The rows (model.c's table holds their addresses, in collage_family order) and their export layouts in
 * Hugging Face's classes (gpt2_hf.c, llama_hf.c, bert_hf.c). */
extern const collage_model_family collage__gpt2_family;
extern const collage_model_family collage__llama_family;
extern const collage_model_family collage__bert_family;
extern const collage_export_layout collage__gpt2_hf;
extern const collage_export_layout collage__llama_hf;
extern const collage_export_layout collage__bert_hf;

/* Helpers the families share (model.c). fill_normal: x[i] = sd·z_i for i < live, 0 for live ≤ i < count,
 * z a standard normal by Box–Muller from the counter-based words collage_rand32(key, ·): elements 2p and
 * 2p+1 depend only on (key, p), so the tensor is the same for any thread count. */
void collage__fill_normal(float *x, size_t count, size_t live, double sd, uint64_t key);

/* The shape checks every family shares, with a message for each refusal (msg may be NULL): sizes
 * positive, vocab_size ≥ min_vocab, padded_vocab_size ≥ vocab_size, channels divisible by num_heads,
 * sizes small enough that every int product of the kernels (N·4C, Vp·C, …) stays far from overflow; the
 * batch maxB × maxT (0: skip) within the context and at most 2^22 tokens. */
collage_status collage__check_dims(const collage_model_config *cfg, int min_vocab, int maxB, int maxT, char *msg,
                                   size_t cap);
/* The families' checkpoint readers: count elements of es bytes (4 float, 2 bf16) from f into dst (float
 * when want_bf16 = 0, collage_bf16 when 1), converting bf16 → float exactly and float → bf16 by RN, through
 * buf (chunk elements of es bytes; NULL where no conversion is needed). Returns count, or the index of
 * the first element of the chunk that could not be read. */
size_t collage__read_elements(FILE *f, void *dst, size_t count, size_t es, int want_bf16, void *buf, size_t chunk);
/* COLLAGE_OK when the config a checkpoint holds (have) is the one asked for (want), else
 * COLLAGE_ERR_FORMAT with a message naming path and both shapes. */
collage_status collage__ckpt_same_shape(const char *path, const collage_model_config *have,
                                        const collage_model_config *want, char *err, size_t cap);

/* The kernels of a model's products (products.c): chosen once per model at create, from the pin, the
 * products file or a measurement on the model's own shapes (cfg's product tensors on N = maxB·maxT rows);
 * how[k] says which ("pinned", "remembered", "measured") and gflops[k] the measured rate (0: none) of
 * its fp32 (k = 0) and bf16 (k = 1) products. Every family's create calls it with the same arguments and
 * gets the same answer in one process (remembered there). */
typedef struct {
    nn_products prod;
    double gflops[2];
    char how[2][12];
} collage__products;
collage_status collage__products_for(const collage_model_config *cfg, collage_real prec, int N, collage__products *out);
/* The choices the products file holds for this machine, a line each ("  fp32 onednn 109 GFLOP/s (shapes
 * HASH)"), into out; returns how many. */
int collage__products_remembered(char *out, size_t cap);
/* Forget the choices remembered in this process (tests: as a new process would start). */
void collage__products_forget(void);
/* "oneDNN sgemm (measured, 142 GFLOP/s)": what the products of a model of precision prec run on. */
void collage__products_describe(const collage__products *p, collage_real prec, char *out, size_t cap);
/* The pin that reproduces the choice ("fp32=onednn,bf16=widen"), for a rerun or a resume. */
void collage__products_spec(const collage__products *p, collage_real prec, char *out, size_t cap);

/* The model object of cfg's family in precision prec (any of gm_precision, the emulated ones included):
 * the family's check for maxB × maxT, then gm_create on its graphs. *out NULL on failure. */
collage_status collage__model_object(const collage_model_config *cfg, gm_precision prec, int maxB, int maxT,
                                     gm_model **out);

/* The row of family f; NULL if f is out of range. */
const collage_model_family *collage__model_family(collage_family f);

#endif
