/* hf_json.c — a JSON reader over spans for the Hugging Face folders import.c reads (config.json, the
 * safetensors headers, model.safetensors.index.json): values skipped by their syntax, objects and arrays
 * walked member by member, numbers by strtod over the whole span. Depth is bounded so that a hostile file
 * cannot exhaust the stack. */
#include "hf_json.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HJ_MAX_DEPTH 64

static void ws(hj_span *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static int skip_string(hj_span *s) {
    if (s->p >= s->end || *s->p != '"') return 0;
    for (s->p++; s->p < s->end; s->p++) {
        if (*s->p == '\\') { s->p++; continue; }
        if (*s->p == '"') { s->p++; return 1; }
        if ((unsigned char)*s->p < 0x20) return 0;
    }
    return 0;
}

static int skip_value(hj_span *s, int depth);

/* The members or elements after an opening bracket, up to and past the closing one. */
static int skip_container(hj_span *s, int depth, char close) {
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) { s->p++; return 1; }
    for (;;) {
        if (close == '}') {
            if (!skip_string(s)) return 0;
            ws(s);
            if (s->p >= s->end || *s->p++ != ':') return 0;
        }
        if (!skip_value(s, depth + 1)) return 0;
        ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p == close) { s->p++; return 1; }
        if (*s->p++ != ',') return 0;
        ws(s);
    }
}

static int skip_value(hj_span *s, int depth) {
    ws(s);
    if (s->p >= s->end || depth > HJ_MAX_DEPTH) return 0;
    const char c = *s->p;
    if (c == '{') return skip_container(s, depth, '}');
    if (c == '[') return skip_container(s, depth, ']');
    if (c == '"') return skip_string(s);
    const char *q = s->p;
    while (q < s->end && (strchr("+-.eE", *q) || (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z'))) q++;
    if (q == s->p) return 0;
    s->p = q;
    return 1;
}

int hj_value(hj_span *s, hj_span *v) {
    ws(s);
    const char *b = s->p;
    if (!skip_value(s, 0)) return 0;
    *v = (hj_span){b, s->p};
    return 1;
}

char hj_kind(hj_span v) {
    if (v.p >= v.end) return 0;
    const size_t n = (size_t)(v.end - v.p);
    if (strchr("{[\"", *v.p)) return *v.p;
    if (n == 4 && !memcmp(v.p, "true", 4)) return 't';
    if (n == 5 && !memcmp(v.p, "false", 5)) return 'f';
    if (n == 4 && !memcmp(v.p, "null", 4)) return 'z';
    return 'n';
}

int hj_enter(hj_span v, char open, hj_span *it) {
    if (hj_kind(v) != open || v.end - v.p < 2) return 0;
    *it = (hj_span){v.p + 1, v.end - 1};
    return 1;
}

/* Past the comma after a member or element, if any. */
static int next_sep(hj_span *it) {
    ws(it);
    if (it->p < it->end && *it->p == ',') { it->p++; ws(it); return it->p < it->end; }
    return it->p == it->end;
}

int hj_member(hj_span *it, char *key, size_t cap, hj_span *val) {
    ws(it);
    if (it->p >= it->end) return 0;
    hj_span k;
    const char *b = it->p;
    if (!skip_string(it)) return -1;
    k = (hj_span){b, it->p};
    if (!hj_string(k, key, cap)) return -1;
    ws(it);
    if (it->p >= it->end || *it->p++ != ':') return -1;
    if (!hj_value(it, val)) return -1;
    return next_sep(it) ? 1 : -1;
}

int hj_element(hj_span *it, hj_span *val) {
    ws(it);
    if (it->p >= it->end) return 0;
    if (!hj_value(it, val)) return -1;
    return next_sep(it) ? 1 : -1;
}

int hj_get(hj_span obj, const char *key, hj_span *val) {
    const char *dot = strchr(key, '.');
    char want[128], k[128];
    const size_t n = dot ? (size_t)(dot - key) : strlen(key);
    if (n >= sizeof want) return 0;
    memcpy(want, key, n);
    want[n] = 0;
    hj_span it, v;
    if (!hj_enter(obj, '{', &it)) return 0;
    int r;
    while ((r = hj_member(&it, k, sizeof k, &v)) == 1)
        if (!strcmp(k, want)) return dot ? hj_get(v, dot + 1, val) : (*val = v, 1);
    return 0;
}

int hj_number(hj_span v, double *out) {
    char buf[64];
    const size_t n = (size_t)(v.end - v.p);
    if (hj_kind(v) != 'n' || n >= sizeof buf) return 0;
    memcpy(buf, v.p, n);
    buf[n] = 0;
    char *e;
    *out = strtod(buf, &e);
    return e == buf + n;
}

static int hex4(const char *p, unsigned *u) {
    *u = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        *u = *u * 16 + (unsigned)d;
    }
    return 1;
}

int hj_string(hj_span v, char *buf, size_t cap) {
    if (hj_kind(v) != '"' || cap == 0) return 0;
    size_t n = 0;
    for (const char *p = v.p + 1; p < v.end - 1; p++) {
        char c = *p;
        if (c == '\\') {
            const char e = *++p;
            unsigned u;
            if (e == 'u' && v.end - 1 - p > 4 && hex4(p + 1, &u) && u > 0 && u < 0x80) { c = (char)u; p += 4; }
            else if (e && strchr("\"\\/", e)) c = e;
            else if (e == 'n') c = '\n';
            else if (e == 't') c = '\t';
            else return 0;
        }
        if (n + 1 >= cap) return 0;
        buf[n++] = c;
    }
    buf[n] = 0;
    return 1;
}

const char *hj_text(hj_span v, char *buf, size_t cap) {
    const size_t n = (size_t)(v.end - v.p);
    if (!cap) return buf;
    snprintf(buf, cap, "%.*s%s", (int)(n < 40 ? n : 40), v.p, n > 40 ? "…" : "");
    return buf;
}
