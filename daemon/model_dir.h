/* daemon/model_dir.h — where the daemon and its subcommands find a model directory: the
 * checkpoint test, the bundled stories260K beside the binary, the subcommands' default. Apart
 * from daemon/cli.c so that the config parser (daemon/config.c) links without the devices. */
#ifndef TANDEM_MODEL_DIR_H
#define TANDEM_MODEL_DIR_H
#include <stddef.h>

/* 1 when dir holds a config.json (a checkpoint directory), else 0. */
int dmn_is_model_dir(const char *dir);
/* The bundled models/stories260K found from the binary's directory: ../models (build/tandem in a
 * checkout), ../../models (build/san/tandem), ../share/tandem/models (PREFIX/bin/tandem once
 * installed). Returns 0 with its real path in out, or -1 with the binary's directory in out. */
int dmn_bundled_model(char *out, size_t n);
/* Default model directory of the subcommands: $TANDEM_MODEL, else dmn_bundled_model(), else
 * models/stories260K (relative to the working directory). Writes into out. */
void dmn_default_model(char *out, size_t n);

#endif
