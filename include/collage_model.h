/* collage_model.h — the model interface of libcollage: one opaque model object for every family
 * (GPT-2 and LLaMA, decoders; BERT, an encoder trained by masked language modelling; another family
 * adds a file in src/models/ and a row in its table). A model has a family, a config, a compute
 * precision, a flat parameter slab of named tensors (shapes and weight-decay flags), forward (mean
 * loss; batches with padding and unscored positions), backward (gradients accumulated into a slab of
 * the same layout), next-token logits (decoders) or the logits of chosen positions (encoders), a profile
 * of where its calls spend their time, and a checkpoint format of its family. */
#ifndef COLLAGE_MODEL_H
#define COLLAGE_MODEL_H

#include "collage.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- families and configs */
typedef enum {
    COLLAGE_FAMILY_GPT2 = 0,  /* "gpt2": llm.c's GPT-2 (LayerNorm, learned positions, GELU MLP) */
    COLLAGE_FAMILY_LLAMA,     /* "llama": llama2.c's LLaMA (RMSNorm, rotary positions, grouped-query
                                 attention, SwiGLU MLP, no biases) */
    COLLAGE_FAMILY_BERT,      /* "bert": a BERT/RoBERTa encoder (post-norm blocks, bidirectional attention
                                 with a padding mask, the masked-LM head tied to the token embedding) */
    COLLAGE_FAMILY_COUNT
} collage_family;
const char    *collage_family_name(collage_family f);                  /* NULL if unknown */
collage_status collage_family_parse(const char *name, collage_family *out);

/* What a family is trained to predict. */
typedef enum {
    COLLAGE_OBJECTIVE_NEXT_TOKEN = 0, /* the token after each position (a decoder: it generates text) */
    COLLAGE_OBJECTIVE_MASKED_LM,      /* the original token at masked positions, seeing the whole sequence (an
                                         encoder: it fills in, it does not generate); collage_mlm_mask */
} collage_objective;
collage_objective collage_family_objective(collage_family f);          /* NEXT_TOKEN if unknown */
int            collage_family_generates(collage_family f);             /* 1: next_logits and sampling apply */

/* One config for every family; a field a family does not use is 0. */
typedef struct {
    collage_family family;
    int vocab_size;        /* V: real tokens; logits ≥ V are masked (probability 0, gradient 0) */
    int padded_vocab_size; /* Vp ≥ V: rows of the embedding (padded to a multiple of 128) */
    int max_seq_len;       /* the longest context the model is built for */
    int num_layers;        /* L */
    int num_heads;         /* NH, divides channels */
    int channels;          /* C */
    /* LLaMA (0 in GPT-2) */
    int num_kv_heads;      /* key/value heads, divides num_heads (equal: multi-head attention) */
    int hidden_dim;        /* the SwiGLU MLP's hidden size */
    int untied;            /* 1: a separate output matrix; 0: the logits use the token embedding */
    double norm_eps;       /* RMSNorm's ε (llama2.c: 1e-5) */
    double rope_theta;     /* the rotary embedding's base θ (10000) */
} collage_model_config;

/* Presets by name: "tiny" (GPT-2, L2 NH4 C128 T64, V 256), "small" (L6 NH6 C384 T256, V 256),
 * "gpt2" (L12 NH12 C768 T1024, V 50257 → 50304); "llama-tiny" (L2 NH4 KV2 C128 hidden 352 T64,
 * V 256), "llama-small" (llama2.c's 15M shape: L6 NH6 C288 hidden 768 T256, V 256), "llama-110m"
 * (llama2.c's 110M shape: L12 NH12 C768 hidden 2048 T1024, V 50257 of GPT-2's BPE in 50304 rows: 124M
 * parameters), the LLaMA presets tied, ε 1e-5, θ 10000; "bert-tiny" (BERT, L2 NH2 C128 T128) and
 * "bert-base" (L12 NH12 C768 T512): V 257 → 320 (the bytes and the mask token) and 50258 → 50304
 * (GPT-2's BPE and the mask token). */
