/* collage_data.h — where training tokens come from, and how files are written.
 * Tokenizers: the byte tokenizer (256 symbols, id = byte, the default) and GPT-2's byte-level BPE
 * (50257 symbols) read from OpenAI's encoder.json + vocab.bpe (scripts/gpt2-vocab.sh installs them).
 * Corpora: the default corpus (the English text of Debian's `fortunes`), any text file or folder of
 * text files, llm.c token shards; the tokenize operation (text → shard); the loader that cuts
 * deterministic (B, T) batches of inputs and next-token targets from a train and a held-out
 * validation split, sliced by rank for data-parallel training. Atomic files: a reader never sees a
 * partial file. Functions taking `char *err, size_t err_size` write one line naming the file and
 * the problem there on failure (err may be NULL); COLLAGE_ERR_LEN bytes are always enough. */
#ifndef COLLAGE_DATA_H
#define COLLAGE_DATA_H

#include "collage.h"
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- atomic files */
/* Open a temporary name beside path and write to af->f; collage_atomic_commit flushes, fsyncs,
 * renames over path and fsyncs the folder; collage_atomic_abort removes the temporary file. */
typedef struct {
    FILE *f;
    char *tmp, *path;
} collage_atomic_file;
collage_status collage_atomic_open(collage_atomic_file *af, const char *path, char *err, size_t cap);
collage_status collage_atomic_commit(collage_atomic_file *af, char *err, size_t cap);
void           collage_atomic_abort(collage_atomic_file *af);

/* ---------------------------------------------------------------- tokenizers */
#define COLLAGE_ERR_LEN 1024
#define COLLAGE_GPT2_VOCAB_SIZE 50257
#define COLLAGE_GPT2_EOT 50256          /* <|endoftext|> */
#define COLLAGE_GPT2_VOCAB_ENV "COLLAGE_GPT2_VOCAB_DIR"

typedef enum {
    COLLAGE_TOKENIZER_BYTE = 0,   /* "byte": 256 ids, id = byte value, lossless on any input */
    COLLAGE_TOKENIZER_GPT2,       /* "gpt2": GPT-2's BPE, the ids openai/gpt-2's encoder.py produces */
    COLLAGE_TOKENIZER_COUNT
} collage_tokenizer_kind;
const char    *collage_tokenizer_kind_name(collage_tokenizer_kind k);    /* "byte", "gpt2"; NULL if unknown */
collage_status collage_tokenizer_kind_parse(const char *name, collage_tokenizer_kind *out);

/* Where the GPT-2 files are: $COLLAGE_GPT2_VOCAB_DIR when set (then it must hold them), else the first of
 * COLLAGE_GPT2_VOCAB_DIRS that holds both (scripts/gpt2-vocab.sh installs them into the first). Writes
 * the folder to dir. COLLAGE_ERR_IO when none holds both files. */
#define COLLAGE_GPT2_VOCAB_DIRS "/usr/local/share/collage/gpt2", "/usr/share/collage/gpt2"
collage_status collage_gpt2_vocab_find(char *dir, size_t dir_size, char *err, size_t err_size);

typedef struct collage_tokenizer collage_tokenizer;
/* vocab_dir: GPT-2 only, the folder holding encoder.json and vocab.bpe (NULL = collage_gpt2_vocab_find).
 * Both files are validated: JSON syntax, ids dense and unique, every merge's parts and result in the
 * vocabulary; errors name the file (and line) with COLLAGE_ERR_FORMAT, a missing file COLLAGE_ERR_IO. */
collage_status collage_tokenizer_create(collage_tokenizer_kind kind, const char *vocab_dir,
                                        collage_tokenizer **out, char *err, size_t err_size);
void           collage_tokenizer_free(collage_tokenizer *t);            /* NULL is fine */
collage_tokenizer_kind collage_tokenizer_kind_of(const collage_tokenizer *t);
int            collage_tokenizer_vocab_size(const collage_tokenizer *t);  /* 256 or 50257 */
int            collage_tokenizer_eot(const collage_tokenizer *t);         /* 50256 for GPT-2, -1: none */
/* The bytes of one token (not NUL-terminated), NULL for an id outside the vocabulary. */
const char    *collage_tokenizer_token(const collage_tokenizer *t, int id, size_t *len);

