/* corpus.h — what the tests that train measure of a corpus. */
#ifndef COLLAGE_TESTS_CORPUS_H
#define COLLAGE_TESTS_CORPUS_H
#include "collage_data.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>

/* The entropy (nats) of the validation split's tokens of data (NULL: the default corpus) taken one at a
 * time: the loss of the best model that ignores context, which a model that learned anything beats. NaN
 * (after a message) when the corpus cannot be read. */
static double val_unigram_entropy(const char *data) __attribute__((unused));
static double val_unigram_entropy(const char *data) {
    collage_loader_config lc = {.path = data, .B = 8, .T = 64, .seed = 1};
    collage_loader *l = NULL;
    char err[512];
    if (collage_loader_create(&lc, &l, err, sizeof err) != COLLAGE_OK) { printf("    %s\n", err); return (double)NAN; }
    size_t n = 0;
    static size_t count[65536];
    for (int k = 0; k < 65536; k++) count[k] = 0;
    const uint16_t *v = collage_loader_data(l, COLLAGE_SPLIT_VAL, &n);
    for (size_t i = 0; i < n; i++) count[v[i]]++;
    double h = 0;
    for (int k = 0; k < 65536; k++)
        if (count[k]) h -= (double)count[k] / (double)n * log((double)count[k] / (double)n);
    collage_loader_free(l);
    return n ? h : (double)NAN;
}

#endif
