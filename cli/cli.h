/* cli.h — what the `collage` subcommands share: the entry points and small argument helpers. */
#ifndef COLLAGE_CLI_H
#define COLLAGE_CLI_H
#include "collage.h"

int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_fill(int argc, char **argv);
int collage_cli_tokenize(int argc, char **argv);

/* Every message of command cmd ("train", "bench model") starts "collage CMD: ", names the flag and the
 * problem, and is followed by a "hint: " line; a bad flag exits with 2, a bad file or a failed run with 1. */
/* Parse a non-negative integer / a double for flag `flag` of command cmd; -1 after a message. */
int cli_parse_size(const char *cmd, const char *flag, const char *s, size_t *out);
int cli_parse_int(const char *cmd, const char *flag, const char *s, int *out);
int cli_parse_double(const char *cmd, const char *flag, const char *s, double *out); /* finite */
/* "FLAG needs a value" / "unknown option ARG", with the hint; both return -1. */
int cli_needs_value(const char *cmd, const char *flag);
int cli_unknown(const char *cmd, const char *arg);
/* The fp4 recipes --fp4-recipe takes (docs/numerics.md §15), the first CLI_FP4_ALL of them compare's "all"
 * (the ,rn ablations after them); 0 when v is one of them, else -1 after a message. */
#define CLI_FP4_RECIPES 8
#define CLI_FP4_ALL 4
extern const char *const cli_fp4_recipes[CLI_FP4_RECIPES];
int cli_check_fp4_recipe(const char *cmd, const char *v);
/* A path given to flag: -1 after a message when it is missing or empty (an unset variable must not
 * mean the current folder, the root or the default corpus). */
int cli_path(const char *cmd, const char *flag, const char *v);
double cli_now(void);
/* An integer flag of command cmd in [min, max] (max INT_MAX: no bound); -1 after a message naming
 * the flag, the value and the range. */
int cli_parse_range(const char *cmd, const char *flag, const char *s, int min, int max, int *out);
/* --threads of command cmd: 1 to cli_max_threads(); -1 after a message naming the flag and range. */
int cli_parse_threads(const char *cmd, const char *s, int *out);
int cli_max_threads(void); /* 4 x the cores online */
/* The library's and OpenMP's thread count (n <= 0: leave the defaults, all cores). */
void cli_set_threads(int n);
/* A strategy by name for `flag` (--precision, or its older spelling --strategy, taken with a note). */
int cli_parse_strategy(const char *cmd, const char *flag, const char *s, collage_strategy *out);
/* --optimizer NAME: adamw, lion or sgd; -1 after a message naming the flag. */
int cli_parse_optimizer(const char *cmd, const char *flag, const char *s, collage_optimizer *out);
/* The names of every precision strategy, in table order, parted by sep (the help texts and hints);
 * indent > 0: lines of at most 100 columns, continued after indent spaces. */
const char *cli_strategy_names(const char *sep, int indent);
/* The model presets of every family, in table order, parted by sep. */
const char *cli_preset_names(const char *sep);
/* The hint after a checkpoint that cannot be read (export, eval, sample, fill). */
#define CLI_CHECKPOINT_HINT "--checkpoint takes a model file (llm.c GPT-2, llama2.c, collbert), a folder written by " \
                            "train --save (a damaged checkpoint's older one is in the same run folder, step-N) or a " \
                            "Hugging Face folder (config.json, model.safetensors)"
/* The hint after a Hugging Face folder collage cannot read (--checkpoint, --init). */
#define CLI_HF_HINT "collage reads the folders save_pretrained writes for GPT2LMHeadModel, LlamaForCausalLM and " \
                    "BertForMaskedLM, in BF16 or F32, whose config.json describes a model collage computes exactly " \
                    "(docs/python.md, \"Hugging Face transformers\")"
/* The hint after a checkpoint argument that cannot be read: CLI_HF_HINT for a Hugging Face folder. */
const char *cli_checkpoint_hint(const char *arg);
/* A flag of `collage train` (compare passes them on): 1 when it takes a value, 0 when bare, -1 unknown. */
int cli_train_flag(const char *flag);
/* Whether optimizer o reads train flag `flag`: 0 for an update rule's flag it does not read (--beta1 --beta2
 * --eps --momentum --nesterov: train_flags.c's table), else 1. */
int cli_optimizer_reads(collage_optimizer o, const char *flag);
/* -1 after a message of command cmd naming flag and optimizer o when o does not read flag (resume: the
 * checkpoint folder whose run trains with o, named in the message); else 0. */
int cli_refuse_unread(const char *cmd, const char *flag, collage_optimizer o, const char *resume);
/* The strategies with fp16 weights (those that scale their loss: --loss-scale), parted by " | ". */
const char *cli_fp16_names(void);
/* What the user can do about a failed library call, by its status (one line, no newline). */
const char *cli_hint(collage_status st);
/* The hint after a corpus that could not be read (err: the loader's message, which names the file): a token
 * shard of another tokenizer's ids names the --tokenizer that reads it (model_fixed: the tokenizer is the
 * model's, so the data must change instead), a damaged shard says so; NULL when err is about neither.
 * tok: the tokenizer's name (NULL: byte). */
const char *cli_shard_hint(const char *err, const char *tok, int model_fixed);
/* The data a command reads, for its header: the --data path, or the default corpus and its folder. */
const char *cli_data_name(const char *path);
/* mkdir -p: create path and every missing folder above it; 0, or -1 with errno (ENOTDIR: path is a file). */
int cli_mkdir_p(const char *path);
/* Runs this binary again with argv, as the user started it: by the path it was started from while that
 * is still this file (the new process keeps its name: comm, /proc/PID/exe, argv[0]), else through
 * /proc/self/exe (main then takes argv[0]'s name back). Returns only on failure (errno says why). */
void cli_exec_self(char **argv);
#endif
