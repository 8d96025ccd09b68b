/* model/grammar/gram_parse.c — GBNF text to a compiled grammar (gram_int.h).
 *
 * The notation, as llama.cpp's grammars/README.md defines it: `name ::= alternatives`, one rule
 * per line (a rule continues over newlines inside parentheses, after `::=` and after `|`);
 * "strings" and [character classes] (ranges, ^ negation) with the escapes \n \r \t \\ \" \[ \]
 * \xHH \uHHHH \UHHHHHHHH; `.` any character; ( groups ); the operators * + ? {m} {m,} {m,n} on
 * the item before them; # comments. Repetitions become rules of their own here (x* is
 * `R ::= x R |`), so that the matcher knows only sequences, alternatives and references. Token
 * references (<|...|>, <[id]>) are not supported: the message says so. */
#include "model/grammar/gram_int.h"
#include "proto/utf8.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define MAX_NEST 256 /* parentheses inside parentheses */

typedef struct evec {
    gram_elem *v;
    int n, cap;
} evec;

typedef struct pstate {
    const char *s, *e;
    evec *rules;
    char **names;
    uint8_t *defined;
    int n_rules, cap_rules;
    int *ht; /* the written names' index: id + 1, 0 empty (rule_id) */
    uint32_t ht_cap, ht_used;
    uint64_t seed; /* name_hash's start */
    uint32_t *ranges;
    int n_ranges, cap_ranges;
    long total;
    int nest;
    char *err;
    size_t errlen;
    int failed;
} pstate;

static int line_of(const pstate *ps, const char *p)
{
    int line = 1;
    for (const char *q = ps->s; q < p && q < ps->e; q++) line += *q == '\n';
    return line;
}

