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

/* Parse a non-negative integer / a double for flag `flag`; on error print a hint and return -1. */
int cli_parse_size(const char *flag, const char *s, size_t *out);
int cli_parse_int(const char *flag, const char *s, int *out);
int cli_parse_double(const char *flag, const char *s, double *out); /* finite */
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
/* The names of every precision strategy, in table order, parted by sep (the help texts and hints);
 * indent > 0: lines of at most 100 columns, continued after indent spaces. */
const char *cli_strategy_names(const char *sep, int indent);
/* The model presets of every family, in table order, parted by sep. */
const char *cli_preset_names(const char *sep);
/* The hint after a checkpoint that cannot be read (export, eval, sample, fill). */
#define CLI_CHECKPOINT_HINT "--checkpoint takes a model file (llm.c GPT-2, llama2.c, collbert) or a folder written by " \
                            "train --save; a damaged checkpoint's older one is in the same run folder (step-N)"
/* What the user can do about a failed library call, by its status (one line, no newline). */
const char *cli_hint(collage_status st);
/* mkdir -p: create path and every missing folder above it; 0 or -1 with errno. */
int cli_mkdir_p(const char *path);
#endif
