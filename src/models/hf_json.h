/* hf_json.h — the little JSON the Hugging Face reader needs (import.c): a value's span in the text, the
 * members of an object and the elements of an array one at a time, and a span read as a number, a string
 * or a literal. Nothing is allocated; spans point into the caller's text. Strings unescape the ASCII
 * escapes and \u below 0x80 (the names and values of configs and safetensors headers); others fail. */
#ifndef COLLAGE_HF_JSON_H
#define COLLAGE_HF_JSON_H
#include <stddef.h>

typedef struct { const char *p, *end; } hj_span;

/* The value at the start of s (after white space): its span into *v, s advanced past it. 0: not JSON. */
int hj_value(hj_span *s, hj_span *v);
/* The kind of a value: '{', '[', '"', 'n' (number), 't', 'f', 'z' (null), 0 (empty). */
char hj_kind(hj_span v);
/* Iterate an object (or array) value: *it = the span inside the brackets first; then each call gives the
 * next member (key unescaped into key, at most cap bytes with the 0) or element. 1: one given; 0: the
 * end; -1: not JSON. */
int hj_enter(hj_span v, char open, hj_span *it);
int hj_member(hj_span *it, char *key, size_t cap, hj_span *val);
int hj_element(hj_span *it, hj_span *val);
/* The member key of object obj (NULL: none; a dotted key "a.b" looks into a member object). */
int hj_get(hj_span obj, const char *key, hj_span *val);
/* A number span as a double (0: not a number); a string span unescaped into buf (0: not a string or too
 * long). */
int hj_number(hj_span v, double *out);
int hj_string(hj_span v, char *buf, size_t cap);
/* The span's text, shortened to fit buf, for messages. */
const char *hj_text(hj_span v, char *buf, size_t cap);

#endif
