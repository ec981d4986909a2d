/* main.c — the `collage` command: dispatches subcommands, prints help and version. */
#include "cli.h"
#include "bench.h"
#include "collage_data.h"
#include "collage_model.h"
#include "dist.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static void usage(FILE *f) {
    fprintf(f,
            "collage %s — pure 16-bit training with multi-component floats (Collage)\n"
            "\n"
            "usage: collage <command> [options]\n"
            "\n"
            "commands (each takes --help; a bad flag exits with 2, a bad file or a failed run with 1;\n"
            "train also: 3 when the run diverged, 128 + the signal when one stopped it):\n"
            "  train [--data PATH] [--model PRESET] [--precision STRATEGY] [--steps N] [--save DIR] ...\n"
            "                  train a GPT-2 or LLaMA model (next token) or a BERT (--model bert-tiny:\n"
            "                  masked LM) on text (default: the fortunes corpus), a checkpoint every\n"
            "                  --save-every steps; --resume DIR continues; data parallel: mpirun -np N\n"
            "  compare [--precision LIST|all] [--beta2 LIST] [--seeds N] [--steps N] [--out DIR] ...\n"
            "                  train every strategy x beta2 x seed side by side on the same data\n"
            "                  and weights; results.csv, report.md and plots; resumable\n"
            "  eval --checkpoint PATH [--data PATH] [--split val|train|all] [--batches N] [--json]\n"
            "                  mean loss of a checkpoint on the held-out data (or another split; BERT:\n"
            "                  the masked tokens' loss and accuracy)\n"
            "  sample --checkpoint PATH [--prompt TEXT] [--tokens N] [--temperature X] [--seed N]\n"
            "                  generate text from a GPT-2 or LLaMA checkpoint\n"
            "  fill --checkpoint PATH --text \"The [MASK] sat\" [--top K] [--threads N] [--json]\n"
            "                  a BERT checkpoint's top predictions for each [MASK]\n"
            "  export --checkpoint PATH --out DIR [--format safetensors] [--dtype bf16|fp32]\n"
            "                  the model as model.safetensors + config.json in Hugging Face's layout\n"
            "                  (GPT2LMHeadModel, LlamaForCausalLM, BertForMaskedLM), for PyTorch code\n"
            "  tokenize [--tokenizer byte|gpt2] [--in PATH] --out FILE [--vocab-dir DIR]\n"
            "                  text to an llm.c token shard\n"
            "  bench convert [--n N] [--threads T] [--reps R] [--json]\n"
            "                  row conversion throughput (fp32<->bf16/fp16, RN and SR)\n"
            "                  against a plain memory copy measured in the same run\n"
            "  bench optimizer [--params N] [--threads T] [--reps R] [--precision S] [--json]\n"
            "                  the fused AdamW step per precision strategy against the\n"
            "                  memory-bandwidth bound measured in the same run\n"
            "  bench model [--model PRESET[,PRESET]] [--batch B] [--seq T] [--steps N] [--warmup W]\n"
            "              [--precision S] [--threads T] [--json]\n"
            "                  training step per strategy: tokens/s, model FLOP/s vs sgemm\n"
            "\n"
            "options:\n"
            "  -h, --help      this help\n"
            "  -V, --version   print the version\n",
            collage_version());
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_parse_size(const char *cmd, const char *flag, const char *s, size_t *out) {
    char *end;
    errno = 0;
    if (!s) return cli_needs_value(cmd, flag);
    unsigned long long v = strtoull(s, &end, 10);
    double mult = 1;
    if (*end == 'K' || *end == 'k') { mult = 1e3; end++; }
    else if (*end == 'M' || *end == 'm') { mult = 1e6; end++; }
    else if (*end == 'G' || *end == 'g') { mult = 1e9; end++; }
    if (errno || *end || s[0] == '-' || end == s) {
        fprintf(stderr, "collage %s: %s expects a non-negative integer (e.g. 64M), got '%s'\nhint: collage %s --help\n", cmd,
                flag, s, cmd);
        return -1;
    }
    *out = (size_t)((double)v * mult);
    return 0;
}

