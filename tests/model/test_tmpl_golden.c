/* Chat templates against transformers: every case of every tests/data/chat_templates/<name>.json (real
 * models' templates, rendered by transformers' apply_chat_template) must come out byte for byte,
 * and every error case must fail (raise_exception cases with that message, others with the same
 * Python exception type and message). */
#include "tests/model/tmpl_case.h"
#include "model/ckpt/model.h"
#include <dirent.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TMPL_FILE (16u << 20) /* templates, expected outputs: far below */

#define DIR_ "tests/data/chat_templates"

static int run_file(const char *json_path, int *cases)
{
    json_t *doc = tmpl_case_load(json_path);
    if (!doc) return 0;
    char tpath[512];
    snprintf(tpath, sizeof tpath, DIR_ "/%s", json_string_value(json_object_get(doc, "template_file")));
    size_t tlen;
    char *src = model_read_file(tpath, MAX_TMPL_FILE, &tlen);
    int ok = 1;
    if (!src) {
        t_fail(__FILE__, __LINE__, "cannot read %s", tpath);
        json_decref(doc);
        return 0;
    }
    char err[1024];
    model_tmpl *t = model_tmpl_compile(src, tlen, err, sizeof err);
    free(src);
    if (!t) {
        t_fail(__FILE__, __LINE__, "%s: %s", tpath, err);
        json_decref(doc);
        return 0;
    }
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c)
    {
        /* the conversation as `tandem template --input` takes it */
        json_t *in = json_object();
        json_object_set(in, "messages", json_object_get(c, "messages"));
        json_object_set(in, "tools", json_object_get(c, "tools") ? json_object_get(c, "tools") : json_null());
        json_object_set(in, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
        json_object_set(in, "bos_token", json_object_get(doc, "bos_token"));
        json_object_set(in, "eos_token", json_object_get(doc, "eos_token"));
        if (json_object_get(c, "extra")) json_object_set(in, "extra", json_object_get(c, "extra"));
        char *text = json_dumps(in, JSON_COMPACT);
        char what[256];
        snprintf(what, sizeof what, "%s/%s", json_string_value(json_object_get(doc, "name")),
                 json_string_value(json_object_get(c, "name")));
        ok &= tmpl_case_check(what, t, text, strlen(text), json_object_get(c, "rendered"), json_object_get(c, "error"), 1);
        (*cases)++;
        free(text);
        json_decref(in);
    }
    model_tmpl_free(t);
    json_decref(doc);
    return ok;
}

TEST(tmpl_golden_chat_templates)
{
    DIR *d = opendir(DIR_);
    REQUIRE(d != NULL);
    struct dirent *e;
    int files = 0, cases = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json")) continue;
        char path[512];
        snprintf(path, sizeof path, DIR_ "/%s", e->d_name);
        run_file(path, &cases);
        files++;
    }
    closedir(d);
    CHECK(files >= 14);
    CHECK(cases >= 112);
}

/* The CLI renders the same bytes (no newline added) and exits non-zero with the message. */
TEST(tmpl_cli_template_command)
{
    const char *dir = t_tmpdir();
    char in[512], out[512], errp[512], cmd[2048];
    snprintf(in, sizeof in, "%s/in.json", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(errp, sizeof errp, "%s/err.txt", dir);
    FILE *f = fopen(in, "w");
    REQUIRE(f);
    fputs("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":null,\"add_generation_prompt\":true,"
          "\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"extra\":{\"date_string\":\"26 Jul 2024\"}}",
          f);
    fclose(f);
    const char *bin = getenv("BUILD") ? getenv("BUILD") : "build";
    snprintf(cmd, sizeof cmd, "%s/tandem template --template " DIR_ "/llama-2-chat.jinja --input %s > %s 2> %s", bin, in, out, errp);
    int st = system(cmd);
    if (st != 0 && access(out, F_OK) != 0) SKIP("%s/tandem not built", bin);
    CHECK_EQ(st, 0);
    size_t n = 0;
    char *got = model_read_file(out, MAX_TMPL_FILE, &n);
    REQUIRE(got);
    CHECK_STR(got, "<s>[INST] Hi [/INST]");
    free(got);
    /* gemma rejects a system message through raise_exception */
    f = fopen(in, "w");
    REQUIRE(f);
    fputs("{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi\"}],"
          "\"add_generation_prompt\":true,\"bos_token\":\"<bos>\",\"eos_token\":\"<eos>\"}",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s/tandem template --template " DIR_ "/gemma-2-it.jinja --input %s > %s 2> %s", bin, in, out, errp);
    st = system(cmd);
    CHECK(st != 0);
    got = model_read_file(errp, MAX_TMPL_FILE, &n);
    REQUIRE(got);
    CHECK_STR(got, "System role not supported\n");
    free(got);
}
