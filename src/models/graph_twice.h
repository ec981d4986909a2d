/* graph_twice.h — a family's graph source, written once over `real`, compiled for float and for double.
 * The includer defines GRAPH_INC (the source's file name, a string) and includes this once; the source
 * sees real, SUF(name) (name_f32 or name_f64), NN(op) (nn_op_f32 or nn_op_f64 of nn.h), TW(x) (the
 * float or double one of a plan's pair of fields x32 / x64, e.g. P->TW(eps)), and the accessors of the
 * plan's offsets: PW(k, l) parameter tensor k of layer l in w, PG(k, l) its gradient in g, AC(k, l)
 * activation k of layer l in a. Private to src/models (gpt2.c, bert.c, llama.c). */
#define PW(k, l) (w + P->p[k] + (size_t)(l) * P->pl[k])
#define PG(k, l) (g + P->p[k] + (size_t)(l) * P->pl[k])
#define AC(k, l) (a + P->a[k] + (size_t)(l) * P->al[k])

#define real float
#define SUF(name) name##_f32
#define NN(op) nn_##op##_f32
#define TW(x) x##32
#include GRAPH_INC
#undef real
#undef SUF
#undef NN
#undef TW

#define real double
#define SUF(name) name##_f64
#define NN(op) nn_##op##_f64
#define TW(x) x##64
#include GRAPH_INC
#undef real
#undef SUF
#undef NN
#undef TW
#undef GRAPH_INC
