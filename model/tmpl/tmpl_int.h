/* model/tmpl/tmpl_int.h — internals of the chat-template interpreter (model/tmpl_*.c only).
 *
 * Pipeline: tmpl_lex.c turns the source into tokens (jinja2's lexer rules, trim_blocks and
 * lstrip_blocks on), tmpl_parse*.c builds an AST of tmpl_node, tmpl_eval.c / tmpl_expr.c walk it.
 * Values (tmpl_val) are Python values: immediates (undefined, None, bool, int, float) inline,
 * everything else a heap object (tmpl_obj) with a reference count.
 *
 * Memory plan. Constants of the compiled template (string literals, names) are IMMORTAL objects:
 * they live in the template, are shared by concurrent renders and are never written while
 * rendering (their count is not touched). Every object made while rendering belongs to that
 * render (tmpl_rt): it is linked into the render's live list, counted against its memory limit,
 * and freed when its count drops to zero. Lists and dicts are immutable once built (the sandbox
 * forbids append/update), so cycles can only pass through the mutable objects (namespaces, loop
 * contexts, scopes captured by macros); whatever is still live when the render ends (cycles, or
 * temporaries dropped on an error path) is swept from the live list in one pass.
 *
 * Names: non-static functions are model_tmpl_*; internal types and inline helpers tmpl_*. */
#ifndef TANDEM_MODEL_TMPL_INT_H
#define TANDEM_MODEL_TMPL_INT_H
#include "model/tmpl/tmpl.h"
#include "proto/buf.h"
#include "proto/utf8.h"
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------ values */

enum tmpl_kind {
    TMPL_UNDEF, /* jinja2 Undefined: prints "", is false, iterates empty, fails on other use */
    TMPL_NONE,
    TMPL_BOOL,
    TMPL_INT, /* Python int, limited to int64 */
    TMPL_FLOAT,
    TMPL_STR,
    TMPL_LIST, /* list, tuple, generator, dict views, range (tmpl_seq kind in obj->sub) */
    TMPL_DICT,
    TMPL_NS,    /* namespace(): a dict of attributes, the one mutable container */
    TMPL_FUNC,  /* macro, caller, builtin function, bound method, cycler, joiner */
    TMPL_LOOP,  /* the `loop` variable of a for loop */
    TMPL_SCOPE, /* internal: a variable scope captured by a macro (never a template value) */
};

enum tmpl_seq {
    TMPL_SEQ_LIST,
    TMPL_SEQ_TUPLE,
    TMPL_SEQ_GEN,     /* generator (select, map, ...): no len, always true, iterates once */
    TMPL_SEQ_REVITER, /* reversed(list): like a generator, prints as list_reverseiterator */
    TMPL_SEQ_KEYS,    /* dict.keys() / .values() / .items(): sized views */
    TMPL_SEQ_VALUES,
    TMPL_SEQ_ITEMS,
    TMPL_SEQ_RANGE, /* range(): materialized (at most 100000 items, as the sandbox allows) */
};

/* Why an undefined value is undefined: selects jinja2's message when it is used. */
enum tmpl_undef_hint {
    TMPL_UH_PLAIN, /* no information: "'<name>' is undefined" with name in u.o, or a bare one */
    TMPL_UH_NAME,  /* variable u.o (str) not found */
    TMPL_UH_ATTR,  /* object of kind `owner` has no attribute u.o (str) */
    TMPL_UH_ITEM,  /* object of kind `owner` has no element (message preformatted in u.o) */
    TMPL_UH_MSG,   /* u.o is the whole message (str) */
    TMPL_UH_UNSAFE /* sandbox: u.o is the message; raises SecurityError when used */
};

#define TMPL_IMMORTAL (-1)

typedef struct tmpl_obj {
    int32_t refs; /* TMPL_IMMORTAL: owned by the compiled template */
    uint8_t kind; /* enum tmpl_kind */
    uint8_t sub;  /* TMPL_LIST: enum tmpl_seq; TMPL_FUNC: enum tmpl_fn */
    uint16_t flags;
    size_t bytes; /* accounted size (struct + owned arrays), for the memory limit */
    struct tmpl_obj *prev, *next; /* the render's live list */
} tmpl_obj;

typedef struct tmpl_val {
    uint8_t kind;  /* enum tmpl_kind */
    uint8_t hint;  /* TMPL_UNDEF: enum tmpl_undef_hint */
    uint8_t owner; /* TMPL_UNDEF with TMPL_UH_ATTR: kind (or TMPL_SEQ_* + 16 for lists) lacking it */
    union {
        int64_t i; /* bool (0/1), int */
        double f;
        tmpl_obj *o; /* heap kinds; TMPL_UNDEF: a str with the name/message, or NULL */
    } u;
} tmpl_val;

