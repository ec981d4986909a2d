/* export.c — `collage export`: a checkpoint's model in another program's layout. safetensors with the
 * Hugging Face class's names and orientation plus its config.json (collage_model_export_safetensors). */
#include "cli.h"
#include "collage_run.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT_USAGE "usage: collage export --checkpoint PATH --out DIR [--format safetensors] [--dtype bf16|fp32]\n"

typedef struct { const char *ck, *out, *format, *dtype; } export_opts;

static int parse_export(int argc, char **argv, export_opts *o) {
    *o = (export_opts){.format = "safetensors"};
    for (int i = 0; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf(EXPORT_USAGE
                   "  --checkpoint PATH   a model file (llm.c GPT-2, llama2.c, collbert), a folder written by\n"
                   "                      train --save (its newest checkpoint) or a Hugging Face folder\n"
                   "  --out DIR           where model.safetensors and config.json go (created if missing)\n"
                   "  --format F          safetensors (the only one; Hugging Face's names and layout: GPT2LMHeadModel,\n"
                   "                      LlamaForCausalLM, BertForMaskedLM)\n"
                   "  --dtype D           bf16 or fp32 (default: the checkpoint's own; fp32 to bf16 rounds to nearest)\n");
            return 1;
        }
        if (!strcmp(a, "--checkpoint")) bad = cli_path("export", a, o->ck = v);
        else if (!strcmp(a, "--out")) bad = cli_path("export", a, o->out = v);
        else if (!strcmp(a, "--format")) o->format = v;
        else if (!strcmp(a, "--dtype")) o->dtype = v;
        else return cli_unknown("export", a);
        if (bad) return -1;
        if (!v) return cli_needs_value("export", a);
    }
    if (!o->ck || !o->out) {
        fprintf(stderr, "collage export: %s is required\nhint: " EXPORT_USAGE, !o->ck ? "--checkpoint PATH" : "--out DIR");
        return -1;
    }
    if (strcmp(o->format, "safetensors")) {
        fprintf(stderr, "collage export: unknown --format '%s'\nhint: safetensors is the format collage writes\n", o->format);
        return -1;
    }
    if (o->dtype && strcmp(o->dtype, "bf16") && strcmp(o->dtype, "fp32")) {
        fprintf(stderr, "collage export: unknown --dtype '%s'\nhint: bf16 or fp32\n", o->dtype);
        return -1;
    }
    return 0;
}

int cmd_export(int argc, char **argv) {
    export_opts o;
    int pr = parse_export(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;
    char path[4096], err[1024] = "";
    collage_checkpoint_model_path(o.ck, path, sizeof path); /* read_header checks a checkpoint's file */
    collage_model_config c;
    int file_bf16 = 0;
    if (collage_model_read_header(path, &c, &file_bf16, err, sizeof err) != COLLAGE_OK) {
        fprintf(stderr, "collage export: --checkpoint: %s\nhint: %s\n", err, cli_checkpoint_hint(o.ck));
        return 1;
    }
    const int bf16 = o.dtype ? !strcmp(o.dtype, "bf16") : file_bf16;
    const size_t n = collage_model_num_params(&c);
    void *params = malloc(n * (bf16 ? 2 : 4));
    if (!params) {
        fprintf(stderr, "collage export: no memory for the %zu parameters of '%s'\nhint: --dtype bf16 halves it\n", n, path);
        return 1;
    }
    collage_status st = collage_model_load_file(path, &c, params, bf16, err, sizeof err);
    if (st == COLLAGE_OK && cli_mkdir_p(o.out) != 0) {
        snprintf(err, sizeof err, "--out: cannot create the folder '%s': %s", o.out, strerror(errno));
        st = COLLAGE_ERR_IO;
    }
    if (st == COLLAGE_OK) st = collage_model_export_safetensors(o.out, &c, params, bf16, err, sizeof err);
    free(params);
    if (st != COLLAGE_OK) {
        fprintf(stderr, "collage export: %s\nhint: %s\n", err,
                st == COLLAGE_ERR_UNSUPPORTED ? "safetensors export knows GPT-2 (GPT2LMHeadModel), LLaMA (LlamaForCausalLM) and BERT (BertForMaskedLM) checkpoints"
                                              : cli_hint(st));
        return 1;
    }
    printf("wrote %s/model.safetensors (%zu parameters, %s) and %s/config.json\n", o.out, n, bf16 ? "BF16" : "F32", o.out);
    return 0;
}