collage_status collage_model_preset(const char *name, collage_model_config *out);
/* The names of the presets, in order, NULL-terminated. */
const char *const *collage_model_preset_names(void);
/* Set the vocabulary (and its padded size) for a tokenizer of vocab_size symbols, plus the tokens the
 * family adds after them (a masked-LM family: the mask token, id vocab_size). */
void           collage_model_config_set_vocab(collage_model_config *cfg, int vocab_size);
/* The tokenizer's symbols a config was made for: vocab_size less the family's added tokens. */
int            collage_model_text_vocab(const collage_model_config *cfg);
/* The mask token of a masked-LM config (the id after the tokenizer's: 256 with the byte tokenizer,
 * 50257 with GPT-2's BPE); -1 for a family without one. */
int            collage_model_mask_token(const collage_model_config *cfg);
/* Reshape a config (a preset, say) by the sizes given (0: keep): layers, heads, key/value heads, width,
 * MLP hidden size. Sizes that follow from others follow them unless given: key/value heads stay equal to
 * the heads where they were (multi-head attention), the hidden size follows the width by the family's
 * rule (LLaMA: 2/3 of 4·dim rounded up to a multiple of 32, as llama2.c). A size the family does not
 * have is set all the same, and collage_model_check refuses it. */
void           collage_model_config_resize(collage_model_config *cfg, int layers, int heads, int kv_heads, int dim,
                                           int hidden);
/* Shape check with a message ("channels 130 not divisible by num_heads 4"); msg may be NULL.
 * maxB, maxT: the batch the model is to be created for (0 = skip those checks). */
collage_status collage_model_check(const collage_model_config *cfg, int maxB, int maxT, char *msg, size_t cap);
size_t         collage_model_num_params(const collage_model_config *cfg);  /* 0 for an invalid config */

/* A named tensor of the parameter slab. */
typedef struct {
    const char *name;      /* static string, e.g. "wte", "qkvw" */
    size_t offset, count;  /* elements [offset, offset + count) of the slab */
    int ndim;
    size_t shape[4];
    int decay;             /* 1: a matrix that takes weight decay; 0: bias or norm */
    int product;           /* 1: the matrix of a product every token goes through (2 FLOPs per weight and
                              token forward, 4 backward); 2: one only the scored positions go through (a
                              masked-LM head); 0: a table (positions, an untied embedding), a bias or a
                              norm */
} collage_tensor_info;
/* The most tensors of any family, for arrays on the stack: the two calls below never return more. */
#define COLLAGE_MODEL_MAX_TENSORS 64
/* The tensors in slab order: writes at most cap (out may be NULL), returns the total (0 for an invalid
 * config). */
int            collage_model_tensors(const collage_model_config *cfg, collage_tensor_info *out, int cap);
/* One optimizer group per tensor: weight_decay where decay, else 0. Writes at most cap, returns the
 * total. Names point to static strings. */
int            collage_model_param_groups(const collage_model_config *cfg, double weight_decay,
                                          collage_param_group *out, int cap);
/* The family's initialisation, deterministic in seed and independent of the thread count. */
collage_status collage_model_init_weights(const collage_model_config *cfg, uint64_t seed, float *w, size_t n);

/* ---------------------------------------------------------------- the model */
typedef enum {
    COLLAGE_REAL_FP32 = 0, /* weights, activations, gradients float */
    COLLAGE_REAL_BF16,     /* weights, gradients and stored activations bf16 (2 bytes each); products on
                              bf16 operands with fp32 sums; statistics and the loss's softmax fp32 */
    COLLAGE_REAL_FP64,     /* double everywhere: the reference for gradient checks */
    COLLAGE_REAL_FP16,     /* weights and gradients fp16 (IEEE half, uint16_t), stored activations rounded to
                              fp16, computed in fp32 on those values: an accuracy study of fp16 storage (this
                              CPU path has no fp16 arithmetic), with loss scaling (collage_model_set_loss_scale);
                              every family has it (a family without it returns COLLAGE_ERR_UNSUPPORTED) */
    COLLAGE_REAL_FP8,      /* COLLAGE_REAL_BF16's model (bf16 weights, gradients, activations) with every matrix
                              product on fp8 operands quantized by a recipe, fp32 sums (docs/numerics.md §13,
                              collage_model_fp8_set); every family */
    COLLAGE_REAL_FP4,      /* the same with 4-bit products: NVFP4 or MXFP4 operands (docs/numerics.md §15,
                              collage_model_fp4_set); every family */
    COLLAGE_REAL_COUNT
} collage_real;
const char    *collage_real_name(collage_real r);                      /* "fp32", "bf16", "fp64", "fp16", "fp8", "fp4" */
collage_status collage_real_parse(const char *name, collage_real *out);
size_t         collage_real_size(collage_real r);                      /* bytes per element: 4, 2, 8, 2, 2 */

