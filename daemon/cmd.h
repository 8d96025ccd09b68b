/* daemon/cmd.h — the `tandem` subcommands. Each takes (argc, argv) with argv[0] = its own name
 * and returns the process exit code. */
#ifndef TANDEM_CMD_H
#define TANDEM_CMD_H

typedef struct dmn_cmd {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} dmn_cmd;

/* The subcommand table (daemon/main.c). */
extern const dmn_cmd dmn_cmds[];

#endif