/* Encode len bytes. ids must hold len entries (every token covers at least one byte); *n = tokens
 * written. Any bytes are accepted: invalid UTF-8 bytes are pre-tokenised as punctuation and encoded
 * byte by byte, so decode(encode(x)) == x for every x. Thread-safe (t is only read). */
collage_status collage_tokenizer_encode(const collage_tokenizer *t, const char *text, size_t len,
                                        uint16_t *ids, size_t *n);
/* Decode n ids into out (cap bytes, no NUL added); *len = bytes of the text. COLLAGE_ERR_SIZE when
 * cap is too small (nothing written, *len = the size needed); COLLAGE_ERR_ARG for an id ≥ vocab. */
collage_status collage_tokenizer_decode(const collage_tokenizer *t, const uint16_t *ids, size_t n,
                                        char *out, size_t cap, size_t *len);

/* GPT-2's pre-tokenisation, exposed for tests: the end of the piece that starts at byte pos of text,
 * by the regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ over UTF-8.
 * \p{L}, \p{N}: all of Unicode 17.0 (tables generated with Node 20.20 / ICU 78.2); \s: the White_Space
 * property, as Python's `regex` module (GPT-2's encoder.py) and tiktoken read it. (The npm package's
 * JavaScript \s differs on two code points: it excludes U+0085 and includes U+FEFF.)
 * pos < len; returns a value in (pos, len]. */
size_t collage_gpt2_piece_end(const char *text, size_t len, size_t pos);

/* ---------------------------------------------------------------- llm.c token shards */
/* Header: 256 little-endian int32 — [0] magic 20240520, [1] version 1, [2] token count N,
 * [3] the vocabulary size of the tokenizer that wrote it (a collage extension: llm.c writes 0 there and
 * ignores it; 0 = unknown), the rest 0; then N little-endian uint16 tokens. Nothing else. */
#define COLLAGE_SHARD_MAGIC 20240520
#define COLLAGE_SHARD_VERSION 1
#define COLLAGE_SHARD_HEADER_INTS 256
#define COLLAGE_SHARD_HEADER_BYTES 1024

/* Write n tokens atomically (temporary name, fsync, rename). n ≤ INT32_MAX (else COLLAGE_ERR_SIZE).
 * vocab_size goes to header[3] and, when > 0, bounds the tokens (COLLAGE_ERR_ARG naming the position). */
collage_status collage_shard_write(const char *path, const uint16_t *tokens, size_t n, int vocab_size,
                                   char *err, size_t err_size);
/* Read and validate a shard: magic, version, file size = header + 2·N, and (vocab_size > 0) every
 * token < vocab_size and header[3] ∈ {0, vocab_size}. *tokens is malloc'd (free it). COLLAGE_ERR_FORMAT
 * with "wrong magic", "wrong version", "truncated: header says N tokens, file has M", "token X at
 * position P is outside the vocabulary", …; COLLAGE_ERR_IO when it cannot be opened or read. */
collage_status collage_shard_read(const char *path, int vocab_size, uint16_t **tokens, size_t *n,
                                  char *err, size_t err_size);

/* ---------------------------------------------------------------- corpora */
/* A corpus path is one of:
 *   NULL or ""        the default corpus: every plain file of COLLAGE_FORTUNES_DIR whose name has no
 *                     '.' (not the .dat indexes nor the .u8 links), in name order; each '%' separator
 *                     line becomes an empty line, so entries are parted by one blank line;
 *   FILE.bin          an llm.c token shard;
 *   FILE              a text file (bytes as they are; a NUL byte is refused as "not text");
 *   DIR               its regular files (symlinks followed; names starting with '.' skipped; not
 *                     recursive) in strcmp order: all .bin shards, or all text — not a mix.
 * COLLAGE_FORTUNES_DIR itself, however named, is read as the default corpus. Text files are encoded
 * one at a time (no token spans two files) and their tokens concatenated. */
#define COLLAGE_FORTUNES_DIR "/usr/share/games/fortunes"

typedef struct {
    size_t files;   /* files read */
    size_t bytes;   /* text bytes (after the fortune separators are rewritten), 0 for shards */
    size_t tokens;
    int shards;     /* 1: the tokens came from shards */
} collage_corpus_info;

/* The text of a corpus (text sources only), files concatenated; *text is malloc'd with a NUL after. */
collage_status collage_corpus_text(const char *path, char **text, size_t *len, collage_corpus_info *info,
                                   char *err, size_t err_size);