typedef struct collage_model collage_model;
/* All memory (activations for maxB × maxT, gradients) is allocated here. */
collage_status collage_model_create(const collage_model_config *cfg, collage_real prec, int maxB, int maxT,
                                    collage_model **out);
void           collage_model_free(collage_model *m);                   /* NULL is fine */
const collage_model_config *collage_model_get_config(const collage_model *m);
collage_real   collage_model_precision(const collage_model *m);
size_t         collage_model_size(const collage_model *m);             /* parameters */
/* The message of the last failed call on m ("token 300 at (0, 5) >= vocab_size 256"). */
const char    *collage_model_error(const collage_model *m);

/* Forward on B × T tokens (row-major, B ≤ maxB, 1 ≤ T ≤ maxT). params: the slab in the model's
 * precision (float, collage_bf16 or double); it must not change before backward. With targets:
 * *loss = mean cross-entropy over the scored positions (every one for a next-token family; those whose
 * target is not COLLAGE_TARGET_NONE for a masked-LM one); loss may be NULL; without: logits only,
 * *loss = NaN. */
collage_status collage_model_forward(collage_model *m, const void *params, const int *tokens, const int *targets,
                                     int B, int T, double *loss);
/* A batch in full: B sequences of T positions, some of them padding, some positions unscored.
 * targets: NULL (logits only), or per position a token id, or COLLAGE_TARGET_NONE where the position is
 * not scored (masked-LM families; a next-token family scores every position). lengths: NULL (every row
 * T long), or per row the number of real tokens, 1 ≤ lengths[b] ≤ T: positions t ≥ lengths[b] are
 * padding, never attended to (an attention mask) and never scored (their targets must be
 * COLLAGE_TARGET_NONE; their token ids are not read); a family without padding refuses rows shorter than
 * T. loss_divisor: 0, or the number the sum of the scored positions' cross-entropies is divided by (the
 * training run's loss over a whole batch split into micro-batches); 0 = their count (the mean). */
#define COLLAGE_TARGET_NONE (-1)
typedef struct {
    const int *tokens, *targets, *lengths;
    int B, T;
    double loss_divisor;
} collage_batch;
typedef struct {
    double loss;       /* Σ cross-entropy over the scored positions / divisor; NaN without targets; 0 with none scored */
    long long scored;  /* the positions scored */
    long long correct; /* of them, those whose most probable token is the target; -1 where the family does not count */
} collage_forward_info;
/* Forward of a batch (collage_model_forward with padding, unscored positions and a divisor). The model
 * then holds what backward needs. out may be NULL. */
collage_status collage_model_forward_batch(collage_model *m, const void *params, const collage_batch *b,
                                           collage_forward_info *out);
/* Gradients of the last forward's mean loss, added to the gradient slab: += in fp32 and fp64; in bf16,
 * after zero_grad the batch's gradient (each element summed in fp32, rounded once), else rnd(old + it).
 * Needs a forward with targets; consumes it. */
collage_status collage_model_backward(collage_model *m);
/* The gradient slab, in the model's precision. Read it through this call after zero_grad. */
void          *collage_model_grads(collage_model *m);
void           collage_model_zero_grad(collage_model *m);
/* Loss scaling: the following backwards compute the gradients of scale × the mean loss (1 by default).
 * COLLAGE_ERR_UNSUPPORTED where the model's family or precision has none (the bf16 model). */