typedef struct tmpl_str {
    tmpl_obj h;
    size_t len;
    size_t ncp;  /* code points (== len when ASCII), SIZE_MAX until counted */
    uint32_t hash; /* 0 until computed */
    size_t cap;  /* bytes allocated for s (>= len + 1) */
    char s[];    /* UTF-8, NUL-terminated (may contain NUL when the context did) */
} tmpl_str;

typedef struct tmpl_list {
    tmpl_obj h;
    size_t n, cap;
    size_t pos; /* generators: items already consumed */
    int64_t r_start, r_stop, r_step; /* TMPL_SEQ_RANGE: for printing */
    tmpl_val *v;
    char *deferred; /* generators: the error to raise once the items run out (malloc'ed) */
} tmpl_list;

typedef struct tmpl_dict { /* insertion-ordered; hash index once it grows past a few keys */
    tmpl_obj h;
    size_t n, cap;
    tmpl_val *k, *v;
    uint32_t *idx; /* open addressing, slot = entry + 1 (0: empty); NULL while small */
    size_t idx_cap;
} tmpl_dict;

struct tmpl_node;
struct tmpl_scope;

enum tmpl_fn {
    TMPL_FN_GLOBAL, /* range, namespace, dict, raise_exception, strftime_now, cycler, joiner,
                       lipsum: id = enum tmpl_global */
    TMPL_FN_METHOD, /* bound method: self.method(...) with id = enum tmpl_method */
    TMPL_FN_MACRO,  /* node = the macro, scope = where it was defined */
    TMPL_FN_CALLER, /* the body of a {% call %} block: node = the call block */
    TMPL_FN_CYCLER, /* cycler(...): self = list of items, state = position */
    TMPL_FN_JOINER, /* joiner(sep): self = sep, state = called yet */
};

typedef struct tmpl_func {
    tmpl_obj h;
    int id;
    int64_t state;
    tmpl_val self;
    const struct tmpl_node *node;
    struct tmpl_scope *scope; /* a counted reference (TMPL_SCOPE object) */
} tmpl_func;

typedef struct tmpl_loop {
    tmpl_obj h;
    tmpl_val seq; /* the items (a list), after the loop's filter */
    size_t i, n;
    int depth; /* 1-based */
    bool changed_set;
    tmpl_val changed_last;
    const struct tmpl_node *node;   /* the for node (recursive loops) */
    struct tmpl_scope *scope;       /* where the for statement runs (recursive loops) */
} tmpl_loop;

typedef struct tmpl_scope {
    tmpl_obj h;
    struct tmpl_scope *parent; /* counted */
    uint32_t n, cap;
    int32_t *syms;
    tmpl_val *vals;
} tmpl_scope;

/* Flags on heap objects. */
#define TMPL_OF_SAFE 0x1  /* str marked |safe (prints the same; kept for `is escaped`) */
#define TMPL_OF_GROUP 0x2 /* tuple from |groupby: also has attributes grouper and list */

static inline tmpl_val tmpl_undef(void) { return (tmpl_val){.kind = TMPL_UNDEF}; }
static inline tmpl_val tmpl_none(void) { return (tmpl_val){.kind = TMPL_NONE}; }
static inline tmpl_val tmpl_bool(bool b) { return (tmpl_val){.kind = TMPL_BOOL, .u.i = b}; }
static inline tmpl_val tmpl_int(int64_t i) { return (tmpl_val){.kind = TMPL_INT, .u.i = i}; }
static inline tmpl_val tmpl_float(double f) { return (tmpl_val){.kind = TMPL_FLOAT, .u.f = f}; }
static inline tmpl_val tmpl_obj_val(tmpl_obj *o) { return (tmpl_val){.kind = o->kind, .u.o = o}; }
static inline bool tmpl_is_obj(tmpl_val v) { return v.kind >= TMPL_STR || (v.kind == TMPL_UNDEF && v.u.o); }
static inline tmpl_str *tmpl_s(tmpl_val v) { return (tmpl_str *)v.u.o; }
static inline tmpl_list *tmpl_l(tmpl_val v) { return (tmpl_list *)v.u.o; }
static inline tmpl_dict *tmpl_d(tmpl_val v) { return (tmpl_dict *)v.u.o; }
static inline tmpl_func *tmpl_fn(tmpl_val v) { return (tmpl_func *)v.u.o; }
static inline tmpl_loop *tmpl_lp(tmpl_val v) { return (tmpl_loop *)v.u.o; }
static inline bool tmpl_is_num(tmpl_val v) { return v.kind == TMPL_BOOL || v.kind == TMPL_INT || v.kind == TMPL_FLOAT; }
static inline int tmpl_seq_kind(tmpl_val v) { return v.kind == TMPL_LIST ? v.u.o->sub : -1; }
/* Lists that behave as iterators: always true, no len(), consumed by iteration. */
static inline bool tmpl_is_iter(tmpl_val v)
{
    return v.kind == TMPL_LIST && (v.u.o->sub == TMPL_SEQ_GEN || v.u.o->sub == TMPL_SEQ_REVITER);
}

