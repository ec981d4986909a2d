/* straight_through.h — GPT-2's forward transcribed in fp64 with each linear layer's operands offset to
 * given dequantized values (F_ST of numerics.md §13 "What the fp8 backward is the gradient of"), central
 * differences of it, and the check of a low-precision model's gradient against them: shared by the fp8
 * and fp4 model tests. Included after harness.h, gpt2.h, model.h and nn.h. */
#ifndef COLLAGE_TEST_STRAIGHT_THROUGH_H
#define COLLAGE_TEST_STRAIGHT_THROUGH_H

#define ST_B 2
#define ST_T 8
#define ST_PICK 8
#define ST_H 1e-4          /* central difference step (error O(h^2): below 1e-6 relative here) */
#define ST_LIN_MAX 16      /* linear layers: 4 a block and the logits' */

typedef struct {
    int B, T, N, L, C, NH, V, Vp, nlin;
    size_t off[GPT2_NTENSORS], per[GPT2_NTENSORS];
    const int *tok, *tgt;
    double *xhat[ST_LIN_MAX], *cx[ST_LIN_MAX], *cw[ST_LIN_MAX]; /* per linear layer */
    double *res, *res2, *ln, *mean, *rstd, *qkv, *atty, *att, *scr, *fch, *fchg, *logits, *losses, *xin, *win;
} st_model;

/* Linear layer k of F_ST: out = (x + cx)·(w + cw)ᵀ + b; record: cx set first so that x + cx = x̂ here. */
static void st_linear(st_model *s, int k, int record, double *out, const double *x, const double *w, const double *b,
                      int Cin, int OC) {
    const size_t nx = (size_t)s->N * Cin, nw = (size_t)OC * Cin;
    if (record)
        for (size_t i = 0; i < nx; i++) s->cx[k][i] = s->xhat[k][i] - x[i];
    for (size_t i = 0; i < nx; i++) s->xin[i] = x[i] + s->cx[k][i];
    for (size_t i = 0; i < nw; i++) s->win[i] = w[i] + s->cw[k][i];
    nn_matmul_forward_f64(out, s->xin, s->win, b, s->N, Cin, OC, 0, 1);
}

/* F_ST's mean loss on w (GPT-2's forward of gpt2_graph.inc in double, its products through st_linear). */
static double st_loss(st_model *s, const double *w, int record) {
    const int C = s->C, N = s->N;
#define WL(k, l) (w + s->off[k] + (size_t)(l) * s->per[k])
    nn_encoder_forward_f64(s->res, s->tok, WL(GPT2_WTE, 0), WL(GPT2_WPE, 0), s->B, s->T, C, 0, 1);
    for (int l = 0; l < s->L; l++) {
        nn_layernorm_forward_f64(s->ln, s->mean, s->rstd, s->res, WL(GPT2_LN1W, l), WL(GPT2_LN1B, l), N, C, 0, 1);
        st_linear(s, 4 * l, record, s->qkv, s->ln, WL(GPT2_QKVW, l), WL(GPT2_QKVB, l), C, 3 * C);
        nn_attention_forward_f64(s->atty, s->att, s->scr, s->qkv, s->B, s->T, C, s->NH, 0, 1);
        st_linear(s, 4 * l + 1, record, s->res2, s->atty, WL(GPT2_ATTPROJW, l), NULL, C, C);
        nn_residual_bias_forward_f64(s->res2, s->res, WL(GPT2_ATTPROJB, l), N, C, 0, 1);
        nn_layernorm_forward_f64(s->ln, s->mean, s->rstd, s->res2, WL(GPT2_LN2W, l), WL(GPT2_LN2B, l), N, C, 0, 1);
        st_linear(s, 4 * l + 2, record, s->fch, s->ln, WL(GPT2_FCW, l), WL(GPT2_FCB, l), C, 4 * C);
        nn_gelu_forward_f64(s->fchg, s->fch, (size_t)N * 4 * C, 0, 1);
        st_linear(s, 4 * l + 3, record, s->res, s->fchg, WL(GPT2_FCPROJW, l), NULL, 4 * C, C);
        nn_residual_bias_forward_f64(s->res, s->res2, WL(GPT2_FCPROJB, l), N, C, 0, 1);
    }
    nn_layernorm_forward_f64(s->ln, s->mean, s->rstd, s->res, WL(GPT2_LNFW, 0), WL(GPT2_LNFB, 0), N, C, 0, 1);
    st_linear(s, 4 * s->L, record, s->logits, s->ln, WL(GPT2_WTE, 0), NULL, C, s->Vp);
#undef WL
    return nn_crossentropy_forward_f64(s->logits, s->losses, s->tgt, N, s->V, s->Vp, 1);
}