collage_status collage_model_set_loss_scale(collage_model *m, double scale);
/* ---- fp8 compute (COLLAGE_REAL_FP8, docs/numerics.md §13 "The model in fp8")
 * set: the scaling recipe by name ("delayed" — the default —, "current", "block", "mxfp8") and the
 * formats (e4m3_all 0: the incoming gradients in e5m2, the rest e4m3; 1: e4m3 everywhere); the delayed
 * state starts afresh. Between steps only. A forward or backward whose fp8 operand holds NaN or Inf fails
 * with COLLAGE_ERR_NONFINITE (the step is to be skipped). end_step: after each optimizer step (skipped 0)
 * or skipped step (1): delayed scaling's histories and scales move on (or the step's amaxes are
 * forgotten). amaxes: the step's amaxes of the delayed slots, n of them, to max-reduce over data-
 * parallel ranks before end_step (NULL, n 0: no delayed state). state: the delayed state as bytes for a
 * checkpoint (0 bytes: none); load refuses other bytes (COLLAGE_ERR_FORMAT, message in
 * collage_model_error). COLLAGE_ERR_UNSUPPORTED on a model of another precision. */
collage_status collage_model_fp8_set(collage_model *m, const char *recipe, int e4m3_all);
collage_status collage_model_fp8_end_step(collage_model *m, int skipped);
float         *collage_model_fp8_amaxes(collage_model *m, int *n);
size_t         collage_model_fp8_state_bytes(const collage_model *m);
collage_status collage_model_fp8_state_save(const collage_model *m, void *buf, size_t cap);
collage_status collage_model_fp8_state_load(collage_model *m, const void *buf, size_t len);
/* Seconds the fp8 products have spent quantizing their operands (amaxes, scales, rounding) since the model
 * was made, on the calling thread's clock: a benchmark's phase. 0 for a model of another precision or NULL. */
double         collage_model_fp8_quant_seconds(const collage_model *m);
/* ---- fp4 compute (COLLAGE_REAL_FP4, docs/numerics.md §15 "The model in fp4")
 * set: the recipe by name, "nvfp4" (the default) or "mxfp4", optionally followed by ",hadamard" (the 16×16
 * random Hadamard transform on the weight-gradient product's inputs, its signs drawn from seed);
 * bf16_last: how many of the last linear layers (counted from the output: the logits' layer first, then
 * the blocks' in reverse) keep bf16 products, 0 … collage_model_fp4_layers. Between steps only.
 * COLLAGE_ERR_ARG for another name or bf16_last out of range. key: the stochastic rounding key of the
 * gradients' quantization in the backwards that follow (a run sets one per micro-batch). A forward or
 * backward whose 4-bit operand holds NaN or Inf fails with COLLAGE_ERR_NONFINITE (skip the step).
 * COLLAGE_ERR_UNSUPPORTED on a model of another precision. layers: the model's linear layers (0 for
 * another precision). quant_seconds: as collage_model_fp8_quant_seconds, for the 4-bit products. */
collage_status collage_model_fp4_set(collage_model *m, const char *recipe, int bf16_last, uint64_t seed);
collage_status collage_model_fp4_key(collage_model *m, uint64_t key);
int            collage_model_fp4_layers(const collage_model *m);
double         collage_model_fp4_quant_seconds(const collage_model *m);
/* ---- profiling: where the forward and backward spend their time (`collage bench model`'s phases)
 * set: on = 1 starts counting from zero, on = 0 stops (the counts stay readable); off by default, and
 * then no clock is read. While on, each call that runs the model's graph (forward, forward_batch,
 * backward, next_logits, logits_at) adds its wall time, and the matrix products and the attention ops
 * inside it add theirs, each timed on the calling thread from the op's entry to its exit (the threads it
 * runs on work inside that time). The rest of the calls' time is the other layer ops: norms, GELU or
 * SwiGLU, residual adds, the softmax and loss, embeddings, rotary positions. A model counts on the thread
 * that calls it: models called on several threads at once each keep their own counts. */
