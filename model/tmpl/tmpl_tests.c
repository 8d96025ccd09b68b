/* model/tmpl/tmpl_tests.c — jinja2's tests (`x is defined`, `x is divisibleby 3`,
 * select("equalto")...). Each answers as jinja2 3.1's does for Python values; `number` counts
 * booleans, `integer` does not, `iterable` and `sequence` are true for undefined (jinja2's
 * Undefined iterates and has a length). */
#include "model/tmpl/tmpl_int.h"
#include <string.h>

enum {
    T_DEFINED, T_UNDEFINED, T_NONE, T_BOOLEAN, T_FALSE, T_TRUE, T_INTEGER, T_FLOAT, T_NUMBER,
    T_STRING, T_MAPPING, T_SEQUENCE, T_ITERABLE, T_CALLABLE, T_SAMEAS, T_ESCAPED, T_IN, T_LOWER,
    T_UPPER, T_ODD, T_EVEN, T_DIVISIBLEBY, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE, T_FILTER, T_TEST,
};

static const struct {
    const char *name;
    int id;
} tests[] = {
    {"defined", T_DEFINED},   {"undefined", T_UNDEFINED}, {"none", T_NONE},         {"boolean", T_BOOLEAN},
    {"false", T_FALSE},       {"true", T_TRUE},           {"integer", T_INTEGER},   {"float", T_FLOAT},
    {"number", T_NUMBER},     {"string", T_STRING},       {"mapping", T_MAPPING},   {"sequence", T_SEQUENCE},
    {"iterable", T_ITERABLE}, {"callable", T_CALLABLE},   {"sameas", T_SAMEAS},     {"escaped", T_ESCAPED},
    {"in", T_IN},             {"lower", T_LOWER},         {"upper", T_UPPER},       {"odd", T_ODD},
    {"even", T_EVEN},         {"divisibleby", T_DIVISIBLEBY}, {"==", T_EQ},         {"eq", T_EQ},
    {"equalto", T_EQ},        {"!=", T_NE},               {"ne", T_NE},             {"<", T_LT},
    {"lt", T_LT},             {"lessthan", T_LT},         {"<=", T_LE},             {"le", T_LE},
    {">", T_GT},              {"gt", T_GT},               {"greaterthan", T_GT},    {">=", T_GE},
    {"ge", T_GE},             {"filter", T_FILTER},       {"test", T_TEST},
};

#define NTESTS (int)(sizeof tests / sizeof *tests)

int model_tmpl_test_id(const char *name, size_t len)
{
    for (int i = 0; i < NTESTS; i++)
        if (strlen(tests[i].name) == len && !memcmp(tests[i].name, name, len)) return i;
    return -1;
}

const char *model_tmpl_test_name(int id) { return id >= 0 && id < NTESTS ? tests[id].name : "?"; }

static int one_arg(tmpl_rt *r, const tmpl_args *a, const char *name, tmpl_val *v)
{
    if (a->npos + a->nkw != 1)
        return model_tmpl_fail(r, "TypeError", "test '%s' takes exactly one argument (%zu given)", name, a->npos + a->nkw);
    *v = a->npos ? a->pos[0] : a->kw[0];
    return 0;
}

/* value % n == want (odd/even/divisibleby), with Python's operators */
static int mod_is(tmpl_rt *r, tmpl_val v, tmpl_val n, int64_t want, bool *res)
{
    tmpl_val m;
    if (model_tmpl_binop(r, TB_MOD, v, n, &m)) return -1;
    int eq = model_tmpl_eq(r, m, tmpl_int(want), 0);
    tmpl_decref(r, m);
    if (eq < 0) return -1;
    *res = eq;
    return 0;
}

static bool str_case(tmpl_rt *r, tmpl_val v, bool upper, bool *res)
{
    proto_buf b = {.max = r->lim.max_output};
    if (model_tmpl_str_of(r, v, &b)) {
        proto_buf_deinit(&b);
        return false;
    }
    *res = model_tmpl_str_is(b.p ? b.p : "", b.len, upper ? TMPL_IS_UPPER : TMPL_IS_LOWER);
    proto_buf_deinit(&b);
    return true;
}