/* ------------------------------------------- text: Python's character classes and case mappings
 * (model/tmpl/tmpl_unicode.c, from ICU's Unicode data). Strings are built in proto/buf.h's
 * proto_buf, bounded by {.max = r->lim.max_output}; UTF-8 is proto/utf8.h's. */

/* One character, as CPython's str methods decide it. */
bool model_tmpl_py_isspace(uint32_t cp);   /* isspace(): bidi WS, B, S or category Zs */
bool model_tmpl_py_printable(uint32_t cp); /* isprintable(): ' ' or not C* / Z* (repr's rule) */
bool model_tmpl_py_isalpha(uint32_t cp);   /* L* */
bool model_tmpl_py_isdecimal(uint32_t cp); /* Numeric_Type Decimal */
bool model_tmpl_py_isdigit(uint32_t cp);   /* Decimal or Digit */
bool model_tmpl_py_isnumeric(uint32_t cp); /* any Numeric_Type */
bool model_tmpl_py_isalnum(uint32_t cp);   /* alpha or numeric */
bool model_tmpl_py_isword(uint32_t cp);    /* Python regex \w: alnum or '_' */
/* A character of an identifier (str.isidentifier: XID_Start or '_' first, XID_Continue after). */
bool model_tmpl_py_isident(uint32_t cp, bool first);
bool model_tmpl_cp_upper(uint32_t cp); /* the Uppercase property */
bool model_tmpl_cp_lower(uint32_t cp); /* the Lowercase property */
bool model_tmpl_cp_title(uint32_t cp); /* category Lt (ǅ) */
bool model_tmpl_cp_cased(uint32_t cp); /* the Cased property */
/* A whole string: str.isalpha() ... str.istitle() (false for ""). */
enum { TMPL_IS_ALPHA, TMPL_IS_DECIMAL, TMPL_IS_DIGIT, TMPL_IS_NUMERIC, TMPL_IS_ALNUM, TMPL_IS_SPACE,
       TMPL_IS_LOWER, TMPL_IS_UPPER, TMPL_IS_TITLE };
bool model_tmpl_str_is(const char *s, size_t n, int cls);
/* s[*b..*e) is s[0..n) without Python whitespace at either end (str.strip()'s bounds). */
void model_tmpl_py_trim(const char *s, size_t n, size_t *b, size_t *e);
/* Appends s converted as Python's str methods do (full case mappings: ß -> SS, final sigma).
 * mode: 'u' upper, 'l' lower, 'f' casefold, 't' title (str.title), 'c' capitalize, 's' swapcase.
 * 0, or -1 when out fails (its bound or memory). */
int model_tmpl_case(proto_buf *out, const char *s, size_t n, int mode);

/* ------------------------------------------------------------------------------------- AST */

