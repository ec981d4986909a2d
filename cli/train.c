/* train.c — `collage train`: its help, its flags (train_flags.c: each checked against its range by itself;
 * the settings of a resumed run); the output paths checked before anything is computed; then the run (train_loop.c),
 * which steps, prints (train_report.c), saves checkpoints and stops cleanly on a signal or when the
 * run diverges. Data parallel under mpirun through dist.c's transport. */
#include "cli.h"
#include "dist.h"
#include "train.h"
#include "collage_data.h"
#include "collage_model.h"
#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


void train_usage(FILE *f) {
    fprintf(f,
            "usage: collage train [options]\n"
            "  --data PATH         text file, folder of text files, or llm.c .bin shard(s)\n"
            "                      (default: the English fortunes of Debian's fortunes package)\n"
            "  --tokenizer NAME    byte (default) | gpt2\n"
            "  --model PRESET      %s (default: tiny);\n"
            "                      gpt2 and llama presets: next-token loss; bert-tiny, bert-base: masked-LM loss\n"
            "                      (15%% of the tokens masked per step, validation on a fixed mask with the\n"
            "                      masked tokens' accuracy)\n"
            "  --layers N --heads N --dim N   the preset's shape changed: layers (%s), attention heads\n"
            "                      (%s), width (%s, a multiple of --heads)\n"
            "  --kv-heads N --hidden N   LLaMA presets only: key/value heads (%s, dividing --heads)\n"
            "                      and the MLP's width (%s)\n"
            "  --init PATH         start from the weights (and shape) of a model file (llm.c GPT-2, llama2.c,\n"
            "                      collbert) or of a folder transformers' save_pretrained wrote\n"
            "                      (GPT2LMHeadModel, LlamaForCausalLM, BertForMaskedLM: config.json and\n"
            "                      model.safetensors or its shards, BF16 or F32); a config collage cannot\n"
            "                      compute exactly (another activation, biases, rope scaling) is refused\n"
            "  --precision S       collage-light (default) or any strategy of the table:\n"
            "                      %s\n"
            "                      or a composition PRESET+m=F,v=F[,q=sr]: the preset's weights with m and v\n"
            "                      in F = fp32 | bf16 | mcf (v only) | fp16 | fp16-mcf (v only) | int8 | e4m3,\n"
            "                      q=sr re-quantizing 8-bit states stochastically, e.g. collage-light+m=int8,v=int8\n"
            "                      (docs/numerics.md §6). The fp16 strategies train the fp16-storage model with\n"
            "                      dynamic loss scaling (computed in fp32 on fp16-rounded values: an accuracy\n"
            "                      study, not a speed claim)\n"
            "  --compute C         bf16 (default) | fp8: every linear layer's products on fp8 operands (bf16\n"
            "                      strategies; every family; docs/numerics.md §13); a step whose fp8 operand\n"
            "                      holds NaN or Inf is skipped\n"
            "  --fp8-recipe R      fp8 scaling: delayed (default) | current | block | mxfp8\n"
            "  --fp8-e4m3-all      fp8: the gradients in e4m3 too (default e5m2)\n"
            "  --compute fp4       every linear layer's products on 4-bit operands (bf16 strategies; every\n"
            "                      family; docs/numerics.md §15), gradients rounded stochastically\n"
            "  --fp4-recipe R      nvfp4 (default) | mxfp4, each optionally ,hadamard (the 16x16 random\n"
            "                      Hadamard transform on the weight gradient's inputs), then optionally ,rn\n"
            "                      (the gradients rounded to nearest: an ablation of the recipe's SR)\n"
            "  --fp4-bf16-last N   fp4: the last N linear layers (the logits' first) keep bf16 products\n"
            "  --steps N           training steps, the length of the schedule (default 1000)\n"
            "  --stop-after N      stop after N steps (the schedule still spans --steps)\n"
            "  --batch B --seq T   sequences per step and their length (default 16, 64)\n"
            "  --lr X --warmup N   peak learning rate (1e-3) after N linear warm-up steps (default steps/20),\n"
            "                      then cosine decay to a tenth\n"
            "  --beta1 X --beta2 X --eps X --wd X --clip X   AdamW (0.9, 0.95, 1e-8, 0.1, 1.0); lion reads all\n"
            "                      but --eps, sgd only --wd and --clip: a flag the optimizer does not read is refused\n"
            "  --optimizer NAME    adamw (default) | lion | sgd: the update rule, which the precision strategy\n"
            "                      stores and applies (lion and sgd keep m only: docs/numerics.md §14);\n"
            "                      lion takes --beta1 --beta2 (0.9, 0.99) and about a third of AdamW's --lr\n"
            "  --momentum X --nesterov   sgd: the momentum μ (0.9) and Nesterov's form; its --wd is L2\n"
            "  --seed N            weights and data order (default 1337)\n"
            "  --threads N         threads (1 to 4 x the cores; default: all cores)\n"
            "  --eval-every N      validation loss every N steps (default steps/10)\n"
            "  --save DIR          keep the run: a checkpoint folder DIR/step-N (model.bin in the family's\n"
            "                      format: llm.c, llama2.c, collbert; the optimizer state, train.state with checksums)\n"
            "                      every --save-every steps and at the end; a new run refuses a DIR that\n"
            "                      holds another run's\n"
            "  --save-every N      steps between checkpoints (default steps/10; 0: only at the end)\n"
            "  --keep K            newest checkpoints kept in DIR (%s, default 2)\n"
            "  --overwrite         let --save replace the checkpoints of another run in DIR\n"
            "  --resume DIR        continue a run saved with --save (its newest checkpoint), bit for bit;\n"
            "                      --lr --warmup --eps --wd --clip --steps may change (with a note)\n"
            "  --max-skips K       stop when K steps in a row have a non-finite gradient (default 10);\n"
            "                      a non-finite loss stops the run at once\n"
            "  --loss-scale X      fp16 strategies: the first dynamic loss scale (default 65536; doubled after 200\n"
            "                      finite steps, halved on an overflow, whose step is skipped; logged); refused\n"
            "                      with the other strategies and with --resume (the checkpoint's scale goes on)\n"
            "  --log FILE          one JSON object per step\n"
            "  --summary FILE      one JSON object for the whole run, written atomically at its end\n"
            "  --accum A           micro-batches per rank per step (%s, default 1): the gradient of the batch is\n"
            "                      summed over ranks x A micro-batches in a fixed order\n"
            "  --quiet             no progress, no notes: errors only\n"
            "Ctrl-C or SIGTERM: the step finishes, a checkpoint is saved (with --save), the run exits with\n"
            "130 or 143; a second signal exits at once. A diverged run exits with 3 and saves nothing.\n"
            "data parallel: mpirun -np N collage train ... (--batch stays the global batch; each rank reads\n"
            "its 1/N of it and holds 1/N of the optimizer state; see docs/training.md)\n",
            cli_preset_names(" | "), train_range_of("--layers"), train_range_of("--heads"), train_range_of("--dim"), train_range_of("--kv-heads"),
            train_range_of("--hidden"), cli_strategy_names(" | ", 22), train_range_of("--keep"), train_range_of("--accum"));
}