typedef struct {
    double seconds;           /* the profiled calls, whole */
    double products_seconds;  /* the matrix products, each from its entry to its exit: with the epilogues
                                 the bf16 and fp8 models run on each tile of a product (rounding to bf16,
                                 a bias, a residual add, the embedding's gradient rows) and, fp8, the
                                 quantization of its operands (collage_model_fp8_quant_seconds); the fp32
                                 model's bias and rounding loops after its products are not in it */
    double products_flops;    /* 2·M·N·K for each (M,N,K) product */
    long long products;       /* the products run */
    double attention_seconds; /* the attention ops, forward and backward: scores, softmax, weighted sums */
    long long attention_ops;  /* the attention ops run (one per layer and pass) */
} collage_model_profile;
void           collage_model_profile_set(collage_model *m, int on);
collage_status collage_model_profile_get(const collage_model *m, collage_model_profile *out);
/* ---- the kernels of the products (docs/numerics.md §10)
 * A product runs on one of the kernels this build has: fp32 on OpenBLAS's sgemm, oneDNN's sgemm or
 * collage's reference sgemm (a fixed order: the same bits on every x86-64 CPU); bf16 operands on oneDNN's
 * bf16 GEMM (CPUs with AVX512_BF16 or AMX), on collage's own (fp32 FMAs on operands widened as they are
 * packed; AVX-512), or widened exactly to fp32 and multiplied by the fp32 kernel. A model chooses at
 * create, for its own product shapes: the pinned kernels if any, else the ones remembered for this machine
 * and these shapes in the products file, else it times each kernel on one thread, takes the fastest and
 * remembers it there. The file: $COLLAGE_PRODUCTS_FILE, else $XDG_CACHE_HOME/collage/products, else
 * ~/.cache/collage/products ("off": none, measured each time). The bits of a model depend on its kernels
 * and the CPU, never on the thread count: pin the kernels (or resume a run, which pins what it recorded) to
 * rerun bit for bit.
 * OpenBLAS picks its own kernels when it loads, by the CPU it knows: a build that does not know the CPU
 * falls back to slower ones (collage_products_machine says so). A host program sets OPENBLAS_CORETYPE
 * (SkylakeX on AVX-512 CPUs, Haswell on AVX2) before OpenBLAS loads, or lets the measurement choose another
 * kernel; the collage CLI does the former itself. */
/* Pin the kernels of the models created from now on: "fp32=K,bf16=P" (K: openblas | onednn | ref | auto; P:
 * onednn | fma (collage's own, AVX-512) | widen | auto; either part may be left out) or "ref"
 * (fp32=ref,bf16=widen). NULL unpins: the environment's COLLAGE_GEMM (same syntax) applies again, and
 * COLLAGE_BF16_GEMM=widen pins the bf16 path. COLLAGE_ERR_ARG with a message naming the part that is wrong
 * (nothing changed). */
collage_status collage_products_pin(const char *spec, char *err, size_t cap);
/* Whether spec is a valid pin here (as collage_products_pin, without pinning). */
collage_status collage_products_check(const char *spec, char *err, size_t cap);
/* What the model's products run on and how it was chosen: "oneDNN sgemm (measured, 142 GFLOP/s)",
 * "oneDNN bf16 GEMM (AVX512_BF16) (remembered, 180 GFLOP/s)", "collage's reference sgemm (pinned)",
 * "OpenBLAS dgemm (…)" for fp64. */
const char    *collage_model_products(const collage_model *m);
/* The pin that gives m's kernels again ("fp32=onednn,bf16=widen"): what a run records. */
const char    *collage_model_products_spec(const collage_model *m);
/* The kernels of this build and CPU, OpenBLAS's core type (and whether it is below the CPU's), and the
 * pin in force, in a few lines. */
void           collage_products_machine(char *out, size_t cap);
/* The core's arithmetic peak for the instructions the products use, measured now (about half a second)
 * by register-only loops, each issue-bound (16 independent accumulators, operands in registers, an
 * untimed round first, the best of five), run on `threads` cores at once (a core's rate can depend on
 * what the others do; at most the processors, 1 in a build without OpenMP; the count in out->threads):
 * FLOP/s of one core for fp32 FMA (fma_bits: its vector width, 512 or 256; 0 without FMA), the bf16 dot
 * product VDPBF16PS (4 FLOPs a lane) and AMX's TDPBF16PS (16384 FLOPs a tile product), each 0 where the
 * CPU, or for AMX the OS, lacks it: the ceiling a product on that instruction cannot pass on one core. */