enum tmpl_node_type {
    /* expressions */
    TN_CONST,    /* val */
    TN_NAME,     /* sym; op = enum tmpl_global fallback (0: none) */
    TN_GETATTR,  /* a.val (val: str); op = attribute id for str/dict/list methods */
    TN_GETITEM,  /* a[b] */
    TN_SLICE,    /* as b of TN_GETITEM: a:b:c, each may be NULL */
    TN_CALL,     /* a(kids..., syms[i]=kids2[i]...) */
    TN_FILTER,   /* a|fn(kids..., kwargs) ; a NULL inside filter blocks */
    TN_TEST,     /* a is fn(kids...) */
    TN_BINOP,    /* a op b (op: TOK_ADD...) */
    TN_CONCAT,   /* kids[0] ~ kids[1] ~ ... */
    TN_NEG,      /* -a */
    TN_POS,      /* +a */
    TN_NOT,      /* not a */
    TN_AND,      /* a and b */
    TN_OR,       /* a or b */
    TN_COMPARE,  /* a op0 kids[0] op1 kids[1] ... (ops in cmp[]) */
    TN_CONDEXPR, /* b if a else c (c may be NULL) */
    TN_LIST,     /* [kids] */
    TN_TUPLE,    /* (kids) */
    TN_DICT,     /* {kids[i]: kids2[i]} */
    TN_NSREF,    /* assignment target sym.val */
    /* statements */
    TN_TEXT,      /* val: template data */
    TN_PRINT,     /* {{ a }} */
    TN_IF,        /* if a: kids else kids2 */
    TN_FOR,       /* for a in b if c: kids else kids2; flags TNF_RECURSIVE */
    TN_SET,       /* a = b */
    TN_SETBLOCK,  /* a = body (kids) through filter chain b (may be NULL) */
    TN_MACRO,     /* sym(syms..., defaults kids2 for the last nkids2 params): kids */
    TN_CALLBLOCK, /* {% call(syms) a %} kids: a is TN_CALL */
    TN_FILTERBLK, /* body kids through filter chain b */
    TN_WITH,      /* syms[i] = kids2[i] ... : kids */
    TN_SCOPED,    /* block / generation: kids in a child scope */
    TN_BREAK,
    TN_CONTINUE,
};

/* Comparison operators (TN_COMPARE cmp[]). */
enum tmpl_cmp { TC_EQ, TC_NE, TC_LT, TC_LE, TC_GT, TC_GE, TC_IN, TC_NOTIN };

/* Binary operators (TN_BINOP op). */
enum tmpl_binop { TB_ADD, TB_SUB, TB_MUL, TB_DIV, TB_FLOORDIV, TB_MOD, TB_POW };

#define TNF_RECURSIVE 0x1 /* for ... recursive */
#define TNF_VARARGS 0x2   /* macro body reads `varargs` */
#define TNF_KWARGS 0x4    /* macro body reads `kwargs` */
#define TNF_CALLER 0x8    /* macro body reads `caller` */
#define TNF_DYNARGS 0x10  /* call/filter with *args or **kwargs: c = *args, kids2 tail = **kw */

typedef struct tmpl_node {
    uint8_t type; /* enum tmpl_node_type */
    uint8_t op;   /* TN_BINOP: enum tmpl_binop; TN_NAME: global; TN_GETATTR: method id */
    uint16_t flags;
    int line;
    int32_t sym; /* TN_NAME, TN_NSREF, TN_MACRO; TN_FILTER/TN_TEST: filter/test id */
    struct tmpl_node *a, *b, *c;
    struct tmpl_node **kids, **kids2;
    uint32_t nkids, nkids2;
    int32_t *syms; /* kwarg names / parameters (symbol ids); TN_COMPARE: enum tmpl_cmp ops */
    uint32_t nsyms;
    tmpl_val val; /* TN_CONST, TN_TEXT, TN_GETATTR, TN_NSREF: an immortal value */
} tmpl_node;

/* ---------------------------------------------------------------------------- compiled form */

struct model_tmpl {
    tmpl_node **body;
    uint32_t nbody;
    char **names; /* symbol id -> name */
    tmpl_val *name_vals; /* symbol id -> the name as an immortal str (undefined messages) */
    uint32_t *name_len;
    uint32_t nnames;
    uint32_t *name_idx; /* hash index over names (slot = id + 1) */
    uint32_t name_idx_cap;
    int32_t sym_loop, sym_varargs, sym_kwargs, sym_caller; /* well-known symbols (-1: unused) */
    /* everything the parser allocated, freed together */
    void **allocs;
    size_t nallocs, cap_allocs;
};

/* Symbol id of name in t, or -1 when the template never mentions it. Thread-safe (read-only). */
int32_t model_tmpl_sym_find(const model_tmpl *t, const char *name, size_t len);
/* The hash of a str (FNV-1a of its bytes; never 0): dict lookups and compile-time constants. */
uint32_t model_tmpl_str_hash(const char *s, size_t n);
static inline uint32_t tmpl_str_hash(tmpl_str *s)
{
    if (!s->hash) s->hash = model_tmpl_str_hash(s->s, s->len); /* immortal ones come hashed */
    return s->hash;
}

/* -------------------------------------------------------------------------------- tokenizer */