/* ---------------------------------------------------------------- output paths, before any work */
/* A file that will be written at the end: a temporary beside it must be creatable now. */
static int check_out_file(const char *flag, const char *path) {
    char err[1024];
    collage_atomic_file af;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "collage train: %s '%s' is a folder, not a file\nhint: %s takes a file name, e.g. %s/summary.json\n",
                flag, path, flag, path);
        return -1;
    }
    if (collage_atomic_open(&af, path, err, sizeof err) == COLLAGE_OK) { collage_atomic_abort(&af); return 0; }
    fprintf(stderr, "collage train: %s '%s' cannot be written: %s\nhint: a path in a writable folder\n", flag, path, err);
    return -1;
}

/* The --save folder's lock, held from the check of the folder to the end of the run. */
static collage_folder_lock *g_lock;

/* One run per --save folder: its lock, before anything there is looked at or removed. 0, or -1 printed. */
static int lock_folder(const train_opts *o) {
    char err[1024];
    long stale = 0;
    collage_status st = collage_folder_lock_take(o->save, &g_lock, &stale, err, sizeof err);
    if (st == COLLAGE_ERR_BUSY) {
        fprintf(stderr, "collage train: --save: %s\nhint: wait for that run to end or stop it, or --save another folder; "
                        "two runs saving into one folder would remove each other's checkpoints\n", err);
        return -1;
    }
    if (st) { fprintf(stderr, "collage train: --save: %s\nhint: --save takes a folder you can write to\n", err); return -1; }
    if (stale)
        fprintf(stderr, "collage train: note: '%s' was locked by pid %ld, which ended without releasing it (killed or "
                        "crashed); this run takes the folder over\n", o->save, stale);
    return 0;
}