static void fail(pstate *ps, const char *p, const char *fmt, ...)
{
    if (ps->failed) return;
    ps->failed = 1;
    char m[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    if (p) snprintf(ps->err, ps->errlen, "grammar line %d: %s", line_of(ps, p), m);
    else snprintf(ps->err, ps->errlen, "grammar: %s", m);
}

static int push(pstate *ps, evec *v, gram_elem e)
{
    if (++ps->total > MODEL_GRAMMAR_MAX_ELEMS) {
        fail(ps, NULL, "more than %d elements after expanding repetitions", MODEL_GRAMMAR_MAX_ELEMS);
        return -1;
    }
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 16;
        gram_elem *p = realloc(v->v, sizeof *p * (size_t)cap);
        if (!p) {
            fail(ps, NULL, "out of memory");
            return -1;
        }
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = e;
    return 0;
}

/* A new rule named name[0..n), undefined; its id, or -1 on out of memory. */
static int rule_add(pstate *ps, const char *name, size_t n)
{
    if (ps->n_rules == ps->cap_rules) {
        int cap = ps->cap_rules ? 2 * ps->cap_rules : 16;
        evec *r = realloc(ps->rules, sizeof *r * (size_t)cap);
        if (r) ps->rules = r;
        char **nm = realloc(ps->names, sizeof *nm * (size_t)cap);
        if (nm) ps->names = nm;
        uint8_t *d = realloc(ps->defined, (size_t)cap);
        if (d) ps->defined = d;
        if (!r || !nm || !d) {
            fail(ps, NULL, "out of memory");
            return -1;
        }
        ps->cap_rules = cap;
    }
    char *copy = malloc(n + 1);
    if (!copy) {
        fail(ps, NULL, "out of memory");
        return -1;
    }
    memcpy(copy, name, n);
    copy[n] = 0;
    int id = ps->n_rules++;
    ps->names[id] = copy;
    ps->defined[id] = 0;
    memset(&ps->rules[id], 0, sizeof ps->rules[id]);
    return id;
}

/* FNV-1a from a per-grammar random start, then a finalizer that folds every bit into the low
 * ones the index uses: names written to collide in the index cannot be made offline (a grammar
 * of 1 MiB holds ~200,000 names, and a colliding set would bring back the quadratic scan). */
static uint32_t name_hash(const pstate *ps, const char *name, size_t n)
{
    uint64_t h = ps->seed;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)name[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return (uint32_t)h;
}

/* The written rule named name[0..n) (rule_id), or -1. */
static int rule_find(const pstate *ps, const char *name, size_t n)
{
    if (!ps->ht_cap) return -1;
    for (uint32_t i = name_hash(ps, name, n) & (ps->ht_cap - 1);; i = (i + 1) & (ps->ht_cap - 1)) {
        int id = ps->ht[i] - 1;
        if (id < 0) return -1;
        if (strlen(ps->names[id]) == n && !memcmp(ps->names[id], name, n)) return id;
    }
}

/* The id of the rule the grammar's text names name[0..n), created (undefined) when new; -1 on
 * out of memory. Found through a hash index of the written names (a repetition-heavy grammar
 * makes hundreds of thousands of rules: a scan of them all for each name was seconds of work
 * for 300 bytes of text); the rules made for groups and repetitions (new_rule) are not in it,
 * so a written name never finds one of them, whatever it is called. */
static int rule_id(pstate *ps, const char *name, size_t n)
{
    int found = rule_find(ps, name, n);
    if (found >= 0) return found;
    uint32_t h = name_hash(ps, name, n);
    if (2 * (ps->ht_used + 1) > ps->ht_cap) { /* grow: at most half full */
        uint32_t cap = ps->ht_cap ? 2 * ps->ht_cap : 64;
        int *t = calloc(cap, sizeof *t);
        if (!t) {
            fail(ps, NULL, "out of memory");
            return -1;
        }
        for (uint32_t k = 0; k < ps->ht_cap; k++) {
            int id = ps->ht[k] - 1;
            if (id < 0) continue;
            uint32_t j = name_hash(ps, ps->names[id], strlen(ps->names[id])) & (cap - 1);
            while (t[j]) j = (j + 1) & (cap - 1);
            t[j] = id + 1;
        }
        free(ps->ht);
        ps->ht = t;
        ps->ht_cap = cap;
    }
    int id = rule_add(ps, name, n);
    if (id < 0) return -1;
    uint32_t j = h & (ps->ht_cap - 1);
    while (ps->ht[j]) j = (j + 1) & (ps->ht_cap - 1);
    ps->ht[j] = id + 1;
    ps->ht_used++;
    return id;
}

/* A new rule for a group or a repetition inside rule `parent`: "parent-K" (K its id), defined
 * here. Never looked up by name: a written rule of the same name is another rule. */
static int new_rule(pstate *ps, int parent)
{
    char name[128];
    int n = snprintf(name, sizeof name, "%.100s-%d", ps->names[parent], ps->n_rules);
    int id = rule_add(ps, name, (size_t)n);
    if (id >= 0) ps->defined[id] = 1;
    return id;
}

static int add_range(pstate *ps, uint32_t lo, uint32_t hi)
{
    if (ps->n_ranges == ps->cap_ranges) {
        int cap = ps->cap_ranges ? 2 * ps->cap_ranges : 64;
        uint32_t *r = realloc(ps->ranges, sizeof *r * 2 * (size_t)cap);
        if (!r) {
            fail(ps, NULL, "out of memory");
            return -1;
        }
        ps->ranges = r;
        ps->cap_ranges = cap;
    }
    ps->ranges[2 * ps->n_ranges] = lo;
    ps->ranges[2 * ps->n_ranges + 1] = hi;
    ps->n_ranges++;
    return 0;
}

static int is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static const char *space(const pstate *ps, const char *p, int newline_ok)
{
    while (p < ps->e) {
        if (*p == ' ' || *p == '\t') {
            p++;
        } else if (*p == '#') {
            while (p < ps->e && *p != '\n' && *p != '\r') p++;
        } else if (newline_ok && (*p == '\n' || *p == '\r')) {
            p++;
        } else {
            break;
        }
    }
    return p;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a string or a class at *pp (escapes decoded); -1 on an error. */
static long parse_char(pstate *ps, const char **pp)
{
    const char *p = *pp;
    if (p >= ps->e) {
        fail(ps, p, "unexpected end of grammar");
        return -1;
    }
    if (*p == '\\') {
        if (p + 1 >= ps->e) {
            fail(ps, p, "unexpected end after '\\'");
            return -1;
        }
        char c = p[1];
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = p + 2 + i < ps->e ? hexval(p[2 + i]) : -1;
                if (h < 0) {
                    fail(ps, p, "\\%c needs %d hex digits", c, digits);
                    return -1;
                }
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF) {
                fail(ps, p, "code point above U+10FFFF");
                return -1;
            }
            *pp = p + 2 + digits;
            return (long)v;
        }
        *pp = p + 2;
        switch (c) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        default:
            if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                (c >= 0x7B && c <= 0x7E))
                return c; /* \\ \" \[ \] \- \^ \/ ...: the character itself */
            fail(ps, p, "unknown escape '\\%c'", c);
            return -1;
        }
    }
    size_t k = 0;
    uint32_t cp = 0;
    if (proto_utf8_scan((const unsigned char *)p, (size_t)(ps->e - p), &k, &cp) != PROTO_UTF8_OK) {
        fail(ps, p, "invalid UTF-8");
        return -1;
    }
    *pp = p + k;
    return (long)cp;
}