enum tmpl_tok_type {
    TOK_EOF,
    TOK_DATA,        /* template text (already whitespace-processed) */
    TOK_VAR_BEGIN,   /* {{ */
    TOK_VAR_END,     /* }} */
    TOK_BLOCK_BEGIN, /* {% */
    TOK_BLOCK_END,   /* %} */
    TOK_NAME,
    TOK_STRING, /* value unescaped */
    TOK_INT,
    TOK_FLOAT,
    /* operators */
    TOK_ADD, TOK_SUB, TOK_DIV, TOK_FLOORDIV, TOK_MUL, TOK_MOD, TOK_POW, TOK_TILDE,
    TOK_LBRACKET, TOK_RBRACKET, TOK_LPAREN, TOK_RPAREN, TOK_LBRACE, TOK_RBRACE,
    TOK_EQ, TOK_NE, TOK_GT, TOK_GTEQ, TOK_LT, TOK_LTEQ, TOK_ASSIGN, TOK_DOT, TOK_COLON,
    TOK_PIPE, TOK_COMMA, TOK_SEMICOLON,
};

typedef struct tmpl_tok {
    uint8_t type;
    int line;
    const char *s; /* TOK_DATA/TOK_NAME/TOK_STRING: text (into the lexer's storage) */
    size_t len;
    int64_t i;
    double f;
} tmpl_tok;

typedef struct tmpl_toks {
    tmpl_tok *v;
    size_t n, cap;
    char *src;   /* the source with newlines normalized: TOK_DATA and TOK_NAME point here */
    char *store; /* unescaped string literals (fixed capacity, never moves) */
    size_t store_n, store_cap;
} tmpl_toks;

/* Tokenizes src (newlines normalized, one trailing newline dropped, as jinja2 does). Returns 0,
 * or -1 with "TemplateSyntaxError: ... (line N)" in err. Free with model_tmpl_toks_free. */
int model_tmpl_lex(const char *src, size_t len, tmpl_toks *out, char *err, size_t errlen);
void model_tmpl_toks_free(tmpl_toks *t);
const char *model_tmpl_tok_name(int type);

/* Parses tokens into t->body (t's allocations). Returns 0 or -1 with err. */
int model_tmpl_parse(model_tmpl *t, const tmpl_toks *toks, char *err, size_t errlen);

/* --------------------------------------------------------------------------------- render */

enum tmpl_err_kind { TMPL_EK_NONE, TMPL_EK_RAISED, TMPL_EK_RUNTIME, TMPL_EK_LIMIT, TMPL_EK_CONTEXT };

typedef struct tmpl_rt {
    const model_tmpl *t;
    model_tmpl_limits lim;
    time_t now;
    tmpl_obj live;   /* sentinel of the live list */
    tmpl_obj *pending; /* objects waiting to be freed (freeing is iterative, not recursive) */
    bool freeing;
    size_t mem;      /* accounted bytes */
    size_t peak;     /* high-water mark of mem */
    uint64_t steps;
    uintptr_t
        stack0;      /* the render's frame: the C stack used below it is bounded (TMPL_STACK_MAX) */
    int depth;       /* macro call depth */
    int line;        /* line of the node being evaluated (error messages) */
    proto_buf *out;   /* where {{ }} and text go (a macro call redirects it) */
    enum tmpl_err_kind ek;
    char err[1024];
} tmpl_rt;