/* --save, --log, --summary (rank 0): created or tested for writing; the log opened (appending: a
 * failing run truncates nothing). 0, or -1 (message printed); the exit status in *rc. */
static int check_outputs(const train_opts *o, FILE **logf, int *rc) {
    char err[1024];
    *rc = 1;
    if (o->save && lock_folder(o)) return -1;
    if (o->save) {
        collage_status st = collage_checkpoint_check_folder(o->save, o->resume, o->overwrite, err, sizeof err);
        if (st == COLLAGE_ERR_ARG) {
            fprintf(stderr, "collage train: --save: %s\nhint: --resume %s continues the run saved there, --overwrite "
                            "replaces it, or --save another folder\n", err, o->save);
            *rc = 2;
            return -1;
        }
        if (st) { fprintf(stderr, "collage train: --save: %s\nhint: --save takes a folder you can write to\n", err); return -1; }
    }
    if (o->summary && check_out_file("--summary", o->summary)) return -1;
    if (o->log && !(*logf = fopen(o->log, "a"))) {
        fprintf(stderr, "collage train: --log '%s' cannot be written: %s\nhint: a path in a writable folder\n", o->log,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* --kv-heads and --hidden shape a LLaMA only: the other families would ignore them (BERT) or refuse
 * them without naming the flag (GPT-2). 0 or 2 (printed). */
static int llama_only(const train_opts *o) {
    const char *flag = o->given & COLLAGE_RUN_KV_HEADS ? "--kv-heads" : o->given & COLLAGE_RUN_HIDDEN ? "--hidden" : NULL;
    const char *preset = o->cfg.model ? o->cfg.model : "tiny";
    collage_model_config c;
    if (!flag || o->cfg.init || collage_model_preset(preset, &c) != COLLAGE_OK || c.family == COLLAGE_FAMILY_LLAMA)
        return 0;
    fprintf(stderr, "collage train: %s with --model %s: a %s model has no %s; only the LLaMA presets take it\nhint: drop "
                    "%s, or --model llama-tiny\n", flag, preset, collage_family_name(c.family),
            flag[2] == 'k' ? "key/value heads of its own (its attention is multi-head)" : "MLP width of its own (4 x --dim)",
            flag);
    return 2;
}

/* --init: the model file gives the run its shape; a preset or a size flag beside it would be ignored.
 * 0 or 2 (printed). */
static int init_shaped(const train_opts *o) {
    static const struct { unsigned bit; const char *flag; } SHAPE[] = {
        {COLLAGE_RUN_MODEL, "--model"}, {COLLAGE_RUN_LAYERS, "--layers"}, {COLLAGE_RUN_HEADS, "--heads"},
        {COLLAGE_RUN_DIM, "--dim"}, {COLLAGE_RUN_KV_HEADS, "--kv-heads"}, {COLLAGE_RUN_HIDDEN, "--hidden"},
    };
    for (size_t i = 0; o->cfg.init && i < sizeof SHAPE / sizeof *SHAPE; i++)
        if (o->given & SHAPE[i].bit) {
            fprintf(stderr, "collage train: %s with --init '%s': the model in that file gives the run its shape and "
                            "family\nhint: drop %s, or drop --init to start a %s model from its initialisation\n",
                    SHAPE[i].flag, o->cfg.init, SHAPE[i].flag, SHAPE[i].bit == COLLAGE_RUN_MODEL ? "preset" : "preset's");
            return 2;
        }
    return 0;
}

/* Flags that only make sense together, and the defaults that depend on others. 0 or 2 (printed). */
static int settle(train_opts *o) {
    const char *lone = o->overwrite ? "--overwrite" : o->keep ? "--keep" : o->save_every >= 0 ? "--save-every" : NULL;
    if (lone && !o->save) {
        fprintf(stderr, "collage train: %s without --save: nothing is saved\nhint: --save DIR %s\n", lone, lone);
        return 2;
    }
    if (init_shaped(o) || llama_only(o)) return 2;
    if (o->cfg.warmup > o->cfg.steps) {
        fprintf(stderr, "collage train: --warmup %d is longer than --steps %d: the learning rate would never reach --lr\n"
                        "hint: --warmup %d or less (default: steps / 20)\n", o->cfg.warmup, o->cfg.steps, o->cfg.steps);
        return 2;
    }
    if (o->keep) o->cfg.keep = o->keep;
    if (o->stop_after > o->cfg.steps && !o->quiet)
        fprintf(stderr, "collage train: --stop-after %d is beyond --steps %d: the run stops at step %d\n", o->stop_after,
                o->cfg.steps, o->cfg.steps);
    if (o->stop_after <= 0 || o->stop_after > o->cfg.steps) o->stop_after = o->cfg.steps;
    if (o->eval_every < 0) o->eval_every = o->cfg.steps / 10 > 0 ? o->cfg.steps / 10 : 1; /* of --steps as given */
    if (o->save_every < 0) o->save_every = o->cfg.steps / 10 > 0 ? o->cfg.steps / 10 : 1;
    const int M = dist_size() * (o->cfg.accum > 0 ? o->cfg.accum : 1);
    if (o->cfg.batch % M != 0) {
        if (dist_rank() == 0)
            fprintf(stderr, "collage train: --batch %d must split into %d ranks x %d micro-batches (--accum) of equal "
                            "size\nhint: a --batch that is a multiple of %d\n", o->cfg.batch, dist_size(), M / dist_size(), M);
        return 2;
    }
    return 0;
}

/* Out of memory creating the run: --seq beyond the preset's context grows the model to --seq positions,
 * and attention's scores grow as batch x seq², so a --seq past the context is named first. */
static const char *nomem_hint(const train_opts *o) {
    static char buf[320];
    collage_model_config c;
    const char *preset = o->cfg.model ? o->cfg.model : "tiny";
    if (!o->cfg.init && !o->resume && collage_model_preset(preset, &c) == COLLAGE_OK && o->cfg.seq > c.max_seq_len)
        snprintf(buf, sizeof buf, "--seq %d is beyond --model %s's context of %d: the model grows to %d positions and its "
                                  "attention scores to batch x seq² = %.3g; --seq %d or less", o->cfg.seq, preset,
                 c.max_seq_len, o->cfg.seq, (double)o->cfg.batch * o->cfg.seq * o->cfg.seq, c.max_seq_len);
    else
        snprintf(buf, sizeof buf, "a smaller --batch or --seq (activations grow as batch x seq, attention's scores as "
                                  "batch x seq²), or a smaller --model");
    return buf;
}

/* A failed collage_run_create: its message with the flag it concerns and a hint that fits; the exit
 * status (2 when a flag is to change, 1 for a file). */
static int create_failed(const train_opts *o, collage_status st, const char *err) {
    char flag[64] = "";
    const char *hint = cli_hint(st), *data = o->cfg.data, *shard = cli_shard_hint(err, o->cfg.tokenizer, 0);
    int rc = st == COLLAGE_ERR_ARG ? 2 : 1, ctx = 0;
    const char *ctx_at;
    char seq_hint[320];
    if (strstr(err, "fewer than")) {
        snprintf(flag, sizeof flag, "--seq %d --batch %d: ", o->cfg.seq, o->cfg.batch);
        hint = "a smaller --seq or --batch, or a longer corpus (--data)";
        rc = 2;
    } else if (shard) {
        snprintf(flag, sizeof flag, "--data: ");
        hint = shard;
        rc = strstr(shard, "the shard is damaged") ? 1 : 2; /* a damaged file, or another --tokenizer */
    } else if (strstr(err, "encoder.json")) { /* the GPT-2 tokenizer's files are missing */
        hint = "scripts/gpt2-vocab.sh installs the GPT-2 vocabulary (scripts/setup.sh runs it), or set $" COLLAGE_GPT2_VOCAB_ENV;
    } else if (strstr(err, "tokenizer has")) { /* --init: a model of another vocabulary */
        snprintf(flag, sizeof flag, "--tokenizer: ");
        hint = "the tokenizer of the model's vocabulary: --tokenizer gpt2 for 50257 symbols, byte for 256";
    } else if (strstr(err, "the data differ")) {
        snprintf(flag, sizeof flag, "--data: ");
        hint = "--resume continues on the data the run was saved with: the same --data (its --tokenizer is the checkpoint's)";
    } else if ((ctx_at = strstr(err, "max_seq_len ")) && sscanf(ctx_at, "max_seq_len %d", &ctx) == 1) {
        snprintf(flag, sizeof flag, "--seq %d: ", o->cfg.seq);
        snprintf(seq_hint, sizeof seq_hint, "--seq %d is beyond the context of the model in '%s' (%d positions); --seq %d "
                 "or less", o->cfg.seq, o->resume ? o->resume : o->cfg.init ? o->cfg.init : "?", ctx, ctx);
        hint = seq_hint;
        rc = 2;
    } else if (st == COLLAGE_ERR_NOMEM) {
        snprintf(flag, sizeof flag, "--model %s --batch %d --seq %d: ", o->cfg.model ? o->cfg.model : "tiny", o->cfg.batch,
                 o->cfg.seq);
        hint = nomem_hint(o);
    } else if (strstr(err, "tokenizer")) {
        snprintf(flag, sizeof flag, "--tokenizer: ");
        hint = "--tokenizer byte or gpt2";
    } else if (strstr(err, "unknown model")) {
        snprintf(flag, sizeof flag, "--model: ");
        hint = "collage train --help lists the presets";
    } else if (o->cfg.init && strstr(err, o->cfg.init)) {
        snprintf(flag, sizeof flag, "--init: ");
        hint = collage_model_is_hf_folder(o->cfg.init) ? CLI_HF_HINT
                                                       : "--init takes a model file (llm.c GPT-2, llama2.c, collbert) or a "
                                                         "Hugging Face folder (config.json, model.safetensors)";
    } else if (o->resume && strstr(err, o->resume)) {
        snprintf(flag, sizeof flag, "--resume: ");
        hint = "--resume takes a folder written by --save, or one of its step-N folders";
    } else if (data ? strstr(err, data) != NULL : st == COLLAGE_ERR_IO) {
        snprintf(flag, sizeof flag, "--data: ");
        hint = data ? "--data takes a text file, a folder of text files or .bin shards (without it: the fortunes)"
                    : "install Debian's fortunes package (scripts/setup.sh does), or pass --data PATH";
    } else if (st == COLLAGE_ERR_ARG && strstr(err, "fp4")) {
        hint = "--compute fp4 takes a bf16 strategy (collage-light, collage-plus, bf16, bf16-sr, bf16-master…), "
               "--fp4-recipe nvfp4 | mxfp4 (each optionally ,hadamard, then ,rn) and --fp4-bf16-last within the model's linear layers";
    } else if (st == COLLAGE_ERR_ARG && strstr(err, "fp8")) {
        hint = "--compute fp8 takes a bf16 strategy (collage-light, collage-plus, bf16, bf16-sr, bf16-master…) and "
               "--fp8-recipe delayed | current | block | mxfp8";
    } else if (st == COLLAGE_ERR_ARG && strstr(err, "is 0 in fp16")) {
        snprintf(flag, sizeof flag, "--eps: ");
        hint = "--eps 1e-4 (fp16 training's usual eps), or --precision fp16-master (its v in fp32)";
    } else if (st == COLLAGE_ERR_ARG && strstr(err, "heavy-ball")) {
        snprintf(flag, sizeof flag, "--momentum: ");
        hint = "eco with sgd takes --momentum above 0 (0.9) and no --nesterov; or --precision bf16-sr";
    } else if (st == COLLAGE_ERR_ARG && strstr(err, "nesterov")) {
        snprintf(flag, sizeof flag, "--nesterov: ");
        hint = "--nesterov takes a --momentum above 0, or drop --nesterov";
    } else if (st == COLLAGE_ERR_ARG && strstr(err, "shape")) {
        hint = "the shape flags: --dim a multiple of --heads, --heads of --kv-heads (collage train --help)";
    }
    fprintf(stderr, "collage train: %s%s\nhint: %s\n", flag, err, hint);
    return rc;
}

/* --init's model read before any output is made: a file or folder collage cannot read leaves no --save
 * folder, log or summary behind. 0, or the exit status (message printed). */
static int init_readable(const train_opts *o) {
    char err[1024];
    collage_model_config c;
    const collage_status st = collage_model_read_header(o->cfg.init, &c, NULL, err, sizeof err);
    return st == COLLAGE_OK ? 0 : create_failed(o, st, err);
}

/* Flags, a resumed run's settings, the output paths, the run: 0 with *run set, or the exit status with
 * *run NULL (0: --help, or a complete run resumed). *own: this rank printed a failure of its own. */
static int train_setup(int argc, char **argv, train_opts *o, FILE **logf, collage_run **run, int *own) {
    int rc = train_parse(argc, argv, o);
    *own = rc < 0;
    if (rc) return rc > 0 ? 0 : 2;
    cli_set_threads(o->threads);
    train_signals_install(o->threads); /* from here a signal stops the run after its step */
    if (dist_rank() != 0) o->quiet = 1; /* only rank 0 prints, logs and writes the summary */
    rc = o->resume ? train_resume_config(o) : 0;
    *own = rc != 0 && rc != NOTHING_TO_DO;
    if (rc == NOTHING_TO_DO && o->save && dist_rank() == 0) { /* a complete run: what a killed last save left goes */
        char err[1024];
        collage_checkpoint_check_folder(o->save, o->resume, o->overwrite, err, sizeof err);
    }
    if (dist_any(rc != 0)) return rc == NOTHING_TO_DO ? 0 : rc ? rc : 1;
    if ((rc = settle(o)) != 0 || (o->cfg.init && (rc = init_readable(o)) != 0)) { *own = 1; return rc; }
    if (dist_any(dist_rank() == 0 && check_outputs(o, logf, &rc))) {
        *own = dist_rank() == 0;
        return dist_rank() == 0 ? rc : 1;
    }
    char err[1024];
    collage_status st = collage_run_create(&o->cfg, dist_comm(), o->resume, run, err, sizeof err);
    if (st == COLLAGE_OK) {
        if (!o->save && !o->quiet)
            fprintf(stderr, "collage train: no --save: the trained model will not be kept (--save DIR keeps it)\n");
        return 0;
    }
    *run = NULL;
    *own = st != COLLAGE_ERR_PEER;
    if (*own) return create_failed(o, st, err);
    if (dist_rank() == 0) fprintf(stderr, "collage train: %s\nhint: %s\n", err, cli_hint(st));
    return 1;
}

/* Under mpirun a failure is printed once, by the lowest rank it happened on (dist_release_errors). */
static int train_main(int argc, char **argv) {
    train_opts o;
    FILE *logf = NULL;
    collage_run *run = NULL;
    int own = 0;
    dist_hold_errors();
    int rc = train_setup(argc, argv, &o, &logf, &run, &own);
    dist_release_errors(own);
    if (run) {
        dist_hold_errors();
        rc = train_run(run, &o, &logf);
        dist_release_errors(train_own_error());
    }
    if (logf) fclose(logf);
    collage_run_free(run);
    collage_folder_lock_release(g_lock);
    g_lock = NULL;
    return rc;
}

int cmd_train(int argc, char **argv) {
    if (dist_init(&argc, &argv) != 0) {
        fprintf(stderr, "collage train: MPI could not start\nhint: check that mpirun --version runs; docs/training.md, "
                        "\"Data parallel over MPI\"\n");
        return 1;
    }
    /* The library runs its matrix products as single-threaded BLAS tiles on its own threads; with
     * OpenBLAS at one thread from the start, no model call has to switch it and back. */
    openblas_set_num_threads(1);
    int rc = train_main(argc, argv);
    dist_finalize();
    return rc;
}