int cli_parse_int(const char *cmd, const char *flag, const char *s, int *out) {
    size_t v;
    if (cli_parse_size(cmd, flag, s, &v)) return -1;
    if (v > 1000000) {
        fprintf(stderr, "collage %s: %s %s: it takes at most 1000000\nhint: collage %s --help\n", cmd, flag, s, cmd);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int cli_parse_double(const char *cmd, const char *flag, const char *s, double *out) {
    char *end;
    if (!s) return cli_needs_value(cmd, flag);
    errno = 0;
    double x = strtod(s, &end);
    if (errno || *end || end == s || !isfinite(x)) {
        fprintf(stderr, "collage %s: %s expects a finite number, got '%s'\nhint: collage %s --help\n", cmd, flag, s, cmd);
        return -1;
    }
    *out = x;
    return 0;
}

int cli_needs_value(const char *cmd, const char *flag) {
    fprintf(stderr, "collage %s: %s needs a value\nhint: collage %s --help\n", cmd, flag, cmd);
    return -1;
}

const char *const cli_fp4_recipes[CLI_FP4_RECIPES] = {"nvfp4",    "nvfp4,hadamard",    "mxfp4",    "mxfp4,hadamard",
                                                     "nvfp4,rn", "nvfp4,hadamard,rn", "mxfp4,rn", "mxfp4,hadamard,rn"};
int cli_check_fp4_recipe(const char *cmd, const char *v) {
    for (int i = 0; i < CLI_FP4_RECIPES; i++)
        if (!strcmp(v, cli_fp4_recipes[i])) return 0;
    fprintf(stderr, "collage %s: --fp4-recipe %s: unknown\nhint: --fp4-recipe takes nvfp4 or mxfp4, each optionally "
                    "followed by ,hadamard, then optionally ,rn (e.g. nvfp4,hadamard or nvfp4,hadamard,rn)\n", cmd, v);
    return -1;
}

int cli_unknown(const char *cmd, const char *arg) {
    fprintf(stderr, "collage %s: unknown option '%s'\nhint: collage %s --help lists its flags\n", cmd, arg, cmd);
    return -1;
}

const char *cli_checkpoint_hint(const char *arg) {
    return collage_model_is_hf_folder(arg) ? CLI_HF_HINT : CLI_CHECKPOINT_HINT;
}

int cli_path(const char *cmd, const char *flag, const char *v) {
    if (!v) return cli_needs_value(cmd, flag);
    if (v[0]) return 0;
    fprintf(stderr, "collage %s: %s '': an empty path (an unset variable?); nothing was read or written\n"
                    "hint: set the variable, or give %s a path (collage %s --help)\n", cmd, flag, flag, cmd);
    return -1;
}

int cli_max_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return 4 * (int)(n > 0 ? n : 1);
}

void cli_set_threads(int n) {
    if (n <= 0) return;
    collage_set_threads(n);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
}

int cli_parse_range(const char *cmd, const char *flag, const char *s, int min, int max, int *out) {
    if (cli_parse_int(cmd, flag, s, out)) return -1;
    if (*out >= min && *out <= max) return 0;
    if (max == INT_MAX) fprintf(stderr, "collage %s: %s %s: it takes %d or more\n", cmd, flag, s, min);
    else fprintf(stderr, "collage %s: %s %s: it takes %d to %d\n", cmd, flag, s, min, max);
    fprintf(stderr, "hint: collage %s --help\n", cmd);
    return -1;
}

int cli_parse_threads(const char *cmd, const char *s, int *out) {
    if (cli_parse_int(cmd, "--threads", s, out)) return -1;
    int max = cli_max_threads();
    if (*out >= 1 && *out <= max) return 0;
    fprintf(stderr, "collage %s: --threads %s: it takes 1 to %d (4 x the %d cores)\nhint: collage %s --help\n", cmd, s, max,
            max / 4, cmd);
    return -1;
}

int cli_parse_strategy(const char *cmd, const char *flag, const char *s, collage_strategy *out) {
    if (!s || collage_strategy_parse(s, out) != COLLAGE_OK) {
        fprintf(stderr, "collage %s: %s '%s': %s\nhint: one of %s, or a composition PRESET+m=F,v=F[,q=sr] such as "
                        "collage-light+m=int8,v=int8 (collage train --help)\n", cmd, flag, s ? s : "",
                s ? collage_strategy_parse_error() : "needs a value", cli_strategy_names(", ", 0));
        return -1;
    }
    if (!strcmp(flag, "--strategy")) fprintf(stderr, "collage %s: note: --strategy is spelled --precision now\n", cmd);
    return 0;
}

int cli_parse_optimizer(const char *cmd, const char *flag, const char *s, collage_optimizer *out) {
    if (s && collage_optimizer_parse(s, out) == COLLAGE_OK) return 0;
    fprintf(stderr, "collage %s: %s '%s': %s\nhint: adamw, lion or sgd\n", cmd, flag, s ? s : "",
            s ? "unknown optimizer" : "needs a value");
    return -1;
}

const char *cli_strategy_names(const char *sep, int indent) {
    static char buf[1024];
    size_t len = 0, line = 0;
    buf[0] = 0;
    for (int k = 0; k < COLLAGE_STRATEGY_COUNT && len < sizeof buf; k++) {
        const char *name = collage_strategy_name((collage_strategy)k);
        if (indent > 0 && k && line + strlen(sep) + strlen(name) > (size_t)(100 - indent)) {
            int w = (int)strlen(sep);
            while (w > 0 && sep[w - 1] == ' ') w--; /* no trailing blank before the break */
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%.*s\n%*s", w, sep, indent, "");
            line = 0;
        } else if (k) {
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s", sep);
            line += strlen(sep);
        }
        if (len < sizeof buf) len += (size_t)snprintf(buf + len, sizeof buf - len, "%s", name);
        line += strlen(name);
    }
    return buf;
}

const char *cli_preset_names(const char *sep) {
    static char buf[512];
    const char *const *p = collage_model_preset_names();
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; p[k] && len < sizeof buf; k++) len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", k ? sep : "", p[k]);
    return buf;
}