/* Records an error (the first one wins) and returns -1. kind "TypeError", "UndefinedError", ... */
int model_tmpl_fail(tmpl_rt *r, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int model_tmpl_fail_limit(tmpl_rt *r, const char *what);
/* Raises again an error recorded earlier (its full text, as r->err held it). */
int model_tmpl_fail_again(tmpl_rt *r, const char *text);
/* Generators run lazily in jinja2: raises a generator's deferred error, if any, now that it was
 * consumed to the end (and forgets it, as an exhausted generator would). */
int model_tmpl_gen_exhausted(tmpl_rt *r, tmpl_list *l);
/* One unit of work; fails when the step budget is spent. */
/* The C stack a render may use below its entry. The depth limits bound macro calls (max_depth)
 * and parsed nesting (200) apart, but their costs multiply: a macro recursing from inside a long
 * filter chain took ~86 KB a level and crashed at depth 100 on an 8 MiB stack. Counted where
 * every evaluation passes (tmpl_step): past it the render fails, never the process. Sanitizer
 * builds' frames are several times larger. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TMPL_STACK_MAX ((uintptr_t)4 << 20)
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define TMPL_STACK_MAX ((uintptr_t)4 << 20)
#endif
#endif
#ifndef TMPL_STACK_MAX
#define TMPL_STACK_MAX ((uintptr_t)768 << 10)
#endif

static inline int tmpl_step(tmpl_rt *r, uint64_t n)
{
    r->steps += n;
    if (r->steps > r->lim.max_steps) return model_tmpl_fail_limit(r, "evaluation steps");
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    return r->stack0 > sp && r->stack0 - sp > TMPL_STACK_MAX ? model_tmpl_fail_limit(r, "C stack")
                                                             : 0;
}

/* Object life cycle (tmpl_value.c). new_* return a value with one reference, or fail (-1 / NULL
 * with the error recorded) when memory or limits run out. */
void *model_tmpl_obj_new(tmpl_rt *r, int kind, size_t size);
int model_tmpl_account(tmpl_rt *r, tmpl_obj *o, size_t old_extra, size_t new_extra);
void model_tmpl_obj_free(tmpl_rt *r, tmpl_obj *o);
/* Frees every object still alive; returns how many there were. */
size_t model_tmpl_sweep(tmpl_rt *r);
static inline void tmpl_incref(tmpl_val v)
{
    if (tmpl_is_obj(v) && v.u.o->refs != TMPL_IMMORTAL) v.u.o->refs++;
}
static inline void tmpl_decref(tmpl_rt *r, tmpl_val v)
{
    if (tmpl_is_obj(v) && v.u.o->refs != TMPL_IMMORTAL && --v.u.o->refs == 0)
        model_tmpl_obj_free(r, v.u.o);
}
static inline void tmpl_decref_obj(tmpl_rt *r, tmpl_obj *o)
{
    if (o && o->refs != TMPL_IMMORTAL && --o->refs == 0) model_tmpl_obj_free(r, o);
}

int model_tmpl_str_new(tmpl_rt *r, const char *s, size_t n, tmpl_val *out);
int model_tmpl_str_from_buf(tmpl_rt *r, proto_buf *b, tmpl_val *out); /* frees b */
int model_tmpl_str_cat(tmpl_rt *r, tmpl_val a, const char *s, size_t n, tmpl_val *out); /* consumes a */
size_t model_tmpl_str_ncp(tmpl_str *s);
int model_tmpl_list_new(tmpl_rt *r, int seq, size_t cap, tmpl_val *out);
int model_tmpl_list_push(tmpl_rt *r, tmpl_val list, tmpl_val item); /* consumes item */
int model_tmpl_dict_new(tmpl_rt *r, int kind, size_t cap, tmpl_val *out);
int model_tmpl_dict_set(tmpl_rt *r, tmpl_val d, tmpl_val key, tmpl_val val); /* consumes both */
/* Looks key up: 1 found (*val borrowed), 0 absent, -1 error (unhashable key). */
int model_tmpl_dict_get(tmpl_rt *r, tmpl_dict *d, tmpl_val key, tmpl_val *val);
int model_tmpl_dict_get_str(tmpl_dict *d, const char *s, size_t n, tmpl_val *val);
int model_tmpl_func_new(tmpl_rt *r, int fn, int id, tmpl_val self, tmpl_val *out); /* self borrowed */
tmpl_val model_tmpl_undef_name(tmpl_val name_str);                  /* name borrowed */
int model_tmpl_undef_attr(tmpl_rt *r, tmpl_val obj, tmpl_val name, tmpl_val *out);
int model_tmpl_undef_msg(tmpl_rt *r, int hint, const char *msg, tmpl_val *out);
/* Raises jinja2's UndefinedError for u (or SecurityError for a sandbox one); returns -1. */
int model_tmpl_undef_fail(tmpl_rt *r, tmpl_val u);

/* Python semantics (tmpl_value.c). */
bool model_tmpl_truthy(tmpl_val v);
/* ==; -1 on error (too deep). */
int model_tmpl_eq(tmpl_rt *r, tmpl_val a, tmpl_val b, int depth);
/* <: 1/0, -1 on error (TypeError for unorderable types). */
int model_tmpl_lt(tmpl_rt *r, tmpl_val a, tmpl_val b);
int model_tmpl_hash(tmpl_rt *r, tmpl_val v, uint32_t *h, int depth);
const char *model_tmpl_type_name(tmpl_val v); /* Python's type(v).__name__ */
/* Length as len(): 0 and *n, or -1 with TypeError. */
int model_tmpl_len(tmpl_rt *r, tmpl_val v, size_t *n);
/* Materializes an iterable as a list of items (new reference to a list; a list argument is
 * returned shared). Undefined iterates empty; a generator is consumed. TypeError otherwise. */
int model_tmpl_iter(tmpl_rt *r, tmpl_val v, tmpl_val *list);

/* Printing (tmpl_print.c). str(): what {{ v }} prints; repr(): inside containers. */
int model_tmpl_str_of(tmpl_rt *r, tmpl_val v, proto_buf *b);
int model_tmpl_repr(tmpl_rt *r, tmpl_val v, proto_buf *b, int depth);
/* v as a str value (new reference; a str is returned shared). */
int model_tmpl_to_str(tmpl_rt *r, tmpl_val v, tmpl_val *out);
void model_tmpl_float_repr(double f, char out[32]);
typedef struct tmpl_json_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: single line */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} tmpl_json_opts;
int model_tmpl_tojson(tmpl_rt *r, tmpl_val v, const tmpl_json_opts *o, proto_buf *b);