typedef struct { double fma, bf16_dot, amx_bf16; int fma_bits, threads; } collage_core_peak;
void           collage_core_peak_measure(int threads, collage_core_peak *out);
/* OpenBLAS's core type (openblas_get_corename), and the OPENBLAS_CORETYPE to set before OpenBLAS loads
 * when it is below what this CPU offers ("SkylakeX" or "Haswell"; NULL when it is not). */
const char    *collage_openblas_core(void);
const char    *collage_openblas_coretype_wanted(void);
/* The bf16 path where no model chose (collage_bf16_matmul's): the pinned one, else oneDNN's bf16 GEMM
 * where the CPU has it, else the widening path. */
const char    *collage_bf16_products(void);
/* C (M,N) = op(A)·op(B) in fp32 from bf16 operands (row-major; ta, tb: 1 = transposed; op(A) (M,K),
 * op(B) (K,N)), computed on the pinned kernels (else the path above and OpenBLAS), a fixed grid of
 * single-threaded tiles on collage_set_threads threads. For benchmarks and for checking the path.
 * C NULL: each tile is computed into the scratch and left there (what the model's products cost before
 * their epilogues: the products-alone rate `collage bench model` compares the model with). */
collage_status collage_bf16_matmul(int ta, int tb, int M, int N, int K, const collage_bf16 *A, int lda,
                                   const collage_bf16 *B, int ldb, float *C, int ldc);
/* Bytes a model holds besides the weights (which are the caller's). */
typedef struct {
    size_t gradients;    /* the gradient slab (bf16: 2 bytes a parameter, plus fp32 sums of biases and norms) */
    size_t activations;  /* stored activations and their gradients for maxB × maxT, the logits */
    size_t scratch;      /* the products' tile scratch; fp8: also their operands' scratch, the weight copies
                            (2 bytes a weight of the linear layers but in mxfp8) and the delayed state;
                            fp16: the fp32 copy of the weights. All of it allocated by create (fp8: and by
                            collage_model_fp8_set), none in a step */
} collage_model_memory;
collage_status collage_model_memory_get(const collage_model *m, collage_model_memory *out);
/* Logits (float, vocab_size entries) of the token following tokens[0..T), 1 ≤ T ≤ maxT. A family that
 * does not generate returns COLLAGE_ERR_UNSUPPORTED. */
collage_status collage_model_next_logits(collage_model *m, const void *params, const int *tokens, int T,
                                         float *logits);
/* Logits (float, npos rows of vocab_size) at positions pos[0..npos) of the one sequence tokens[0..T),
 * 1 ≤ T ≤ maxT, seen whole: a masked-LM model's predictions for its masked positions. A next-token
 * family returns COLLAGE_ERR_UNSUPPORTED. */
collage_status collage_model_logits_at(collage_model *m, const void *params, const int *tokens, int T,
                                       const int *pos, int npos, float *logits);
/* A token drawn from softmax(logits / temperature) with the uniform collage_rand32(key, index):
 * the same (logits, key, index) always gives the same token. temperature ≤ 0: the argmax (first on
 * ties). Returns -1 for V ≤ 0 or non-finite logits. */
int            collage_sample_logits(const float *logits, int V, float temperature, uint64_t key, uint64_t index);

/* Threads: every kernel and matrix product runs on collage_set_threads threads (a fixed grid of
 * single-threaded BLAS tiles); results are bit-identical for any thread count and with OpenMP off.
 * OpenBLAS has one process-wide thread count: a model call sets it to 1 on entry and restores the
 * caller's value before it returns, so a host program's own BLAS calls keep their setting (a BLAS
 * call made by another thread while a model call runs sees 1; with model calls on several threads
 * at once, the value comes back when the last of them returns). */

