/* tokenize.c — `collage tokenize`: a text corpus (the default fortunes, a file or a folder) → one llm.c
 * token shard, written atomically, with the byte or the GPT-2 tokenizer. */
#include "cli.h"
#include "collage_data.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int collage_cli_tokenize(int argc, char **argv); /* argv: the arguments after "tokenize" */

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: collage tokenize [--tokenizer byte|gpt2] [--in PATH] --out FILE [--vocab-dir DIR]\n"
            "  --tokenizer T   byte (default: 256 ids, one per byte) or gpt2 (GPT-2's BPE, 50257 ids)\n"
            "  --in PATH       a text file, a folder of text files (name order) or .bin shards;\n"
            "                  default: the English fortunes in %s\n"
            "  --out FILE      the llm.c shard to write (magic 20240520, version 1, uint16 tokens)\n"
            "  --vocab-dir D   folder with GPT-2's encoder.json and vocab.bpe (default: $%s,\n"
            "                  then /usr/local/share/collage/gpt2, /usr/share/collage/gpt2)\n",
            COLLAGE_FORTUNES_DIR, COLLAGE_GPT2_VOCAB_ENV);
}

/* The hint that goes with a failed step: what the user can do about it. */
static const char *hint_for(collage_status st, const char *stage, const char *in, const char *err) {
    if (!strcmp(stage, "tokenizer"))
        return st == COLLAGE_ERR_IO ? "install the vocabulary with scripts/gpt2-vocab.sh (scripts/setup.sh runs it), "
                                      "set $" COLLAGE_GPT2_VOCAB_ENV " or pass --vocab-dir DIR"
                                    : "the vocabulary files are damaged: reinstall them with scripts/gpt2-vocab.sh";
    if (!strcmp(stage, "write")) return "--out takes a file name in a folder that exists and is writable";
    if (st == COLLAGE_ERR_IO && !in)
        return "install the Debian package 'fortunes' (scripts/setup.sh does) or pass --in PATH";
    if (st == COLLAGE_ERR_IO) return "check the path given to --in";
    if (st == COLLAGE_ERR_FORMAT && strstr(err, "vocabulary"))
        return "pass the --tokenizer the shard was written with (byte: 256 ids, gpt2: 50257)";
    if (st == COLLAGE_ERR_FORMAT) return "--in takes text, or .bin token shards as written by collage or llm.c";
    return "see 'collage tokenize --help'";
}

int collage_cli_tokenize(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *vocab_dir = NULL, *tok_name = "byte";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **dst = !strcmp(a, "--tokenizer") ? &tok_name : !strcmp(a, "--in") ? &in
                         : !strcmp(a, "--out") ? &out : !strcmp(a, "--vocab-dir") ? &vocab_dir : NULL;
        if (dst) {
            if (dst == &tok_name ? !v && cli_needs_value("tokenize", a) : cli_path("tokenize", a, v)) return 2;
            *dst = v;
            i++;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else {
            cli_unknown("tokenize", a);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "collage tokenize: --out FILE is required\nhint: e.g. collage tokenize --out fortunes.bin\n");
        return 2;
    }
    struct stat sb;
    if (stat(out, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "collage tokenize: --out '%s' is a folder, not a file\nhint: --out takes a file name, e.g. "
                        "%s/tokens.bin\n", out, out);
        return 1;
    }
    collage_tokenizer_kind kind;
    if (collage_tokenizer_kind_parse(tok_name, &kind)) {
        fprintf(stderr, "collage tokenize: unknown --tokenizer '%s'\nhint: --tokenizer byte or --tokenizer gpt2\n",
                tok_name);
        return 2;
    }
    char err[COLLAGE_ERR_LEN] = "";
    collage_tokenizer *tok = NULL;
    double t0 = cli_now();
    collage_status st = collage_tokenizer_create(kind, vocab_dir, &tok, err, sizeof err);
    if (st) {
        fprintf(stderr, "collage tokenize: %s%s\nhint: %s\n", vocab_dir ? "--vocab-dir: " : "", err,
                hint_for(st, "tokenizer", in, err));
        return 1;
    }
    collage_corpus_info info = {0};
    uint16_t *ids = NULL;
    size_t n = 0;
    const char *stage = "read";
    st = collage_corpus_tokens(in, tok, &ids, &n, &info, err, sizeof err);
    if (!st) {
        stage = "write";
        st = collage_shard_write(out, ids, n, collage_tokenizer_vocab_size(tok), err, sizeof err);
    }
    free(ids);
    collage_tokenizer_free(tok);
    if (st) {
        fprintf(stderr, "collage tokenize: %s%s\nhint: %s\n", !strcmp(stage, "write") ? "--out: " : in ? "--in: " : "", err,
                hint_for(st, stage, in, err));
        return 1;
    }
    if (info.shards)
        printf("collage tokenize: %zu tokens from %zu shard%s of %s -> %s (%s) in %.2f s\n", info.tokens, info.files,
               info.files == 1 ? "" : "s", cli_data_name(in), out, tok_name, cli_now() - t0);
    else
        printf("collage tokenize: %zu bytes in %zu file%s of %s -> %zu tokens (%s, %.2f bytes/token) -> %s in %.2f s\n",
               info.bytes, info.files, info.files == 1 ? "" : "s", cli_data_name(in), info.tokens, tok_name,
               info.tokens ? (double)info.bytes / (double)info.tokens : 0.0, out, cli_now() - t0);
    return 0;
}