const char *cli_hint(collage_status st) {
    switch (st) {
    case COLLAGE_ERR_ARG: case COLLAGE_ERR_SIZE: return "--help lists the flags and their values";
    case COLLAGE_ERR_IO: return "check that the path named above exists and that you may read (or write) it";
    case COLLAGE_ERR_FORMAT: return "the file is damaged, or not of the kind the flag takes";
    case COLLAGE_ERR_NOMEM: return "more free memory than the machine has now: fewer programs beside it, or a larger machine";
    case COLLAGE_ERR_PEER: return "the failing rank's own message names the problem";
    case COLLAGE_ERR_BUSY: return "wait for that run to end or stop it, or use another folder";
    default: return "--help lists the flags";
    }
}

const char *cli_shard_hint(const char *err, const char *tok, int model_fixed) {
    static char buf[320];
    const int gpt2 = tok && !strcmp(tok, "gpt2"), own = gpt2 ? 50257 : 256;
    const char *p = strstr(err, "written for a vocabulary of ");
    unsigned ids = 0;
    if (p && sscanf(p, "written for a vocabulary of %u", &ids) == 1) { /* the shard's header names its tokenizer */
        const char *reader = ids == 50257 ? "gpt2" : ids == 256 ? "byte" : NULL;
        if (reader && model_fixed)
            snprintf(buf, sizeof buf, "the shard holds %s ids and the model reads %s ones: --data a text corpus, or a shard "
                                      "written by collage tokenize --tokenizer %s", reader, gpt2 ? "gpt2" : "byte",
                     gpt2 ? "gpt2" : "byte");
        else if (reader) snprintf(buf, sizeof buf, "the shard holds %s ids: --tokenizer %s reads it", reader, reader);
        else snprintf(buf, sizeof buf, "a shard of %u ids is of no tokenizer collage has (byte: 256, gpt2: 50257); "
                                       "collage tokenize writes one from text", ids);
        return buf;
    }
    if (strstr(err, "is outside the vocabulary")) { /* no vocabulary in its header (llm.c's), or a damaged shard */
        if (!gpt2 && !model_fixed)
            snprintf(buf, sizeof buf, "the shard holds ids beyond the byte tokenizer's 256: --tokenizer gpt2 reads GPT-2 "
                                      "shards (llm.c's); a shard of bytes with such an id is damaged");
        else if (!gpt2)
            snprintf(buf, sizeof buf, "the shard holds ids beyond the model's 256 (GPT-2's, or it is damaged): --data a "
                                      "text corpus, or a shard written by collage tokenize --tokenizer byte");
        else
            snprintf(buf, sizeof buf, "an id beyond GPT-2's %d: the shard is damaged; collage tokenize --tokenizer gpt2 "
                                      "writes it again from its text", own);
        return buf;
    }
    static const char *const damaged[] = {"truncated", "wrong magic", "wrong version", "trailing data",
                                          "negative token count", "file shrank"};
    for (size_t i = 0; i < sizeof damaged / sizeof *damaged; i++)
        if (strstr(err, damaged[i]))
            return "the shard is damaged, or not an llm.c token shard: collage tokenize writes one from text (a .bin "
                   "file is read as a shard)";
    return NULL;
}