/* The context: JSON text -> the variables of the root scope (tmpl_ctx.c). conversation: the
 * members of "extra" are variables too, and tools/documents/add_generation_prompt default. */
int model_tmpl_ctx_load(tmpl_rt *r, const char *json, size_t len, tmpl_scope *root, bool conversation);

/* Scopes (tmpl_eval.c). */
tmpl_scope *model_tmpl_scope_new(tmpl_rt *r, tmpl_scope *parent);
int model_tmpl_scope_set(tmpl_rt *r, tmpl_scope *s, int32_t sym, tmpl_val v); /* consumes v */
bool model_tmpl_scope_get(const tmpl_scope *s, int32_t sym, tmpl_val *v);    /* borrowed */
void model_tmpl_scope_clear(tmpl_rt *r, tmpl_scope *s);                      /* drops all variables */

/* Evaluation (tmpl_eval.c, tmpl_expr.c). Each returns 0 with a new reference in *out, or -1. */
int model_tmpl_eval(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, tmpl_val *out);
/* Calls the TN_CALL node n with one more keyword argument name=extra (borrowed): call blocks. */
int model_tmpl_eval_call_with(tmpl_rt *r, tmpl_scope *s, const tmpl_node *n, const char *name, tmpl_val extra,
                              tmpl_val *out);
/* Applies a filter chain (set/filter blocks) whose innermost input is `in` (borrowed). */
int model_tmpl_filter_chain(tmpl_rt *r, tmpl_scope *s, const tmpl_node *chain, tmpl_val in, tmpl_val *out);
int model_tmpl_exec_body(tmpl_rt *r, tmpl_scope *s, tmpl_node *const *body, uint32_t n);
/* Calls a callable with positional args and keyword args (names as symbol ids or strings). */
typedef struct tmpl_args {
    tmpl_val *pos;
    size_t npos;
    const char **kw_names; /* NUL-terminated names */
    tmpl_val *kw;
    size_t nkw;
} tmpl_args;
int model_tmpl_call(tmpl_rt *r, tmpl_val fn, const tmpl_args *a, tmpl_val *out);
/* Macro / caller invocation and recursive loop(...) calls (tmpl_eval.c). */
int model_tmpl_macro_call(tmpl_rt *r, tmpl_func *f, const tmpl_args *a, tmpl_val *out);
int model_tmpl_loop_call(tmpl_rt *r, tmpl_loop *l, const tmpl_args *a, tmpl_val *out);
/* Attributes of loop, cycler and the like: 1 found (*out new), 0 none, -1 error (tmpl_methods.c). */
int model_tmpl_special_attr(tmpl_rt *r, tmpl_val obj, tmpl_str *name, tmpl_val *out);
int model_tmpl_getattr(tmpl_rt *r, tmpl_val obj, tmpl_val name, int method, tmpl_val *out);
int model_tmpl_getitem(tmpl_rt *r, tmpl_val obj, tmpl_val key, tmpl_val *out);
int model_tmpl_binop(tmpl_rt *r, int op, tmpl_val a, tmpl_val b, tmpl_val *out);
int model_tmpl_compare(tmpl_rt *r, int op, tmpl_val a, tmpl_val b, bool *res);
int model_tmpl_contains(tmpl_rt *r, tmpl_val container, tmpl_val item, bool *res);
int model_tmpl_slice(tmpl_rt *r, tmpl_val obj, tmpl_val start, tmpl_val stop, tmpl_val step,
                     tmpl_val *out);

/* Filters and tests (tmpl_filters*.c, tmpl_tests.c): ids resolved at compile time. */
int model_tmpl_filter_id(const char *name, size_t len); /* -1: unknown */
int model_tmpl_test_id(const char *name, size_t len);
const char *model_tmpl_filter_name(int id);
const char *model_tmpl_test_name(int id);
int model_tmpl_filter(tmpl_rt *r, int id, tmpl_val in, const tmpl_args *a, tmpl_val *out);
int model_tmpl_test(tmpl_rt *r, int id, tmpl_val in, const tmpl_args *a, bool *res);
/* Reads argument `name` at position `pos` (or keyword): 1 given (*v borrowed), 0 not given,
 * -1 error (both, or unknown keywords: see model_tmpl_args_check). */
