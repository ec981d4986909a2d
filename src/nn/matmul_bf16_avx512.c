/* matmul_bf16_avx512.c — matmul_bf16.c compiled with AVX-512 (Makefile: ISA_FLAGS), every name suffixed _avx512;
 * entered only on CPUs with AVX-512 (the bf16 graphs of src/models, chosen by graph_model.c). */
#define NN_BF16_BUILD_AVX512 1
#include "matmul_bf16.c"