static int push_char(pstate *ps, evec *v, uint32_t lo, uint32_t hi, int first, int neg)
{
    gram_elem e = {0};
    e.kind = GRAM_CHAR;
    e.neg = (uint8_t)neg;
    e.a = first;
    e.b = ps->n_ranges - first;
    (void)lo;
    (void)hi;
    return push(ps, v, e);
}

static int single(pstate *ps, evec *v, uint32_t c)
{
    int first = ps->n_ranges;
    if (add_range(ps, c, c)) return -1;
    return push_char(ps, v, c, c, first, 0);
}

static const char *parse_alternates(pstate *ps, const char *p, int rule, int nested);

/* Applies {min, max} (max -1: unbounded) to the elements rules[rule][start..]. */
static int repeat(pstate *ps, int rule, int start, long min, long max)
{
    evec *v = &ps->rules[rule];
    int n = v->n - start;
    if (n <= 0) return 0; /* an empty item repeated is empty */
    gram_elem *item = malloc(sizeof *item * (size_t)n);
    if (!item) {
        fail(ps, NULL, "out of memory");
        return -1;
    }
    memcpy(item, v->v + start, sizeof *item * (size_t)n);
    ps->total -= n;
    v->n = start;
    int rc = 0;
    for (long k = 0; k < min && !rc; k++)
        for (int i = 0; i < n && !rc; i++) rc = push(ps, &ps->rules[rule], item[i]);
    if (!rc && max < 0) {
        /* R ::= item R | (empty) */
        int r = new_rule(ps, rule);
        if (r < 0) rc = -1;
        for (int i = 0; i < n && !rc; i++) rc = push(ps, &ps->rules[r], item[i]);
        gram_elem ref = {GRAM_REF, 0, r, 0, {0, 0}}, alt = {GRAM_ALT, 0, 0, 0, {0, 0}}, end = {GRAM_END, 0, 0, 0, {0, 0}};
        if (!rc) rc = push(ps, &ps->rules[r], ref);
        if (!rc) rc = push(ps, &ps->rules[r], alt);
        if (!rc) rc = push(ps, &ps->rules[r], end);
        if (!rc) rc = push(ps, &ps->rules[rule], ref);
    } else if (!rc && max > min) {
        /* R1 ::= item |; Rj ::= item R(j-1) | — at most max - min more items */
        int prev = -1;
        for (long j = 0; j < max - min && !rc; j++) {
            int r = new_rule(ps, rule);
            if (r < 0) {
                rc = -1;
                break;
            }
            for (int i = 0; i < n && !rc; i++) rc = push(ps, &ps->rules[r], item[i]);
            gram_elem ref = {GRAM_REF, 0, prev, 0, {0, 0}}, alt = {GRAM_ALT, 0, 0, 0, {0, 0}}, end = {GRAM_END, 0, 0, 0, {0, 0}};
            if (!rc && prev >= 0) rc = push(ps, &ps->rules[r], ref);
            if (!rc) rc = push(ps, &ps->rules[r], alt);
            if (!rc) rc = push(ps, &ps->rules[r], end);
            prev = r;
        }
        gram_elem ref = {GRAM_REF, 0, prev, 0, {0, 0}};
        if (!rc) rc = push(ps, &ps->rules[rule], ref);
    }
    free(item);
    return rc;
}