static double *st_alloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof *p);
    CHECK(p != NULL, "out of memory");
    return p;
}

/* Linear layer k's input (its name among the stored activations), weight tensor and shape. */
static void st_shape(const st_model *s, int k, const char **in, int *tw, int *Cin, int *OC) {
    static const char *const IN[4] = {"ln1", "atty", "ln2", "fch_gelu"};
    static const int WT[4] = {GPT2_QKVW, GPT2_ATTPROJW, GPT2_FCW, GPT2_FCPROJW};
    const int j = k % 4, head = k == 4 * s->L;
    *in = head ? "lnf" : IN[j];
    *tw = head ? GPT2_WTE : WT[j];
    *Cin = head || j != 3 ? s->C : 4 * s->C;
    *OC = head ? s->Vp : j == 0 ? 3 * s->C : j == 2 ? 4 * s->C : s->C;
}

/* A low-precision model's operands of every linear layer (its stored inputs, the weights) dequantized by dq
 * (operand 0: the input, not transposed; 1: the weight, transposed, as the forward product takes them)
 * into s->xhat and, as offsets from the weights, s->cw. */
typedef void (*st_dequant_fn)(const void *spec, int which, int trans, const uint16_t *X, int rows, int cols, double *out);
static void st_operands(st_model *s, gm_model *m, const collage_bf16 *wb, st_dequant_fn dq, const void *spec) {
    gm_act at[32];
    const int na = gm_act_tensors(m, at, 32);
    const uint16_t *w = (const uint16_t *)wb;
    for (int k = 0; k < s->nlin; k++) {
        const char *name;
        int tw, Cin, OC;
        st_shape(s, k, &name, &tw, &Cin, &OC);
        const int l = k == 4 * s->L ? 0 : k / 4;
        const uint16_t *x = NULL;
        for (int a = 0; a < na; a++)
            if (!strcmp(at[a].name, name)) x = (const uint16_t *)at[a].data + (size_t)l * s->N * Cin;
        CHECK(x != NULL, "activation %s", name);
        if (!x) continue;
        const uint16_t *wk = w + s->off[tw] + (size_t)l * s->per[tw];
        dq(spec, 0, 0, x, s->N, Cin, s->xhat[k]);
        dq(spec, 1, 1, wk, OC, Cin, s->cw[k]);
        for (size_t i = 0; i < (size_t)OC * Cin; i++) s->cw[k][i] -= (double)bf16_f32(wk[i]);
    }
}

static void st_model_free(st_model *s) {
    for (int k = 0; k < ST_LIN_MAX; k++) free(s->xhat[k]), free(s->cx[k]), free(s->cw[k]);
    double *b[] = {s->res, s->res2, s->ln, s->mean, s->rstd, s->qkv, s->atty, s->att, s->scr, s->fch, s->fchg,
                   s->logits, s->losses, s->xin, s->win};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) free(b[i]);
}

