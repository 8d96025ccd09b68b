/* devices/remote.c — another node's device as a device of this one (devices.h). */
#include "devices/devices.h"
#include "peer/peer.h"

accel_dev *devices_open_remote(struct peer_node *n, int i, const model *m, const accel_opts *o,
                               char *err, size_t errlen)
{
    return peer_remote_open(n, i, m, o, err, errlen);
}
