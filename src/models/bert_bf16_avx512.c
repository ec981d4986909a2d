/* bert_bf16_avx512.c — bert_bf16.c compiled with AVX-512 (Makefile: ISA_FLAGS), every name suffixed
 * _avx512; entered only on CPUs with AVX-512 (graph_model.c). */
#define NN_BF16_BUILD_AVX512 1
#include "bert_bf16.c"