static void st_model_make(st_model *s, const collage_model_config *c, const int *tok, const int *tgt) {
    *s = (st_model){.B = ST_B, .T = ST_T, .N = ST_B * ST_T, .L = c->num_layers, .C = c->channels, .NH = c->num_heads,
                    .V = c->vocab_size, .Vp = c->padded_vocab_size, .nlin = 4 * c->num_layers + 1, .tok = tok, .tgt = tgt};
    collage_tensor_info t[GPT2_NTENSORS];
    CHECK(collage_model_tensors(c, t, GPT2_NTENSORS) == GPT2_NTENSORS && s->nlin <= ST_LIN_MAX, "tensors");
    for (int k = 0; k < GPT2_NTENSORS; k++) {
        s->off[k] = t[k].offset;
        s->per[k] = k == GPT2_WTE || k == GPT2_WPE || k == GPT2_LNFW || k == GPT2_LNFB ? 0 : t[k].count / (size_t)s->L;
    }
    const size_t N = (size_t)s->N, C = (size_t)s->C;
    s->res = st_alloc(N * C), s->res2 = st_alloc(N * C), s->ln = st_alloc(N * C), s->mean = st_alloc(N);
    s->rstd = st_alloc(N), s->qkv = st_alloc(3 * N * C), s->atty = st_alloc(N * C);
    s->att = st_alloc((size_t)s->B * s->NH * s->T * s->T), s->scr = st_alloc(nn_attention_scratch(s->B, s->T, s->C, s->NH));
    s->fch = st_alloc(4 * N * C), s->fchg = st_alloc(4 * N * C), s->logits = st_alloc(N * (size_t)s->Vp);
    s->losses = st_alloc(N), s->xin = st_alloc(4 * N * C), s->win = st_alloc((size_t)s->Vp * C + 4 * C * C);
    for (int k = 0; k < s->nlin; k++) { /* offsets 0: F_ST is the fp64 model until st_operands */
        const char *name;
        int tw, Cin, OC;
        st_shape(s, k, &name, &tw, &Cin, &OC);
        s->xhat[k] = st_alloc(N * (size_t)Cin), s->cx[k] = st_alloc(N * (size_t)Cin);
        s->cw[k] = st_alloc((size_t)OC * (size_t)Cin);
    }
}

/* Central difference of F_ST at entry i of w. */
static double st_fd(st_model *s, double *w, size_t i) {
    const double x = w[i];
    w[i] = x + ST_H;
    const double fp = st_loss(s, w, 0);
    w[i] = x - ST_H;
    const double fm = st_loss(s, w, 0);
    w[i] = x;
    return (fp - fm) / (2.0 * ST_H);
}

/* Kind k's entries (ST_PICK of 64 drawn, largest |g64| first): ‖g8 − g_ST‖ / ‖g_ST‖ against tol; also
 * prints how far the unquantized fp64 model's gradient g64 lies from g_ST. */
static void st_check_kind(st_model *s, const char *name, double *w, const double *g64, const collage_bf16 *g8,
                          size_t lo, size_t n, double tol, const char *tag) {
    size_t pick[64];
    for (int j = 0; j < 64; j++) pick[j] = lo + (size_t)(h_rand64() % n);
    for (int a = 0; a < ST_PICK; a++) /* the ST_PICK largest |g64| to the front */
        for (int b = a + 1; b < 64; b++)
            if (fabs(g64[pick[b]]) > fabs(g64[pick[a]])) { size_t t = pick[a]; pick[a] = pick[b]; pick[b] = t; }
    double d8 = 0, d64 = 0, nst = 0;
    for (int a = 0; a < ST_PICK; a++) {
        const size_t i = pick[a];
        const double gst = st_fd(s, w, i), e8 = (double)bf16_f32(g8[i].bits) - gst, e64 = g64[i] - gst;
        d8 += e8 * e8, d64 += e64 * e64, nst += gst * gst;
    }
    const double r8 = sqrt(d8 / nst), r64 = sqrt(d64 / nst);
    printf("    %s %-9s |g_ST| %.2e  model %.4f  fp64 unquantized %.4f (relative distance to g_ST)\n", tag, name,
           sqrt(nst / ST_PICK), r8, r64);
    CHECK(nst > 0 && r8 <= tol, "%s %s: ‖g8 − g_ST‖ / ‖g_ST‖ = %.4f > %.2f", tag, name, r8, tol);
}