const char *cli_data_name(const char *path) {
    static char buf[4200];
    if (path) return path;
    snprintf(buf, sizeof buf, "the fortunes corpus (%s)", COLLAGE_FORTUNES_DIR);
    return buf;
}

int cli_mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) { errno = ENAMETOOLONG; return -1; }
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
            *p = '/';
        }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    struct stat sb;
    if (stat(buf, &sb) != 0) return -1;
    if (!S_ISDIR(sb.st_mode)) { errno = ENOTDIR; return -1; } /* a file of that name */
    return 0;
}

void cli_exec_self(char **argv) {
    const char *path = (const char *)getauxval(AT_EXECFN);
    struct stat started, self;
    if (path && stat(path, &started) == 0 && stat("/proc/self/exe", &self) == 0 && started.st_dev == self.st_dev &&
        started.st_ino == self.st_ino)
        execv(path, argv);
    execv("/proc/self/exe", argv);
}

/* A process started through /proc/self/exe is named "exe" by the kernel (cli_exec_self's fallback, or
 * another program's): it takes the name of its argv[0] back, which ps, top, pgrep and pkill show. */
static void keep_name(char **argv) {
    char comm[17] = "";
    if (prctl(PR_GET_NAME, comm) != 0 || strcmp(comm, "exe") || !argv[0]) return;
    const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (*base && strcmp(base, "exe")) prctl(PR_SET_NAME, base);
}

/* OpenBLAS picks its kernels when it loads, by the CPUs it knows: on one it does not know it falls back
 * to SSE kernels. Then run again with OPENBLAS_CORETYPE set to what this CPU offers (once; a value the
 * user set is kept), and the products' header says so (collage_products_machine). COLLAGE_TEST_RUN_AGAIN=1
 * takes this path on any CPU, with the core type OpenBLAS picked (nothing else changes): the tests that
 * find and signal `collage` processes see both paths on every machine (docs/testing.md). */
static void openblas_coretype(char **argv) {
    const char *want = collage_openblas_coretype_wanted(), *test = getenv("COLLAGE_TEST_RUN_AGAIN");
    if (!want && test && !strcmp(test, "1")) want = collage_openblas_core();
    if (!want || getenv("OPENBLAS_CORETYPE") || getenv("COLLAGE_OPENBLAS_PICKED")) return;
    setenv("COLLAGE_OPENBLAS_PICKED", collage_openblas_core(), 1);
    setenv("OPENBLAS_CORETYPE", want, 1);
    cli_exec_self(argv); /* returns only on failure: go on, on the kernels OpenBLAS picked */
    unsetenv("OPENBLAS_CORETYPE");
}

int main(int argc, char **argv) {
    keep_name(argv);
    if (argc < 2) { usage(stderr); return 2; }
    openblas_coretype(argv);
    const char *pin = getenv("COLLAGE_GEMM");
    char perr[200];
    if (pin && *pin && collage_products_check(pin, perr, sizeof perr) != COLLAGE_OK) {
        fprintf(stderr, "collage: COLLAGE_GEMM=%s: %s\nhint: fp32=openblas|onednn|ref|auto,bf16=onednn|fma|widen|auto, "
                        "or ref; unset it to choose by measurement\n", pin, perr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) { usage(stdout); return 0; }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        char machine[4096], peak[256];
        collage_products_machine(machine, sizeof machine);
        collage_core_peak p;
        collage_core_peak_measure(1, &p);
        bench_peak_line(&p, peak, sizeof peak);
        printf("collage %s (%s MPI)\nproducts (docs/numerics.md §10):\n%s\n%s\n", collage_version(),
               dist_built_with_mpi() ? "with" : "without", machine, peak);
        return 0;
    }
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "compare")) return cmd_compare(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc - 2, argv + 2);
    if (!strcmp(cmd, "sample")) return cmd_sample(argc - 2, argv + 2);
    if (!strcmp(cmd, "export")) return cmd_export(argc - 2, argv + 2);
    if (!strcmp(cmd, "fill")) return cmd_fill(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return collage_cli_tokenize(argc - 2, argv + 2);
    fprintf(stderr, "collage: unknown command '%s'\nhint: run 'collage --help' for the list of commands\n", cmd);
    return 2;
}