static const char *parse_count(pstate *ps, const char *p, long *v)
{
    if (p >= ps->e || *p < '0' || *p > '9') {
        fail(ps, p, "expected a number in {}");
        return NULL;
    }
    long x = 0;
    while (p < ps->e && *p >= '0' && *p <= '9') {
        x = x * 10 + (*p++ - '0');
        if (x > MODEL_GRAMMAR_MAX_REPEAT) {
            fail(ps, p, "repetition count above %d", MODEL_GRAMMAR_MAX_REPEAT);
            return NULL;
        }
    }
    *v = x;
    return p;
}

static const char *parse_sequence(pstate *ps, const char *p, int rule, int nested)
{
    int last = -1;
    while (p < ps->e && !ps->failed) {
        evec *v = &ps->rules[rule];
        char c = *p;
        if (c == '"') {
            last = v->n;
            p++;
            while (p < ps->e && *p != '"' && !ps->failed) {
                long ch = parse_char(ps, &p);
                if (ch < 0 || single(ps, &ps->rules[rule], (uint32_t)ch)) return NULL;
            }
            if (p >= ps->e) {
                fail(ps, p, "unterminated string");
                return NULL;
            }
            p++;
        } else if (c == '[') {
            last = v->n;
            p++;
            int neg = 0;
            if (p < ps->e && *p == '^') {
                neg = 1;
                p++;
            }
            int first = ps->n_ranges;
            while (p < ps->e && *p != ']' && !ps->failed) {
                long lo = parse_char(ps, &p), hi = lo;
                if (lo < 0) return NULL;
                if (p + 1 < ps->e && *p == '-' && p[1] != ']') {
                    p++;
                    hi = parse_char(ps, &p);
                    if (hi < 0) return NULL;
                    if (hi < lo) {
                        fail(ps, p, "range end below its start");
                        return NULL;
                    }
                }
                if (add_range(ps, (uint32_t)lo, (uint32_t)hi)) return NULL;
            }
            if (p >= ps->e) {
                fail(ps, p, "unterminated character class");
                return NULL;
            }
            p++;
            if (push_char(ps, &ps->rules[rule], 0, 0, first, neg)) return NULL;
        } else if (c == '.') {
            last = v->n;
            int first = ps->n_ranges;
            if (add_range(ps, 0, 0x10FFFF) || push_char(ps, v, 0, 0, first, 0)) return NULL;
            p++;
        } else if (is_word(c)) {
            last = v->n;
            const char *q = p;
            while (q < ps->e && is_word(*q)) q++;
            int id = rule_id(ps, p, (size_t)(q - p));
            if (id < 0) return NULL;
            gram_elem ref = {GRAM_REF, 0, id, 0, {0, 0}};
            if (push(ps, &ps->rules[rule], ref)) return NULL;
            p = q;
        } else if (c == '(') {
            last = v->n;
            if (++ps->nest > MAX_NEST) {
                fail(ps, p, "groups nested deeper than %d", MAX_NEST);
                return NULL;
            }
            int sub = new_rule(ps, rule);
            if (sub < 0) return NULL;
            p = parse_alternates(ps, space(ps, p + 1, 1), sub, 1);
            if (!p) return NULL;
            if (p >= ps->e || *p != ')') {
                fail(ps, p, "expected ')'");
                return NULL;
            }
            ps->nest--;
            p++;
            gram_elem ref = {GRAM_REF, 0, sub, 0, {0, 0}};
            if (push(ps, &ps->rules[rule], ref)) return NULL;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0) {
                fail(ps, p, "'%c' with nothing before it", c);
                return NULL;
            }
            long min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            p++;
            if (c == '{') {
                p = parse_count(ps, space(ps, p, 1), &min);
                if (!p) return NULL;
                p = space(ps, p, 1);
                max = min;
                if (p < ps->e && *p == ',') {
                    p = space(ps, p + 1, 1);
                    max = -1;
                    if (p < ps->e && *p != '}') {
                        p = parse_count(ps, p, &max);
                        if (!p) return NULL;
                        if (max < min) {
                            fail(ps, p, "{m,n} with n below m");
                            return NULL;
                        }
                        p = space(ps, p, 1);
                    }
                }
                if (p >= ps->e || *p != '}') {
                    fail(ps, p, "expected '}'");
                    return NULL;
                }
                p++;
            }
            if (repeat(ps, rule, last, min, max)) return NULL;
            last = -1; /* x** is an error, as in llama.cpp */
        } else if (c == '<') {
            fail(ps, p, "token references (<...>) are not supported");
            return NULL;
        } else {
            break;
        }
        p = space(ps, p, nested);
    }
    return ps->failed ? NULL : p;
}