int model_tmpl_arg(tmpl_rt *r, const tmpl_args *a, size_t pos, const char *name, tmpl_val *v);
/* An integer argument as Python's builtins take one (bool counts; anything else, undefined
 * included, is a TypeError "'X' object cannot be interpreted as an integer"). */
int model_tmpl_int_arg(tmpl_rt *r, tmpl_val v, int64_t *i);
/* Python's numeric conversions (tmpl_pynum.c). Python's integers have no bound and ours are
 * 64-bit: where Python's answer is an integer outside int64, these raise
 * model_tmpl_fail_int_range's OverflowError rather than give a wrong number. Each returns 0, or
 * -1 with the error recorded in r. */
int model_tmpl_fail_int_range(tmpl_rt *r);
/* [-2^63, 2^63): the doubles whose integer part an int64 holds */
static inline bool tmpl_f_fits_i64(double f)
{
    return f >= -0x1p63 && f < 0x1p63;
}
/* int(f): ValueError for nan, OverflowError for inf and past int64 */
int model_tmpl_py_int_of_float(tmpl_rt *r, double f, int64_t *out);
/* round(x, nd) for a float and for an int (half to even, exact); OverflowError past the range */
int model_tmpl_py_round_float(tmpl_rt *r, double x, int64_t nd, double *out);
int model_tmpl_py_round_int(tmpl_rt *r, int64_t v, int64_t nd, int64_t *out);
/* jinja2's do_round with method 'ceil' (up) or 'floor': math.ceil/floor(in * 10**prec) /
 * 10**prec with Python's int and float rules at each step; in is a number */
int model_tmpl_py_round_ceil_floor(tmpl_rt *r, bool up, tmpl_val in, int64_t prec, double *out);
/* Fails with TypeError when a has more positionals than max or a keyword not in names. */
int model_tmpl_args_check(tmpl_rt *r, const tmpl_args *a, const char *fname, size_t max,
                          const char *const *names);

/* Methods (tmpl_methods.c), globals (tmpl_globals.c), formatting (tmpl_strfmt.c). */
enum tmpl_global {
    TG_NONE,
    TG_RANGE,
    TG_NAMESPACE,
    TG_DICT,
    TG_RAISE,
    TG_STRFTIME,
    TG_CYCLER,
    TG_JOINER,
    TG_LIPSUM,
};
int model_tmpl_global_id(const char *name, size_t len);
/* Method id for attribute name on str/dict/list/etc (0: not a method of any kind). */
int model_tmpl_method_id(const char *name, size_t len);
/* The bound method obj.name when obj's type has it: 1 (*out new), 0 no such method, -1 error. */
int model_tmpl_method_get(tmpl_rt *r, tmpl_val obj, int id, tmpl_val *out);
int model_tmpl_method_call(tmpl_rt *r, tmpl_func *f, const tmpl_args *a, tmpl_val *out);
int model_tmpl_global_call(tmpl_rt *r, tmpl_func *f, const tmpl_args *a, tmpl_val *out);
/* Shared string operations (tmpl_methods.c), Python semantics. */
int model_tmpl_strip(tmpl_rt *r, tmpl_val s, tmpl_val chars, int which, tmpl_val *out); /* 's' 'l' 'r' */
int model_tmpl_splitlines(tmpl_rt *r, tmpl_str *x, bool keepends, tmpl_val *out);
int model_tmpl_replace(tmpl_rt *r, tmpl_str *s, tmpl_str *old, tmpl_str *new_, int64_t count, tmpl_val *out);
int model_tmpl_center(tmpl_rt *r, tmpl_val self, int64_t width, tmpl_val *out);
/* d's (key, value) tuples as a list of the given TMPL_SEQ_* kind. */
int model_tmpl_dict_items(tmpl_rt *r, tmpl_val d, int seq_kind, tmpl_val *out);
/* str.format / the % operator on strings. */
int model_tmpl_str_format(tmpl_rt *r, tmpl_val fmt, const tmpl_args *a, tmpl_val *out);
int model_tmpl_str_percent(tmpl_rt *r, tmpl_val fmt, tmpl_val args, tmpl_val *out);
/* Attribute path lookup used by map/sort/selectattr: "a.b.0". */
int model_tmpl_attr_path(tmpl_rt *r, tmpl_val obj, tmpl_val path, tmpl_val *out);

#endif