/* The fixture both fp8's and fp4's checks start from: GPT-2 tiny's initial weights in bf16 (wb) and as
 * doubles (w), ST_B × ST_T random tokens and targets, the fp64 model's loss l64 and gradient g64, and F_ST
 * made on them (checked equal to the fp64 model before any operand is offset). */
typedef struct {
    collage_model_config c;
    size_t n;
    float *wf;
    collage_bf16 *wb;
    double *w, *g64, l64;
    int tok[ST_B * ST_T], tgt[ST_B * ST_T];
    gm_model *m64;
    st_model s;
} st_case;

static int st_case_make(st_case *f) {
    memset(f, 0, sizeof *f);
    CHECK(collage_model_preset("tiny", &f->c) == COLLAGE_OK, "preset");
    f->n = collage_model_num_params(&f->c);
    f->wf = malloc(f->n * sizeof *f->wf), f->wb = malloc(f->n * sizeof *f->wb);
    f->w = malloc(f->n * sizeof *f->w), f->g64 = malloc(f->n * sizeof *f->g64);
    CHECK(f->wf && f->wb && f->w && f->g64 && collage_model_init_weights(&f->c, 21, f->wf, f->n) == COLLAGE_OK, "init");
    if (!f->wf || !f->wb || !f->w || !f->g64) return -1;
    collage_bf16_from_f32_row(f->wb, f->wf, f->n);
    for (size_t i = 0; i < f->n; i++) f->w[i] = (double)bf16_f32(f->wb[i].bits);
    h_seed(21);
    for (int i = 0; i < ST_B * ST_T; i++) f->tok[i] = (int)(h_rand32() % 256u), f->tgt[i] = (int)(h_rand32() % 256u);
    CHECK(collage__model_object(&f->c, GM_FP64, ST_B, ST_T, &f->m64) == COLLAGE_OK &&
              gm_forward(f->m64, f->w, f->tok, f->tgt, ST_B, ST_T, &f->l64) == COLLAGE_OK && gm_backward(f->m64) == COLLAGE_OK,
          "fp64");
    if (f->m64) memcpy(f->g64, gm_grads(f->m64), f->n * sizeof *f->g64);
    st_model_make(&f->s, &f->c, f->tok, f->tgt);
    const double l0 = st_loss(&f->s, f->w, 0);
    CHECK(fabs(l0 - f->l64) <= 1e-12 * fabs(f->l64), "the transcription's loss %.17g, the fp64 model's %.17g", l0, f->l64);
    return f->m64 ? 0 : -1;
}

static void st_case_free(st_case *f) {
    st_model_free(&f->s);
    gm_free(f->m64);
    free(f->wf), free(f->wb), free(f->w), free(f->g64);
}

/* Every weight kind of the low-precision model's gradient g against F_ST's central differences, tol each. */
static void st_check_kinds(st_case *f, const collage_bf16 *g, double tol, const char *tag) {
    static const int KINDS[] = {GPT2_QKVW, GPT2_ATTPROJW, GPT2_FCW, GPT2_FCPROJW, GPT2_WTE, GPT2_WPE};
    static const char *const NAMES[] = {"qkvw", "attprojw", "fcw", "fcprojw", "wte", "wpe"};
    h_seed(22);
    for (int k = 0; k < 6; k++) {
        const int t = KINDS[k];
        const size_t lo = f->s.off[t], cnt = t == GPT2_WTE ? (size_t)f->c.vocab_size * f->s.C : t == GPT2_WPE ?
                          (size_t)ST_T * f->s.C : f->s.per[t] * (size_t)f->s.L;
        st_check_kind(&f->s, NAMES[k], f->w, f->g64, g, lo, cnt, tol, tag);
    }
}

#endif