/* The tokens of a corpus: text encoded with tok, or shards validated against tok's vocabulary.
 * tok NULL = the byte tokenizer. *tokens is malloc'd. info may be NULL. */
collage_status collage_corpus_tokens(const char *path, const collage_tokenizer *tok, uint16_t **tokens,
                                     size_t *n, collage_corpus_info *info, char *err, size_t err_size);
/* Rewrite a fortune file in place: every line that is exactly "%" becomes an empty line. Returns the
 * new length (≤ len). */
size_t collage_fortune_strip(char *text, size_t len);

/* `collage tokenize`: the tokens of corpus in_path (as collage_corpus_tokens) into the shard out_path,
 * written atomically with tok's vocabulary size in the header. */
collage_status collage_tokenize(const char *in_path, const collage_tokenizer *tok, const char *out_path,
                                collage_corpus_info *info, char *err, size_t err_size);

/* ---------------------------------------------------------------- the loader */
typedef enum { COLLAGE_SPLIT_TRAIN = 0, COLLAGE_SPLIT_VAL = 1 } collage_split;

typedef struct {
    const char *path;          /* the corpus (see above); NULL = the default corpus */
    const char *val_path;      /* optional: validation tokens from this corpus (e.g. an llm.c val shard)
                                  instead of the tail of path; val_fraction is then unused */
    const uint16_t *tokens;    /* optional: these n_tokens tokens (copied) instead of path */
    size_t n_tokens;
    const collage_tokenizer *tokenizer; /* encodes text and bounds every id; NULL = the byte tokenizer */
    int B, T;                  /* global batch: B sequences of T tokens */
    double val_fraction;       /* the last ⌊n·f⌋ tokens are held out: 0 → 0.1; negative → no val split */
    uint64_t seed;             /* the order of the training windows, epoch by epoch */
    int sequential;            /* 1: training windows in corpus order (as llm.c), no shuffling */
} collage_loader_config;

/* A split of n tokens holds W = ⌊(n − 1) / T⌋ windows, window w being tokens [w·T, w·T + T] (inputs
 * the first T, targets the last T). Row b of global batch `step` is window number g = step·B + b of
 * an endless sequence of epochs: in the training split epoch e = ⌊g / W⌋ visits all W windows once in
 * the order of a pseudo-random permutation keyed by (seed, e) (identity when sequential); the
 * validation split always goes in corpus order. Every batch is a pure function of (data, B, T, seed,
 * step): resuming at step s needs only s, and any rank can compute any slice. */
typedef struct collage_loader collage_loader;
collage_status collage_loader_create(const collage_loader_config *cfg, collage_loader **out,
                                     char *err, size_t err_size);
void           collage_loader_free(collage_loader *l);                           /* NULL is fine */
/* The tokens of a split (NULL and *n = 0 for an absent validation split). */
const uint16_t *collage_loader_data(const collage_loader *l, collage_split s, size_t *n);
uint64_t       collage_loader_windows(const collage_loader *l, collage_split s);  /* W */
uint64_t       collage_loader_steps_per_epoch(const collage_loader *l, collage_split s); /* ⌊W / B⌋ */
int            collage_loader_has_val(const collage_loader *l);
/* The token offset (w·T) of row b ∈ [0, B) of global batch `step`. */
uint64_t       collage_loader_offset(const collage_loader *l, collage_split s, uint64_t step, int b);
/* Rank `rank` of `nranks` reads rows [rank·B/nranks, (rank+1)·B/nranks) of global batch `step` into
 * inputs and targets, each (B/nranks, T) row-major, targets[i][t] = the token after inputs[i][t].
 * nranks must divide B (COLLAGE_ERR_ARG otherwise, or for a missing validation split). With nranks = 1
 * it is the whole global batch; the ranks' slices, stacked in rank order, are exactly that batch. */
collage_status collage_loader_batch(const collage_loader *l, collage_split s, uint64_t step, int rank,
                                    int nranks, int32_t *inputs, int32_t *targets);
/* A 64-bit hash of everything batches depend on (both splits' tokens, B, T, seed, sequential): store it
 * with a checkpoint and compare on resume. */
uint64_t       collage_loader_fingerprint(const collage_loader *l);

#ifdef __cplusplus
}
#endif
#endif
