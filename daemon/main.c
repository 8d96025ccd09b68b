/* tandem — one binary, subcommands. `tandem help` lists them. */
#include "daemon/cmd.h"
#include "daemon/serve.h"
#include <stdio.h>
#include <string.h>

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

/* Subcommands live in daemon/cmd_<name>.c. Weak so that the table links while a module is
 * still missing from a partial build; a missing one answers "not built". */
#define DECL(n) int dmn_cmd_##n(int argc, char **argv) __attribute__((weak));
DECL(serve) DECL(logits) DECL(generate) DECL(bench) DECL(tokenize) DECL(detokenize)
DECL(template) DECL(chat) DECL(eval) DECL(simulate) DECL(calibrate_channels) DECL(sparse_index)
#undef DECL

const dmn_cmd dmn_cmds[] = {
    {"serve", "run the daemon (OpenAI-compatible API + admin/metrics listener)", dmn_cmd_serve},
    {"generate", "complete a prompt or id list and stream the text", dmn_cmd_generate},
    {"chat", "interactive chat through the model's chat template", dmn_cmd_chat},
    {"logits", "write float32 logits of a prefill to a file", dmn_cmd_logits},
    {"eval", "teacher-forced agreement and KL of a device against golden references", dmn_cmd_eval},
    {"tokenize", "text to token ids", dmn_cmd_tokenize},
    {"detokenize", "token ids to text", dmn_cmd_detokenize},
    {"template", "render a conversation through a chat template", dmn_cmd_template},
    {"bench", "decode/prefill throughput of a device", dmn_cmd_bench},
    {"simulate", "the scheduler on a virtual clock with device timing models", dmn_cmd_simulate},
    {"sparse-index", "a sparse prefill method's block selection on raw Q and K, as JSON", dmn_cmd_sparse_index},
    {"calibrate-channels", "AsyncTLS sparse decode: pick each layer's label channels (sidecar file)",
     dmn_cmd_calibrate_channels},
    {"version", "print the version", cmd_version},
    {"help", "this list, or `tandem help COMMAND`: that command's options", cmd_help},
    {NULL, NULL, NULL},
};

static const dmn_cmd *find(const char *name)
{
    for (const dmn_cmd *c = dmn_cmds; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

static int cmd_version(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: tandem version (or tandem --version): prints \"tandem VERSION\"\n");
        return 0;
    }
    printf("tandem %s\n", DMN_VERSION);
    return 0;
}

/* `tandem help` lists the commands; `tandem help generate` is `tandem generate --help`. */
static int cmd_help(int argc, char **argv)
{
    const dmn_cmd *c = argc > 1 ? find(argv[1]) : NULL;
    if (c && c->run && c->run != cmd_help) {
        char *sub[] = {argv[1], "--help", NULL};
        return c->run(2, sub);
    }
    if (argc > 1 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") && !c) {
        fprintf(stderr, "tandem: unknown command '%s'\n", argv[1]);
        return 2;
    }
    printf("usage: tandem <command> [options]   (tandem <command> --help for its options)\n\n");
    for (c = dmn_cmds; c->name; c++)
        if (c->run) printf("  %-11s %s\n", c->name, c->summary);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))
        return cmd_help(1, argv);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) return cmd_version(argc, argv);
    const dmn_cmd *c = find(argv[1]);
    if (!c) {
        fprintf(stderr, "tandem: unknown command '%s' (tandem help lists them)\n", argv[1]);
        return 2;
    }
    if (!c->run) {
        fprintf(stderr, "tandem: '%s' is not built into this binary\n", argv[1]);
        return 2;
    }
    return c->run(argc - 1, argv + 1);
}
