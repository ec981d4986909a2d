/* gemm_ref_avx512.c — gemm_ref.c compiled with AVX-512 (Makefile: ISA_FLAGS) as nn_sgemm_ref_avx512;
 * entered only on CPUs with AVX-512 (gemm.c), with the baseline build's bits. */
#define NN_REF_NAME nn_sgemm_ref_avx512
#include "gemm_ref.c"