int model_tmpl_test(tmpl_rt *r, int id, tmpl_val v, const tmpl_args *a, bool *res)
{
    if (tmpl_step(r, 1)) return -1;
    if (id < 0 || id >= NTESTS) return model_tmpl_fail(r, "TemplateRuntimeError", "no such test");
    int t = tests[id].id;
    const char *name = tests[id].name;
    bool binary = t == T_SAMEAS || t == T_IN || t == T_DIVISIBLEBY || (t >= T_EQ && t <= T_GE);
    if (!binary && (a->npos || a->nkw))
        return model_tmpl_fail(r, "TypeError", "test '%s' takes no arguments", name);
    tmpl_val x = tmpl_none();
    if (binary && one_arg(r, a, name, &x)) return -1;
    switch (t) {
    case T_DEFINED: *res = v.kind != TMPL_UNDEF; return 0;
    case T_UNDEFINED: *res = v.kind == TMPL_UNDEF; return 0;
    case T_NONE: *res = v.kind == TMPL_NONE; return 0;
    case T_BOOLEAN: *res = v.kind == TMPL_BOOL; return 0;
    case T_FALSE: *res = v.kind == TMPL_BOOL && !v.u.i; return 0;
    case T_TRUE: *res = v.kind == TMPL_BOOL && v.u.i; return 0;
    case T_INTEGER: *res = v.kind == TMPL_INT; return 0;
    case T_FLOAT: *res = v.kind == TMPL_FLOAT; return 0;
    case T_NUMBER: *res = tmpl_is_num(v); return 0;
    case T_STRING: *res = v.kind == TMPL_STR; return 0;
    case T_MAPPING: *res = v.kind == TMPL_DICT; return 0;
    case T_SEQUENCE: /* len() and __getitem__: str, list, tuple, range, dict, undefined */
        *res = v.kind == TMPL_STR || v.kind == TMPL_DICT || v.kind == TMPL_UNDEF ||
               (v.kind == TMPL_LIST && (v.u.o->sub == TMPL_SEQ_LIST || v.u.o->sub == TMPL_SEQ_TUPLE || v.u.o->sub == TMPL_SEQ_RANGE));
        return 0;
    case T_ITERABLE:
        *res = v.kind == TMPL_STR || v.kind == TMPL_LIST || v.kind == TMPL_DICT || v.kind == TMPL_UNDEF || v.kind == TMPL_LOOP;
        return 0;
    case T_CALLABLE: /* Python's callable(): Undefined and LoopContext define __call__ too */
        *res = (v.kind == TMPL_FUNC && v.u.o->sub != TMPL_FN_CYCLER) || v.kind == TMPL_UNDEF || v.kind == TMPL_LOOP;
        return 0;
    case T_SAMEAS:
        if (v.kind != x.kind) *res = false;
        else if (tmpl_is_obj(v) && v.kind != TMPL_UNDEF) *res = v.u.o == x.u.o;
        else if (v.kind == TMPL_FLOAT) *res = false; /* distinct float objects */
        else if (v.kind == TMPL_INT) *res = v.u.i == x.u.i && v.u.i >= -5 && v.u.i <= 256; /* CPython's small ints */
        else *res = v.kind == TMPL_UNDEF ? false : v.u.i == x.u.i;
        return 0;
    case T_ESCAPED: *res = v.kind == TMPL_STR && (v.u.o->flags & TMPL_OF_SAFE); return 0;
    case T_IN: return model_tmpl_contains(r, x, v, res);
    case T_LOWER: return str_case(r, v, false, res) ? 0 : -1;
    case T_UPPER: return str_case(r, v, true, res) ? 0 : -1;
    case T_ODD: return mod_is(r, v, tmpl_int(2), 1, res);
    case T_EVEN: return mod_is(r, v, tmpl_int(2), 0, res);
    case T_DIVISIBLEBY: return mod_is(r, v, x, 0, res);
    case T_EQ: return model_tmpl_compare(r, TC_EQ, v, x, res);
    case T_NE: return model_tmpl_compare(r, TC_NE, v, x, res);
    case T_LT: return model_tmpl_compare(r, TC_LT, v, x, res);
    case T_LE: return model_tmpl_compare(r, TC_LE, v, x, res);
    case T_GT: return model_tmpl_compare(r, TC_GT, v, x, res);
    case T_GE: return model_tmpl_compare(r, TC_GE, v, x, res);
    case T_FILTER:
        *res = v.kind == TMPL_STR && model_tmpl_filter_id(tmpl_s(v)->s, tmpl_s(v)->len) >= 0;
        return 0;
    case T_TEST:
        *res = v.kind == TMPL_STR && model_tmpl_test_id(tmpl_s(v)->s, tmpl_s(v)->len) >= 0;
        return 0;
    }
    return model_tmpl_fail(r, "TemplateRuntimeError", "no such test");
}