static const char *parse_alternates(pstate *ps, const char *p, int rule, int nested)
{
    gram_elem alt = {GRAM_ALT, 0, 0, 0, {0, 0}}, end = {GRAM_END, 0, 0, 0, {0, 0}};
    p = parse_sequence(ps, p, rule, nested);
    while (p && p < ps->e && *p == '|') {
        if (push(ps, &ps->rules[rule], alt)) return NULL;
        p = parse_sequence(ps, space(ps, p + 1, 1), rule, nested);
    }
    if (!p || push(ps, &ps->rules[rule], end)) return NULL;
    return p;
}

static void ascii_bits(const model_grammar *g, gram_elem *e)
{
    e->ascii[0] = e->ascii[1] = 0;
    /* an empty class (b == 0) may come with no ranges at all: no pointer arithmetic on NULL */
    const uint32_t *r = e->b > 0 ? g->ranges + 2 * e->a : NULL;
    for (int i = 0; i < e->b; i++)
        for (uint32_t c = r[2 * i]; c <= r[2 * i + 1] && c < 128; c++) e->ascii[c >> 6] |= 1ull << (c & 63);
    if (e->neg) {
        e->ascii[0] = ~e->ascii[0];
        e->ascii[1] = ~e->ascii[1];
    }
}

int gram_char_match_range(const model_grammar *g, const gram_elem *e, uint32_t lo, uint32_t hi)
{
    /* an empty class (b == 0; "[^]" negated: every code point) may have no ranges at all */
    const uint32_t *r = e->b > 0 ? g->ranges + 2 * e->a : NULL;
    if (!e->neg) {
        for (int i = 0; i < e->b; i++)
            if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return 1;
        return 0;
    }
    /* negated: some code point of [lo, hi] lies outside every range — walk lo upward past
     * ranges that cover it (at most b steps each) */
    uint32_t c = lo;
    for (int moved = 1; moved && c <= hi;) {
        moved = 0;
        for (int i = 0; i < e->b; i++)
            if (r[2 * i] <= c && r[2 * i + 1] >= c) {
                if (r[2 * i + 1] >= hi) return 0;
                c = r[2 * i + 1] + 1;
                moved = 1;
            }
    }
    return c <= hi;
}

static void free_ps(pstate *ps)
{
    for (int i = 0; i < ps->n_rules; i++) {
        free(ps->rules[i].v);
        free(ps->names[i]);
    }
    free(ps->rules);
    free(ps->names);
    free(ps->defined);
    free(ps->ranges);
}

