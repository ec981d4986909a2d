/* gemm_ref.c — the reference sgemm (nn.h: nn_sgemm_ref): each C element summed in k order, each product
 * and sum rounded once to fp32, so its bits are the same on every CPU. Built twice: the baseline and an
 * AVX-512 unit (gemm_ref_avx512.c), which vectorises across the
 * columns of C only (each lane one element's own sum) and so gives the same bits. */
#include "nn.h"

#ifndef NN_REF_NAME
#define NN_REF_NAME nn_sgemm_ref
#endif

#define REF_NB 64   /* columns of C per block: the accumulators of a row, in registers or L1 */
#define REF_MB 4    /* rows of C per block */
#define REF_KB 256  /* k per packed panel of op(B): REF_KB × REF_NB floats, 64 KiB */

/* acc[r][j] (r < mr rows, j < nb) += Σ_{k < kb} a(r,k) · bp[k][j], k in order, no fused multiply-add
 * (-ffp-contract=off): a(r,k) = A[r·ars + k·aks]. */
static void ref_block(float acc[REF_MB][REF_NB], int mr, int nb, int kb, const float *A, size_t ars, size_t aks,
                      const float *bp) {
    for (int k = 0; k < kb; k++) {
        const float *b = bp + (size_t)k * REF_NB;
        for (int r = 0; r < mr; r++) {
            const float a = A[(size_t)r * ars + (size_t)k * aks];
            float *c = acc[r];
#pragma omp simd
            for (int j = 0; j < REF_NB; j++) c[j] = c[j] + a * b[j];
        }
    }
    (void)nb;
}

void NN_REF_NAME(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb, float beta,
                 float *C, int ldc) {
    const size_t ars = ta ? 1 : (size_t)lda, aks = ta ? (size_t)lda : 1;
    float bp[REF_KB * REF_NB] __attribute__((aligned(64)));
    float acc[REF_MB][REF_NB] __attribute__((aligned(64)));
    for (int j0 = 0; j0 < N; j0 += REF_NB) {
        const int nb = N - j0 < REF_NB ? N - j0 : REF_NB;
        for (int i0 = 0; i0 < M; i0 += REF_MB) {
            const int mr = M - i0 < REF_MB ? M - i0 : REF_MB;
            memset(acc, 0, sizeof acc); /* 0 + p = p exactly: the sum starts from the first product */
            for (int k0 = 0; k0 < K; k0 += REF_KB) {
                const int kb = K - k0 < REF_KB ? K - k0 : REF_KB;
                if (i0 == 0 || kb < K) { /* pack op(B)[k0.., j0..] (zero columns past nb) */
                    for (int k = 0; k < kb; k++)
                        for (int j = 0; j < REF_NB; j++)
                            bp[k * REF_NB + j] = j >= nb ? 0.0f
                                                 : tb ? B[(size_t)(j0 + j) * ldb + (size_t)(k0 + k)]
                                                      : B[(size_t)(k0 + k) * ldb + (size_t)(j0 + j)];
                }
                ref_block(acc, mr, nb, kb, A + (size_t)i0 * ars + (size_t)k0 * aks, ars, aks, bp);
            }
            for (int r = 0; r < mr; r++) {
                float *c = C + (size_t)(i0 + r) * ldc + j0;
                if (beta == 0.0f)
                    for (int j = 0; j < nb; j++) c[j] = acc[r][j];
                else
                    for (int j = 0; j < nb; j++) c[j] = beta * c[j] + acc[r][j];
            }
        }
    }
}
