/* proto/status.c — see status.h. */
#include "proto/status.h"
#include "proto/utf8.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *str_or_null(const char *s)
{
    if (!s) return json_null();
    if (proto_utf8_valid(s, strlen(s))) return json_string(s);
    char *t = proto_utf8_sanitize(s, strlen(s), NULL);
    json_t *v = t ? json_string(t) : NULL;
    free(t);
    return v;
}

static char *dump(json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return s;
}

char *proto_status_json(const proto_status *s)
{
    json_t *devs = json_array(), *reqs = json_array();
    for (int i = 0; devs && i < s->n_devs; i++) {
        const proto_status_dev *d = &s->devs[i];
        json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:b, s:I, s:I, s:I, s:i, s:i, s:b, s:I, s:I, s:f, s:f}",
                            "name", str_or_null(d->name), "kind", str_or_null(d->kind), "desc",
                            str_or_null(d->desc), "health", str_or_null(d->health), "warm", d->warm,
                            "mem_total", (json_int_t)d->mem_total, "mem_free", (json_int_t)d->mem_free,
                            "kv_bytes_per_token", (json_int_t)d->kv_bytes_per_token, "max_batch",
                            d->max_batch, "running", d->running, "in_step", d->in_step, "steps",
                            (json_int_t)d->steps, "tokens", (json_int_t)d->tokens, "busy_seconds",
                            d->busy_seconds, "idle_seconds", d->idle_seconds);
        if (o) {
            json_object_set_new(o, "caps", str_or_null(d->caps));
            json_object_set_new(o, "decodes", json_integer((json_int_t)d->decodes));
            json_object_set_new(o, "prefills", json_integer((json_int_t)d->prefills));
            json_object_set_new(o, "failovers", json_integer((json_int_t)d->failovers));
            json_object_set_new(o, "kv_bytes_in", json_integer((json_int_t)d->kv_bytes_in));
            /* the KV store: blocks, the prefix cache and its host tier (eviction order: least
             * recently used holder first, to the host tier while it has room) */
            json_t *kv = d->kv.paged
                ? json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                            "block_tokens", d->kv.block_tokens, "blocks_total", d->kv.blocks_total,
                            "blocks_used", d->kv.blocks_used, "blocks_cached", d->kv.blocks_cached,
                            "cached_prefixes", d->kv.holders, "host_entries", d->kv.host_entries,
                            "host_bytes", (json_int_t)d->kv.host_bytes, "evictions",
                            (json_int_t)d->kv.evictions, "host_saves", (json_int_t)d->kv.host_saves,
                            "host_dropped", (json_int_t)d->kv.host_dropped, "query_tokens",
                            (json_int_t)d->kv.queries, "hit_tokens", (json_int_t)d->kv.hits,
                            "host_hit_tokens", (json_int_t)d->kv.host_hits, "preemptions",
                            (json_int_t)d->kv.preemptions, "forks", (json_int_t)d->kv.forks)
                : json_null();
            if (kv && d->kv.paged) {
                json_object_set_new(kv, "host_budget", json_integer((json_int_t)d->kv.host_budget));
                /* who goes next: the device tier's least recently used holder (to the host tier
                 * while it has room, else dropped), then the host tier's oldest entry */
                json_object_set_new(kv, "eviction",
                    json_pack("{s:s, s:{s:i, s:f}, s:{s:i, s:f}}", "order", "lru",
                              "device_next", "blocks", d->kv.dev_next_blocks, "idle_seconds",
                              d->kv.dev_next_idle_s, "host_next", "blocks",
                              d->kv.host_next_blocks, "idle_seconds", d->kv.host_next_idle_s));
            }
            json_object_set_new(o, "kv_store", kv ? kv : json_null());
        }
        json_array_append_new(devs, o);
    }
    for (int i = 0; reqs && i < s->n_reqs; i++) {
        const proto_status_req *r = &s->reqs[i];
        json_array_append_new(
            reqs, json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:b, s:f}", "id",
                            str_or_null(r->id), "endpoint", str_or_null(r->endpoint), "state",
                            str_or_null(r->state), "client", str_or_null(r->client), "prefill",
                            str_or_null(r->prefill_dev), "decode", str_or_null(r->decode_dev),
                            "prompt_tokens", r->n_prompt, "max_tokens", r->max_tokens, "n", r->n,
                            "generated", r->generated, "stream", r->stream, "age_seconds",
                            r->age_seconds));
    }
    json_t *root = json_pack("{s:o, s:o, s:o, s:o, s:f, s:{s:i, s:i, s:i, s:i}, s:i, s:o, s:o}",
                             "state", str_or_null(s->state), "version", str_or_null(s->version),
                             "model", str_or_null(s->model), "model_dir", str_or_null(s->model_dir),
                             "uptime_seconds", s->uptime_seconds, "queue", "waiting", s->n_waiting,
                             "running", s->n_running, "max_waiting", s->max_waiting, "max_running",
                             s->max_running, "connections", s->connections, "devices",
                             devs ? devs : json_null(), "requests", reqs ? reqs : json_null());
    if (root) {
        json_object_set_new(root, "placements",
                            json_pack("{s:I, s:I, s:I}", "split", (json_int_t)s->placements_split,
                                      "fallback", (json_int_t)s->placements_fallback, "local",
                                      (json_int_t)s->placements_local));
        json_object_set_new(root, "moves", json_integer((json_int_t)s->moves));
        json_t *peers = json_array();
        for (int i = 0; peers && i < s->n_peers; i++) {
            const proto_status_peer *p = &s->peers[i];
            json_array_append_new(peers, json_pack("{s:o, s:o, s:o, s:i}", "addr", str_or_null(p->addr), "name",
                                                   str_or_null(p->name), "state", str_or_null(p->state),
                                                   "devices", p->devices));
        }
        json_object_set_new(root, "peers", peers ? peers : json_null());
        json_object_set_new(root, "lent_sequences", json_integer(s->lent_seqs));
    }
    return dump(root);
}

char *proto_health_json(const char *status, const char *detail)
{
    json_t *j = json_pack("{s:o}", "status", str_or_null(status));
    if (j && detail) json_object_set_new(j, "detail", str_or_null(detail));
    return dump(j);
}

char *proto_drain_json(int draining, int running, int waiting, int lent)
{
    return dump(json_pack("{s:b, s:i, s:i, s:i}", "draining", draining, "running", running,
                          "waiting", waiting, "lent", lent));
}