model_grammar *model_grammar_new(const char *text, size_t len, const char *root, char *err,
                                 size_t errlen)
{
    if (!root) root = "root";
    if (len > MODEL_GRAMMAR_MAX_TEXT) {
        snprintf(err, errlen, "grammar: longer than %d bytes", MODEL_GRAMMAR_MAX_TEXT);
        return NULL;
    }
    pstate ps = {0};
    if (getrandom(&ps.seed, sizeof ps.seed, GRND_NONBLOCK) != (ssize_t)sizeof ps.seed)
        ps.seed = 0xcbf29ce484222325ull ^ (uint64_t)(uintptr_t)&ps; /* early boot: still varies */
    ps.s = text;
    ps.e = text + len;
    ps.err = err;
    ps.errlen = errlen;
    const char *p = space(&ps, text, 1);
    while (p && p < ps.e) {
        const char *q = p;
        while (q < ps.e && is_word(*q)) q++;
        if (q == p) {
            fail(&ps, p, "expected a rule name");
            break;
        }
        int id = rule_id(&ps, p, (size_t)(q - p));
        if (id < 0) break;
        if (ps.defined[id]) {
            fail(&ps, p, "rule '%.*s' defined twice", (int)(q - p), p);
            break;
        }
        ps.defined[id] = 1;
        p = space(&ps, q, 0);
        if (ps.e - p < 3 || memcmp(p, "::=", 3)) {
            fail(&ps, p, "expected '::=' after '%.*s'", (int)(q - p), ps.names[id]);
            break;
        }
        p = parse_alternates(&ps, space(&ps, p + 3, 1), id, 0);
        if (!p) break;
        if (p < ps.e && *p != '\n' && *p != '\r') {
            fail(&ps, p, "unexpected '%c'", *p);
            break;
        }
        p = space(&ps, p, 1);
    }
    model_grammar *g = NULL;
    if (!ps.failed) {
        for (int i = 0; i < ps.n_rules && !ps.failed; i++)
            if (!ps.defined[i]) fail(&ps, NULL, "undefined rule '%s'", ps.names[i]);
    }
    int root_id = rule_find(&ps, root, strlen(root));
    if (!ps.failed && root_id < 0) fail(&ps, NULL, "no rule named '%s'", root);
    if (ps.failed) goto out;
    g = calloc(1, sizeof *g);
    if (!g) goto oom;
    atomic_init(&g->refs, 1);
    g->n_rules = ps.n_rules;
    g->root = root_id;
    g->n_el = (int)ps.total;
    g->el = malloc(sizeof *g->el * (size_t)(g->n_el + 1));
    g->rule_start = malloc(sizeof(int32_t) * (size_t)g->n_rules);
    g->alt_off = malloc(sizeof(int32_t) * (size_t)(g->n_rules + 1));
    g->alts = malloc(sizeof(int32_t) * (size_t)(g->n_el + 1));
    g->ranges = ps.ranges;
    g->n_ranges = ps.n_ranges;
    ps.ranges = NULL;
    g->names = ps.names;
    ps.names = NULL;
    if (!g->el || !g->rule_start || !g->alt_off || !g->alts) goto oom;
    int k = 0, na = 0;
    for (int r = 0; r < g->n_rules; r++) {
        g->rule_start[r] = k;
        g->alt_off[r] = na;
        g->alts[na++] = k;
        for (int i = 0; i < ps.rules[r].n; i++) {
            gram_elem e = ps.rules[r].v[i];
            if (e.kind == GRAM_CHAR) ascii_bits(g, &e);
            g->el[k++] = e;
            if (e.kind == GRAM_ALT) g->alts[na++] = k;
        }
    }
    g->alt_off[g->n_rules] = na;
    for (int r = 0; r < ps.n_rules; r++) free(ps.rules[r].v);
    free(ps.rules);
    free(ps.defined);
    ps.rules = NULL;
    ps.defined = NULL;
    ps.n_rules = 0;
    if (gram_check(g, err, errlen)) {
        model_grammar_unref(g);
        g = NULL;
    } else {
        g->shared = gram_shared_new(); /* NULL (out of memory): every matcher keeps its own */
    }
    goto out;
oom:
    snprintf(err, errlen, "out of memory");
    if (g) {
        if (!g->names) g->names = ps.names, ps.names = NULL;
        model_grammar_unref(g);
    }
    g = NULL;
out:
    free(ps.ht);
    if (ps.names) free_ps(&ps);
    else {
        for (int r = 0; r < ps.n_rules; r++) free(ps.rules[r].v);
        free(ps.rules);
        free(ps.defined);
        free(ps.ranges);
    }
    return g;
}

model_grammar *model_grammar_ref(model_grammar *g)
{
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void model_grammar_unref(model_grammar *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    if (g->names)
        for (int i = 0; i < g->n_rules; i++) free(g->names[i]);
    free(g->names);
    free(g->el);
    free(g->ranges);
    free(g->rule_start);
    free(g->alt_off);
    free(g->alts);
    gram_shared_free(g->shared);
    free(g);
}

int model_grammar_n_rules(const model_grammar *g)
{
    return g->n_rules;
}

/* json_object: RFC 8259's grammar with whitespace limited to one optional space between tokens
 * (a model that has never seen JSON would otherwise spend its tokens on whitespace), numbers'
 * digits bounded (16 digits, exponents of two: every such number is a finite double), the object last (nothing after its
 * closing brace, so the choice ends there). Written for tandem from RFC 8259 section 2-7. */
const char *model_grammar_json_object(void)
{
    return "root ::= object\n"
           "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
           "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\"\n"
           "member ::= string ws \":\" ws value ws\n"
           "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
           "string ::= \"\\\"\" char* \"\\\"\"\n"
           "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
           "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
           "ws ::= \" \"?\n";
}