/* ---------------------------------------------------------------- checkpoints */
/* The family's checkpoint file (GPT-2: llm.c's format, fp32 version 3 or bf16 version 5; LLaMA:
 * llama2.c's legacy fp32 format, docs/llama.md; BERT: collage's "collbert" format, a header with the
 * config then the tensors by name, docs/numerics.md §8). Save: params are float (bf16 = 0) or
 * collage_bf16 (bf16 = 1; a format without bf16 widens them); written atomically. */
collage_status collage_model_save_file(const char *path, const collage_model_config *cfg, const void *params, int bf16,
                                       char *err, size_t cap);
/* Both readers below first check a file that lies in a checkpoint folder (RUN/step-N/model.bin, beside
 * the train.state that lists it) against the size and checksum recorded there: a damaged, truncated
 * or swapped file is COLLAGE_ERR_FORMAT naming it, whoever reads it (export, eval, a resume, --init).
 * A file outside a checkpoint folder is read as it is. */
/* The config a checkpoint holds (its family found from the file's header), and whether its weights
 * are bf16. Errors name the file and the problem. */
collage_status collage_model_read_header(const char *path, collage_model_config *cfg, int *bf16, char *err,
                                         size_t cap);
/* Read the weights into params (float when want_bf16 = 0, collage_bf16 when 1), converting exactly
 * (bf16 → float) or by RN (float → bf16). The file's config must equal cfg. */
collage_status collage_model_load_file(const char *path, const collage_model_config *cfg, void *params, int want_bf16,
                                       char *err, size_t cap);

/* ---------------------------------------------------------------- export */
/* The model for PyTorch code: dir/model.safetensors in the safetensors layout (a u64 little-endian
 * header length, a JSON header of names, dtypes, shapes and byte ranges, padded with spaces to 8
 * bytes, then the tensors, row-major) with the tensor names, shapes and orientation of the family's
 * Hugging Face class (GPT-2: GPT2LMHeadModel's "transformer.*" names, its Conv1D weights as (in, out),
 * the embedding without its padding rows, lm_head left to its tie with wte), and dir/config.json, that
 * class's config. params: float (bf16 = 0, written as F32) or collage_bf16 (bf16 = 1, written as
 * BF16), the family's slab. Each file is written atomically; dir is created if missing (not its
 * parents). COLLAGE_ERR_UNSUPPORTED for a family without such a layout. */
collage_status collage_model_export_safetensors(const char *dir, const collage_model_config *cfg, const void *params,
                                                int bf16, char *err, size_t cap);

/* ---------------------------------------------------------------- import */
/* A folder transformers' save_pretrained wrote (GPT2LMHeadModel, LlamaForCausalLM, BertForMaskedLM):
 * dir/config.json and dir/model.safetensors, or the shards dir/model.safetensors.index.json lists.
 * The family's export table read backwards: the tensors found by name, their transposes and row orders
 * undone, so that exporting the model again writes the same tensors bit for bit. A model collage
 * cannot compute exactly is refused with COLLAGE_ERR_UNSUPPORTED and a message naming the file and the
 * key or tensor (another activation, a bias, an untied output the family lacks, rope scaling, RoBERTa's
 * positions); a missing, extra, misshapen or non-BF16/F32 tensor or a damaged file is COLLAGE_ERR_FORMAT.
 * collage_model_read_header and collage_model_load_file read such a folder through these. */
/* Whether path is a folder holding a config.json (a Hugging Face folder rather than a checkpoint). */
int            collage_model_is_hf_folder(const char *path);
/* The config of the folder's model (the family from model_type; the vocabulary as config.json states it,
 * the family's added tokens included) and whether every tensor is BF16 (bf16 may be NULL). */
collage_status collage_model_import_config(const char *dir, collage_model_config *cfg, int *bf16, char *err,
                                           size_t cap);
/* The weights into params, the family's slab (float when want_bf16 = 0, collage_bf16 when 1; F32 to bf16
 * by RN, BF16 to float exactly; the embedding's padding rows 0). The folder's config must equal cfg. */
collage_status collage_model_import_safetensors(const char *dir, const collage_model_config *cfg, void *params,
                                                int want_bf16, char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
