/* model/tmpl/tmpl.h — chat templates: a Jinja2 interpreter for the language real `chat_template`s
 * use.
 *
 * A template renders exactly as transformers' apply_chat_template does: jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols extension,
 * the globals raise_exception(msg) and strftime_now(fmt), the `generation` tag, and a tojson
 * filter that is Python's json.dumps (no HTML escaping, non-ASCII kept, key order kept).
 * Values follow Python: printing, truthiness, equality, ordering and error messages read as
 * they do there, and the sandbox's rules hold (list.append, dict.update, ... raise
 * SecurityError; range() is limited to 100000 items).
 *
 * Supported: text, {{ }}, {% %}, {# #}, raw, whitespace control (-, +); set (also block set and
 * namespace attributes), if/elif/else, for (else, filter condition, unpacking, loop.*, recursive),
 * break/continue, macro/call with defaults, varargs/kwargs/caller, with, filter blocks, block
 * (inline); literals, attribute/item access, slices, arithmetic, ~, comparisons (chained), in,
 * and/or/not, inline if, str % args and str.format; jinja2's filters and tests (tmpl_filters*.c,
 * tmpl_tests.c), str/dict/list methods (tmpl_methods.c) and the globals range, namespace, dict,
 * cycler, joiner (tmpl_globals.c). Filters that jinja2 runs lazily (map, select, unique, ...)
 * raise their errors only when the result is consumed, as there.
 * Not supported, with a clear error: include, import, extends (no loader), autoescape, the
 * filters pprint, random, urlize, wordwrap, xmlattr, and extension tags other than
 * break/continue/generation. Integers are 64-bit (Python's are unbounded): an operation leaving
 * that range is an error. Objects whose Python repr holds a memory address (generators, bound
 * methods) print without one.
 *
 * Errors: compiling reports "TemplateSyntaxError: <what> (line N)" (unknown filters and tests:
 * "TemplateAssertionError: ..."; inside an if, as in jinja2, only when they run); rendering
 * reports "<PythonExceptionType>: <message> (line N)", except raise_exception(msg), which
 * reports msg alone.
 *
 * Thread safety: a compiled template is immutable; any number of threads may render it at once.
 * Every render has its own state and limits; nothing global is written after the first call.
 *
 * Limits: a hostile template or context cannot exhaust memory or loop forever: every render is
 * bounded in output bytes, live memory, evaluation steps and recursion depth
 * (model_tmpl_limits); exceeding one is an error, never a crash. Parsing bounds nesting at 200
 * levels. A render uses at most 768 KiB of C stack below its entry (4 MiB in sanitizer builds;
 * the depth limits multiply, so this is counted apart: past it the render fails with the "C
 * stack" limit): render on a thread with at least 1 MiB (glibc's default is 8 MiB). Dict keys
 * (a request's tools become dicts) hash from a random start drawn once a process, so keys made to
 * collide cannot slow a render down. */
#ifndef TANDEM_MODEL_TMPL_H
#define TANDEM_MODEL_TMPL_H
#include <stddef.h>
#include <stdint.h>
#include <time.h>

typedef struct model_tmpl model_tmpl;

/* Result codes of model_tmpl_render_ex (model_tmpl_render folds every error into -1). */
enum model_tmpl_status {
    MODEL_TMPL_OK = 0,
    MODEL_TMPL_ERR_RAISED = -1,  /* the template called raise_exception(msg): err is msg itself,
                                    normally a conversation the template rejects (a bad request) */
    MODEL_TMPL_ERR_RUNTIME = -2, /* any other error while rendering ("TypeError: ... (line N)") */
    MODEL_TMPL_ERR_LIMIT = -3,   /* a model_tmpl_limits bound was reached */
    MODEL_TMPL_ERR_CONTEXT = -4, /* context_json is not a JSON object (or too large/deep) */
};

typedef struct model_tmpl_limits {
    size_t max_output; /* bytes of rendered text, and of any one string built while rendering */
    size_t max_memory; /* bytes held by live values at any time during one render */
    uint64_t max_steps; /* evaluated nodes + loop iterations + elements touched by filters */
    int max_depth;      /* nested macro calls; nesting of values printed/compared/serialized */
} model_tmpl_limits;

/* What one render used (filled when model_tmpl_opts.stats is set). */
typedef struct model_tmpl_stats {
    uint64_t steps;     /* evaluation steps */
    size_t peak_memory; /* bytes of live values at the high-water mark */
    size_t swept;       /* objects still alive at the end and freed in bulk (reference cycles
                           through namespaces or macros, or temporaries of a failed render) */
} model_tmpl_stats;

typedef struct model_tmpl_opts {
    model_tmpl_limits limits;
    time_t now;              /* the time strftime_now() formats (local time); 0: the current time */
    model_tmpl_stats *stats; /* NULL, or filled after the render */
} model_tmpl_opts;

/* Defaults: 64 MiB output, 512 MiB memory, 50M steps, depth 256 (see tmpl.c for why). */
void model_tmpl_default_opts(model_tmpl_opts *o);

/* Compiles Jinja2 source (UTF-8, `len` bytes; NULs are rejected). On failure returns NULL and
 * writes the error (see above) to err. The caller owns the result and frees it with
 * model_tmpl_free() once no render uses it. Any thread. */
model_tmpl *model_tmpl_compile(const char *source, size_t len, char *err, size_t errlen);
void model_tmpl_free(model_tmpl *t);

/* Renders with context_json, a JSON object whose members are the template's variables, e.g.
 * {"messages":[...],"tools":null,"add_generation_prompt":true,"bos_token":"<s>",...}; member
 * order is kept (dict order in the template). Returns 0 and a malloc'ed NUL-terminated string
 * in *out (caller frees), or -1 with the error in err (for raise_exception: its message).
 * Default options. Any thread. */
int model_tmpl_render(const model_tmpl *t, const char *context_json, char **out, char *err,
                      size_t errlen);

/* The same with explicit options (NULL: defaults), a context of ctx_len bytes, and the output
 * length in *out_len (the text may contain NUL characters when the context did). Returns a
 * model_tmpl_status. */
int model_tmpl_render_ex(const model_tmpl *t, const char *context_json, size_t ctx_len,
                         const model_tmpl_opts *opts, char **out, size_t *out_len, char *err,
                         size_t errlen);

/* Renders a conversation as `tandem template --input` takes it and as transformers calls the
 * template: {"messages":[...], "tools":[...]|null, "add_generation_prompt":bool,
 * "bos_token":..., "eos_token":..., "extra":{...}}. The members of "extra" become variables too
 * (winning over the others); tools and documents default to None and add_generation_prompt to
 * False, as transformers always passes them. Otherwise as model_tmpl_render_ex. */
int model_tmpl_render_conversation(const model_tmpl *t, const char *input, size_t len,
                                   const model_tmpl_opts *opts, char **out, size_t *out_len,
                                   char *err, size_t errlen);

#endif
