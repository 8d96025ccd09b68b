/* model/grammar/gram_check.c — what a compiled grammar must satisfy before a matcher runs it:
 *   - no left recursion: a rule that reaches itself through the first items of an alternative
 *     (past items that can match the empty text) would make the matcher's expansion endless;
 *   - the root can finish: some finite text matches it (a grammar that can never end would run
 *     every request to max_tokens and return text that no parser accepts).
 * Both are fixed points over the rules; the left-recursion walk is an iterative DFS. */
#include "model/grammar/gram_int.h"
#include <stdio.h>
#include <stdlib.h>

static int char_possible(const model_grammar *g, const gram_elem *e)
{
    return gram_char_match_range(g, e, 0, 0x10FFFF);
}

static void fixed_point(const model_grammar *g, uint8_t *out, int productive)
{
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++) {
            if (out[r]) continue;
            for (int a = g->alt_off[r]; a < g->alt_off[r + 1] && !out[r]; a++) {
                int ok = 1;
                for (int i = g->alts[a]; ok && g->el[i].kind != GRAM_ALT && g->el[i].kind != GRAM_END; i++) {
                    const gram_elem *e = &g->el[i];
                    if (e->kind == GRAM_CHAR) ok = productive && char_possible(g, e);
                    else ok = out[e->a];
                }
                if (ok) {
                    out[r] = 1;
                    changed = 1;
                }
            }
        }
    }
}

void gram_nullable(const model_grammar *g, uint8_t *out)
{
    fixed_point(g, out, 0);
}

int gram_check(const model_grammar *g, char *err, size_t errlen)
{
    int n = g->n_rules;
    uint8_t *nullable = calloc((size_t)n, 1), *productive = calloc((size_t)n, 1);
    uint8_t *color = calloc((size_t)n, 1);
    int32_t *stack = malloc(sizeof(int32_t) * 2 * (size_t)(n + 1));
    int rc = -1;
    if (!nullable || !productive || !color || !stack) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    gram_nullable(g, nullable);
    fixed_point(g, productive, 1);
    /* Left recursion: DFS over "r may start with s" edges; a grey rule met again is a cycle.
     * The stack holds (rule, next element to scan) pairs. */
    for (int s0 = 0; s0 < n; s0++) {
        if (color[s0]) continue;
        int sp = 0;
        stack[0] = s0;
        stack[1] = 0; /* index into the rule's left-edge enumeration: element position */
        color[s0] = 1;
        sp = 1;
        while (sp > 0) {
            int r = stack[2 * (sp - 1)];
            int *it = &stack[2 * (sp - 1) + 1];
            /* enumerate left edges of r: walk each alternative while items are nullable */
            int next = -1;
            int first = g->rule_start[r];
            int last = r + 1 < n ? g->rule_start[r + 1] : g->n_el;
            while (*it < last - first && next < 0) {
                int i = first + *it;
                (*it)++;
                const gram_elem *e = &g->el[i];
                if (e->kind != GRAM_REF) continue;
                /* e is a left edge when every item before it in its alternative is nullable */
                int left = 1;
                for (int j = i - 1; j >= first && g->el[j].kind != GRAM_ALT; j--)
                    if (g->el[j].kind == GRAM_CHAR || !nullable[g->el[j].a]) {
                        left = 0;
                        break;
                    }
                if (left) next = e->a;
            }
            if (next < 0) {
                color[r] = 2;
                sp--;
                continue;
            }
            if (color[next] == 1) {
                snprintf(err, errlen, "grammar: left recursion in rule '%s' (it can reach itself without matching a character)",
                         g->names[next]);
                goto out;
            }
            if (color[next] == 0) {
                color[next] = 1;
                stack[2 * sp] = next;
                stack[2 * sp + 1] = 0;
                sp++;
            }
        }
    }
    if (!productive[g->root]) {
        snprintf(err, errlen, "grammar: rule '%s' can never finish (no finite text matches it)", g->names[g->root]);
        goto out;
    }
    rc = 0;
out:
    free(nullable);
    free(productive);
    free(color);
    free(stack);
    return rc;
}
