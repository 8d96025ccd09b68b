/* daemon/cmd_serve.c — `tandem serve`: the daemon (daemon/serve.c has the process model). */
#include "daemon/cmd.h"

#include "daemon/serve.h"

int dmn_cmd_serve(int argc, char **argv)
{
    return dmn_serve_main(argc, argv);
}
